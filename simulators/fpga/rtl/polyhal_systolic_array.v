`timescale 1ns/1ps
// polyhal_systolic_array: ROWS x COLS output-stationary int8 array.
//
// One beat per cycle: `in_a` is a column slice (byte r = a[r][k]) and `in_b`
// a row slice (byte c = b[k][c]) of one k; `in_first` / `in_last` mark the
// first / last k of a tile, `in_valid` a beat that computes (bubbles pass
// through). The array skews the slices itself (row r of a and the control
// bits by r cycles, column c of b by c cycles), so PE[r][c] sees k's operands
// at issue + r + c and accumulates c[r][c]. When row r's last beat leaves its
// rightmost PE the row's results are complete; `out_valid` then presents that
// row (lane c = int32 c[r][c], little-endian lanes) one cycle later: row r of
// a tile whose last beat is presented in cycle t comes out in cycle
// t + COLS + 1 + r. Rows come out in order 0..ROWS-1, one per cycle, tiles in
// issue order.
//
// Tiles may follow each other back to back provided each tile's last beat
// comes at least max(ROWS, COLS) cycles after the previous tile's: a PE's
// `result` then survives until its row has been presented, and no two rows
// are complete in the same cycle.
//
// The links between PEs are arrays of small nets, one element per link (not
// slices of one wide vector): an event simulator then wakes only the PE a
// changed link feeds.
module polyhal_systolic_array #(
    parameter integer ROWS = 8,
    parameter integer COLS = 8
) (
    input  wire                 clk,
    input  wire                 rst,
    input  wire                 in_valid,
    input  wire                 in_first,
    input  wire                 in_last,
    input  wire [8*ROWS-1:0]    in_a,
    input  wire [8*COLS-1:0]    in_b,
    output reg                  out_valid,
    output reg  [32*COLS-1:0]   out_data
);
    // Horizontal links: the a byte and {valid, first, last} entering PE[r][c]
    // are element r*(COLS+1)+c; element c = COLS is what leaves the row.
    /* verilator lint_off UNUSEDSIGNAL */
    wire [7:0] a_h [0:ROWS*(COLS+1)-1];     // the bytes leaving a row are not used
    wire       f_h [0:ROWS*(COLS+1)-1];
    /* verilator lint_on UNUSEDSIGNAL */
    wire       v_h [0:ROWS*(COLS+1)-1];
    wire       l_h [0:ROWS*(COLS+1)-1];
    // Vertical links: the b byte entering PE[r][c] is element r*COLS+c
    // (r = ROWS: leaves the array).
    /* verilator lint_off UNUSEDSIGNAL */
    wire [7:0] b_v [0:(ROWS+1)*COLS-1];
    /* verilator lint_on UNUSEDSIGNAL */
    // Row selection: sel_chain[r+1] = sel_chain[r] | (row r done ? row r : 0).
    wire [32*COLS-1:0] sel_chain [0:ROWS];
    wire [ROWS-1:0]    row_done;
    assign sel_chain[0] = {32*COLS{1'b0}};

    genvar r, c;
    generate
        // Skew of the left edge: row r delayed by r cycles.
        for (r = 0; r < ROWS; r = r + 1) begin : g_skew_a
            wire [10:0] src = {in_valid, in_first, in_last, in_a[8*r +: 8]};
            wire [10:0] dst;
            if (r == 0) begin : g_direct
                assign dst = src;
            end else begin : g_delay
                reg [10:0] sr [0:r-1];
                integer i;
                always @(posedge clk) begin
                    if (rst) begin
                        for (i = 0; i < r; i = i + 1) sr[i] <= 11'd0;
                    end else begin
                        sr[0] <= src;
                        for (i = 1; i < r; i = i + 1) sr[i] <= sr[i-1];
                    end
                end
                assign dst = sr[r-1];
            end
            assign a_h[r*(COLS+1)] = dst[7:0];
            assign l_h[r*(COLS+1)] = dst[8];
            assign f_h[r*(COLS+1)] = dst[9];
            assign v_h[r*(COLS+1)] = dst[10];
        end
        // Skew of the top edge: column c delayed by c cycles.
        for (c = 0; c < COLS; c = c + 1) begin : g_skew_b
            if (c == 0) begin : g_direct
                assign b_v[0] = in_b[7:0];
            end else begin : g_delay
                reg [7:0] sr [0:c-1];
                integer i;
                always @(posedge clk) begin
                    sr[0] <= in_b[8*c +: 8];
                    for (i = 1; i < c; i = i + 1) sr[i] <= sr[i-1];
                end
                assign b_v[c] = sr[c-1];
            end
        end
        for (r = 0; r < ROWS; r = r + 1) begin : g_row
            wire [32*COLS-1:0] row_res;     // lane c: PE[r][c]'s result
            for (c = 0; c < COLS; c = c + 1) begin : g_col
                wire [31:0] res;
                polyhal_pe u_pe (
                    .clk(clk),
                    .rst(rst),
                    .a_in(a_h[r*(COLS+1)+c]),
                    .b_in(b_v[r*COLS+c]),
                    .v_in(v_h[r*(COLS+1)+c]),
                    .f_in(f_h[r*(COLS+1)+c]),
                    .l_in(l_h[r*(COLS+1)+c]),
                    .a_out(a_h[r*(COLS+1)+c+1]),
                    .b_out(b_v[(r+1)*COLS+c]),
                    .v_out(v_h[r*(COLS+1)+c+1]),
                    .f_out(f_h[r*(COLS+1)+c+1]),
                    .l_out(l_h[r*(COLS+1)+c+1]),
                    .result(res)
                );
                assign row_res[32*c +: 32] = res;
            end
            assign row_done[r] = v_h[r*(COLS+1)+COLS] & l_h[r*(COLS+1)+COLS];
            // At most one row is done per cycle: a one-hot OR selects it.
            assign sel_chain[r+1] = sel_chain[r] | ({32*COLS{row_done[r]}} & row_res);
        end
    endgenerate

    always @(posedge clk) begin
        if (rst) out_valid <= 1'b0;
        else out_valid <= |row_done;
        out_data <= sel_chain[ROWS];
    end
endmodule
