`timescale 1ns/1ps
// polyhal_gemm_engine: the GEMM command's sequencer around the systolic array.
//
// On `start` it latches MT, NT, K and the A / B / C entry bases (docs/fpga.md,
// "Layouts"), checks that every entry it would touch lies in its buffer
// (else status 3, nothing computed), then for mt < MT, nt < NT issues one
// tile of max(K, ROWS, COLS) beats: beat k < K reads A entry A_base + mt*K + k
// and B entry B_base + k*NT + nt (one word of each buffer per cycle, lane
// selected) and feeds the array; the remaining beats are bubbles. K = 0 issues
// one all-zero beat per tile, so the tile's entries are written with zeros.
// Finished rows leave the array one per cycle and are written to C entry
// C_base + (mt*ROWS + r)*NT + nt with a lane write. `done` pulses (with
// `status`) once the last row is written; `mac_beat` pulses for every beat
// k < K that enters the array.
module polyhal_gemm_engine #(
    parameter integer ROWS = 8,
    parameter integer COLS = 8,
    parameter integer WORD_BYTES = 128,
    parameter integer A_WORDS = 1024,
    parameter integer B_WORDS = 1024,
    parameter integer C_WORDS = 4096
) (
    input  wire                            clk,
    input  wire                            rst,
    input  wire                            start,
    input  wire [31:0]                     arg_mt,
    input  wire [31:0]                     arg_nt,
    input  wire [31:0]                     arg_k,
    input  wire [31:0]                     arg_a_base,
    input  wire [31:0]                     arg_b_base,
    input  wire [31:0]                     arg_c_base,
    output reg                             busy,
    output reg                             done,
    output reg  [1:0]                      status,
    output reg                             mac_beat,
    output wire [15:0]                     a_raddr,
    input  wire [8*WORD_BYTES-1:0]         a_rdata,
    output wire [15:0]                     b_raddr,
    input  wire [8*WORD_BYTES-1:0]         b_rdata,
    output reg  [WORD_BYTES/(4*COLS)-1:0]  c_we,
    output reg  [15:0]                     c_waddr,
    output reg  [8*WORD_BYTES-1:0]         c_wdata
);
    localparam integer W = WORD_BYTES;
    localparam integer A_EPW = W / ROWS;          // A entries per word
    localparam integer B_EPW = W / COLS;
    localparam integer C_EPW = W / (4 * COLS);
    localparam integer A_LOG = $clog2(A_EPW);
    localparam integer B_LOG = $clog2(B_EPW);
    localparam integer C_LOG = $clog2(C_EPW);
    localparam integer R_LOG = $clog2(ROWS);
    localparam integer KMIN = (ROWS > COLS) ? ROWS : COLS;
    localparam [71:0] A_ENTRIES = A_WORDS * A_EPW;
    localparam [71:0] B_ENTRIES = B_WORDS * B_EPW;
    localparam [71:0] C_ENTRIES = C_WORDS * C_EPW;
    localparam [C_EPW-1:0] LANE0 = 1;

    localparam [2:0] S_IDLE = 3'd0, S_CHK1 = 3'd1, S_CHK2 = 3'd2, S_RUN = 3'd3,
                     S_WAIT = 3'd4;
    reg [2:0] state;

    reg [31:0] mt, nt, k, a_base, b_base, c_base;
    reg [71:0] a_need, b_need, c_need;
    reg [31:0] kp;                 // beats per tile

    // Issue side.
    reg [31:0] i_mt, i_nt, i_j;
    reg [31:0] a_row, a_ent, b_col, b_ent;

    wire issuing = (state == S_RUN);
    wire beat_valid = (k == 32'd0) ? (i_j == 32'd0) : (i_j < k);
    wire beat_first = (i_j == 32'd0);
    wire beat_last = (k == 32'd0) ? (i_j == 32'd0) : (i_j == k - 32'd1);
    wire beat_zero = (k == 32'd0);

    /* verilator lint_off UNUSEDSIGNAL */
    wire [31:0] a_word = a_ent >> A_LOG;
    wire [31:0] b_word = b_ent >> B_LOG;
    wire [31:0] a_lane = a_ent & (A_EPW - 1);
    wire [31:0] b_lane = b_ent & (B_EPW - 1);
    /* verilator lint_on UNUSEDSIGNAL */
    assign a_raddr = a_word[15:0];
    assign b_raddr = b_word[15:0];

    // Stage 1 (RAM read in flight) and stage 2 (array inputs).
    reg        s1_v, s1_f, s1_l, s1_z;
    reg [9:0]  s1_al, s1_bl;
    reg        s2_v, s2_f, s2_l;
    reg [8*ROWS-1:0] s2_a;
    reg [8*COLS-1:0] s2_b;

    wire [8*ROWS-1:0] a_sel = a_rdata[8*ROWS*s1_al +: 8*ROWS];
    wire [8*COLS-1:0] b_sel = b_rdata[8*COLS*s1_bl +: 8*COLS];

    always @(posedge clk) begin
        if (rst) begin
            s1_v <= 1'b0;
            s2_v <= 1'b0;
        end else begin
            s1_v <= issuing & beat_valid;
            s2_v <= s1_v;
        end
        s1_f <= beat_first;
        s1_l <= beat_last;
        s1_z <= beat_zero;
        s1_al <= a_lane[9:0];
        s1_bl <= b_lane[9:0];
        s2_f <= s1_f;
        s2_l <= s1_l;
        s2_a <= s1_z ? {8*ROWS{1'b0}} : a_sel;
        s2_b <= s1_z ? {8*COLS{1'b0}} : b_sel;
    end

    wire              arr_valid;
    wire [32*COLS-1:0] arr_data;
    polyhal_systolic_array #(.ROWS(ROWS), .COLS(COLS)) u_array (
        .clk(clk),
        .rst(rst),
        .in_valid(s2_v),
        .in_first(s2_f),
        .in_last(s2_l),
        .in_a(s2_a),
        .in_b(s2_b),
        .out_valid(arr_valid),
        .out_data(arr_data)
    );

    // Drain side: rows arrive in order; w_ent is C_base + (mt*ROWS + r)*NT + nt.
    reg [31:0] w_r, w_nt, w_mt;
    reg [31:0] w_row, w_tile, w_ent, rnt;
    /* verilator lint_off UNUSEDSIGNAL */
    wire [31:0] c_word = w_ent >> C_LOG;
    wire [31:0] c_lane = w_ent & (C_EPW - 1);
    /* verilator lint_on UNUSEDSIGNAL */
    wire w_last_row = (w_r == ROWS - 1);
    wire w_last_nt = (w_nt == nt - 32'd1);
    wire w_last_mt = (w_mt == mt - 32'd1);

    // Range checks (CHK2).
    wire a_bad = (a_need != 72'd0) && ({40'd0, a_base} + a_need > A_ENTRIES);
    wire b_bad = (b_need != 72'd0) && ({40'd0, b_base} + b_need > B_ENTRIES);
    wire c_bad = (c_need != 72'd0) && ({40'd0, c_base} + c_need > C_ENTRIES);

    always @(posedge clk) begin
        done <= 1'b0;
        mac_beat <= 1'b0;
        c_we <= {C_EPW{1'b0}};
        if (rst) begin
            state <= S_IDLE;
            busy <= 1'b0;
            status <= 2'd0;
        end else begin
            case (state)
                S_IDLE: begin
                    if (start) begin
                        mt <= arg_mt;
                        nt <= arg_nt;
                        k <= arg_k;
                        a_base <= arg_a_base;
                        b_base <= arg_b_base;
                        c_base <= arg_c_base;
                        busy <= 1'b1;
                        state <= S_CHK1;
                    end
                end
                S_CHK1: begin
                    a_need <= {40'd0, mt} * {40'd0, k};
                    b_need <= {40'd0, k} * {40'd0, nt};
                    c_need <= ({40'd0, mt} * {40'd0, nt}) << R_LOG;
                    state <= S_CHK2;
                end
                S_CHK2: begin
                    kp <= (k > KMIN) ? k : KMIN;
                    i_mt <= 32'd0;
                    i_nt <= 32'd0;
                    i_j <= 32'd0;
                    a_row <= a_base;
                    a_ent <= a_base;
                    b_col <= b_base;
                    b_ent <= b_base;
                    w_r <= 32'd0;
                    w_nt <= 32'd0;
                    w_mt <= 32'd0;
                    w_row <= c_base;
                    w_tile <= c_base;
                    w_ent <= c_base;
                    rnt <= nt << R_LOG;
                    if (a_bad || b_bad || c_bad) begin
                        status <= 2'd3;
                        done <= 1'b1;
                        busy <= 1'b0;
                        state <= S_IDLE;
                    end else if (mt == 32'd0 || nt == 32'd0) begin
                        status <= 2'd0;
                        done <= 1'b1;
                        busy <= 1'b0;
                        state <= S_IDLE;
                    end else begin
                        status <= 2'd0;
                        state <= S_RUN;
                    end
                end
                S_RUN: begin
                    if (beat_valid && !beat_zero) mac_beat <= 1'b1;
                    if (i_j == kp - 32'd1) begin
                        i_j <= 32'd0;
                        if (i_nt == nt - 32'd1) begin
                            i_nt <= 32'd0;
                            b_col <= b_base;
                            b_ent <= b_base;
                            a_row <= a_row + k;
                            a_ent <= a_row + k;
                            i_mt <= i_mt + 32'd1;
                            if (i_mt == mt - 32'd1) state <= S_WAIT;
                        end else begin
                            i_nt <= i_nt + 32'd1;
                            b_col <= b_col + 32'd1;
                            b_ent <= b_col + 32'd1;
                            a_ent <= a_row;
                        end
                    end else begin
                        i_j <= i_j + 32'd1;
                        if (i_j + 32'd1 < k) begin
                            a_ent <= a_ent + 32'd1;
                            b_ent <= b_ent + nt;
                        end
                    end
                end
                default: ;  // S_WAIT: the drain side finishes the command
            endcase

            if (arr_valid) begin
                c_we <= LANE0 << c_lane[9:0];
                c_waddr <= c_word[15:0];
                c_wdata <= {C_EPW{arr_data}};
                if (w_last_row) begin
                    w_r <= 32'd0;
                    if (w_last_nt) begin
                        w_nt <= 32'd0;
                        w_mt <= w_mt + 32'd1;
                        w_row <= w_row + rnt;
                        w_tile <= w_row + rnt;
                        w_ent <= w_row + rnt;
                        if (w_last_mt) begin
                            done <= 1'b1;
                            busy <= 1'b0;
                            state <= S_IDLE;
                        end
                    end else begin
                        w_nt <= w_nt + 32'd1;
                        w_tile <= w_tile + 32'd1;
                        w_ent <= w_tile + 32'd1;
                    end
                end else begin
                    w_r <= w_r + 32'd1;
                    w_ent <= w_ent + nt;
                end
            end
        end
    end
endmodule
