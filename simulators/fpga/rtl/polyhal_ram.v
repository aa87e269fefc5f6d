`timescale 1ns/1ps
// polyhal_ram: simple dual-port synchronous RAM.
//
// One write port with per-lane write enables (the word is LANES lanes of
// WIDTH/LANES bits; lane l is bits [l*LW +: LW]) and one read port whose data
// is registered (read latency one cycle). The contents start cleared so that
// both simulators read zeros (not X) from words never written.
module polyhal_ram #(
    parameter integer WIDTH = 1024,
    parameter integer LANES = 1,
    parameter integer DEPTH = 1024
) (
    input  wire             clk,
    input  wire [LANES-1:0] we,
    input  wire [15:0]      waddr,
    input  wire [WIDTH-1:0] wdata,
    input  wire [15:0]      raddr,
    output wire [WIDTH-1:0] rdata
);
    localparam integer LW = WIDTH / LANES;
    localparam integer AW = (DEPTH > 1) ? $clog2(DEPTH) : 1;
    // Addresses are 16 bits everywhere; the RAM decodes the bits it needs.
    /* verilator lint_off UNUSEDSIGNAL */
    wire [15:0] wa = waddr;
    wire [15:0] ra = raddr;
    /* verilator lint_on UNUSEDSIGNAL */

    genvar l;
    generate
        for (l = 0; l < LANES; l = l + 1) begin : g_lane
            reg [LW-1:0] mem [0:DEPTH-1];
            reg [LW-1:0] q;
            integer i;
            initial begin
                for (i = 0; i < DEPTH; i = i + 1) mem[i] = {LW{1'b0}};
                q = {LW{1'b0}};
            end
            always @(posedge clk) begin
                if (we[l]) mem[wa[AW-1:0]] <= wdata[l*LW +: LW];
                q <= mem[ra[AW-1:0]];
            end
            assign rdata[l*LW +: LW] = q;
        end
    endgenerate
endmodule
