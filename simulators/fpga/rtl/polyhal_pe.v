`timescale 1ns/1ps
// polyhal_pe: one processing element of the output-stationary systolic array.
//
// Each cycle it multiplies the int8 operands on its inputs and, on a valid
// beat, accumulates the int16 product into a 32-bit wrapping accumulator
// (`first` starts a new sum: acc = a*b). On the last beat of a tile the final
// sum is also captured in `result`, which holds it while the next tile
// accumulates. Operands and control move on one PE per cycle: a and the
// control bits to the right, b downwards.
module polyhal_pe (
    input  wire        clk,
    input  wire        rst,
    input  wire [7:0]  a_in,
    input  wire [7:0]  b_in,
    input  wire        v_in,
    input  wire        f_in,
    input  wire        l_in,
    output reg  [7:0]  a_out,
    output reg  [7:0]  b_out,
    output reg         v_out,
    output reg         f_out,
    output reg         l_out,
    output reg  [31:0] result
);
    reg  [31:0] acc;

    // Temporaries of the clocked block (blocking, not state): computing the sum
    // there rather than with continuous assignments halves the events an event
    // simulator (Icarus) processes per PE and cycle.
    reg signed [31:0] prod;     // a * b, int8 x int8 sign-extended (|a * b| <= 2^14)
    reg [31:0] sum;             // (first ? 0 : acc) + prod, wrapping

    always @(posedge clk) begin
        a_out <= a_in;
        b_out <= b_in;
        if (rst) begin
            v_out <= 1'b0;
            f_out <= 1'b0;
            l_out <= 1'b0;
            acc <= 32'd0;
            result <= 32'd0;
        end else begin
            v_out <= v_in;
            f_out <= f_in;
            l_out <= l_in;
            if (v_in) begin
                /* verilator lint_off BLKSEQ */
                prod = $signed(a_in) * $signed(b_in);
                sum = (f_in ? 32'd0 : acc) + prod;
                /* verilator lint_on BLKSEQ */
                acc <= sum;
                if (l_in) result <= sum;
            end
        end
    end
endmodule
