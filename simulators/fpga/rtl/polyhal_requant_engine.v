`timescale 1ns/1ps
// polyhal_requant_engine: the REQUANT command's sequencer.
//
// On `start` it latches M, NT, zero_point, flags and the C / Q entry and P
// record bases, checks the ranges (status 3 if any touched entry or record is
// outside its buffer), scans the P records it will use (status 3, nothing
// written, if a shift exceeds 63 or a multiplier is negative), then for each
// nt loads the COLS records P_base + nt*COLS + c into one of two parameter
// banks, one P word per cycle (the next nt loads while the current one
// streams), and streams C entries C_base + m*NT + nt, one per cycle, through
// COLS requantizer lanes into Q entries Q_base + m*NT + nt. `done` pulses
// with `status`.
module polyhal_requant_engine #(
    parameter integer COLS = 8,
    parameter integer WORD_BYTES = 128,
    parameter integer C_WORDS = 4096,
    parameter integer Q_WORDS = 1024,
    parameter integer P_WORDS = 64
) (
    input  wire                        clk,
    input  wire                        rst,
    input  wire                        start,
    input  wire [31:0]                 arg_m,
    input  wire [31:0]                 arg_nt,
    input  wire [7:0]                  arg_zp,
    input  wire [2:0]                  arg_flags,
    input  wire [31:0]                 arg_c_base,
    input  wire [31:0]                 arg_q_base,
    input  wire [31:0]                 arg_p_base,
    output reg                         busy,
    output reg                         done,
    output reg  [1:0]                  status,
    output wire [15:0]                 c_raddr,
    input  wire [8*WORD_BYTES-1:0]     c_rdata,
    output wire [15:0]                 p_raddr,
    input  wire [8*WORD_BYTES-1:0]     p_rdata,
    output wire [WORD_BYTES/COLS-1:0]  q_we,
    output wire [15:0]                 q_waddr,
    output wire [8*WORD_BYTES-1:0]     q_wdata
);
    localparam integer W = WORD_BYTES;
    localparam integer C_EPW = W / (4 * COLS);
    localparam integer Q_EPW = W / COLS;
    localparam integer RPW = W / 16;               // P records per word
    localparam integer C_LOG = $clog2(C_EPW);
    localparam integer Q_LOG = $clog2(Q_EPW);
    localparam integer P_LOG = $clog2(RPW);
    localparam integer COL_LOG = $clog2(COLS);
    localparam [71:0] C_ENTRIES = C_WORDS * C_EPW;
    localparam [71:0] Q_ENTRIES = Q_WORDS * Q_EPW;
    localparam [71:0] P_RECORDS = P_WORDS * RPW;
    localparam [Q_EPW-1:0] LANE0 = 1;
    localparam integer TAG_W = 26;

    localparam [2:0] S_IDLE = 3'd0, S_CHK1 = 3'd1, S_CHK2 = 3'd2, S_SCAN = 3'd3,
                     S_SCANW = 3'd4, S_RUN = 3'd5;
    reg [2:0] state;

    reg [31:0] m, nt, c_base, q_base, p_base;
    reg [7:0]  zp;
    reg [2:0]  flags;
    reg [71:0] mnt, pcount;
    reg [31:0] p_end;

    wire c_bad = {40'd0, c_base} + mnt > C_ENTRIES;
    wire q_bad = {40'd0, q_base} + mnt > Q_ENTRIES;
    wire p_bad = {40'd0, p_base} + pcount > P_RECORDS;

    // ---- scan of the P records in [p_base, p_end) ----
    reg [31:0] s_w, s_last, sc_w;
    reg        sc_v, scan_bad;
    reg        scan_hit;
    reg [47:0] rec_idx;
    integer    li;
    always @* begin
        scan_hit = 1'b0;
        for (li = 0; li < RPW; li = li + 1) begin
            rec_idx = ({16'd0, sc_w} << P_LOG) + {16'd0, li[31:0]};
            if (rec_idx >= {16'd0, p_base} && rec_idx < {16'd0, p_end}
                && (p_rdata[128*li+32 +: 8] > 8'd63 || p_rdata[128*li+31]))
                scan_hit = 1'b1;
        end
    end

    // ---- loader: records into the parameter banks, a P word per cycle ----
    // Column tile l_nt uses records l_r0 .. l_r0 + COLS - 1, in P words l_w ..
    // l_wlast; each word read writes every record of the tile it holds.
    reg [31:0] l_nt, l_r0, l_w, l_wlast;
    reg [1:0]  full;
    wire       l_go = (state == S_RUN) && (l_nt < nt) && !full[l_nt[0]];
    wire       l_end = (l_w == l_wlast);
    wire [31:0] l_r1 = l_r0 + COLS;                  // the next tile's first record
    reg        lp_v, lp_b, lp_last;
    reg [31:0] lp_r0, lp_w;
    assign p_raddr = (state == S_SCAN) ? s_w[15:0] : l_w[15:0];

    // ---- issuer: C entries into the lanes ----
    reg [31:0] i_nt, i_m, i_cent, i_qent, i_ccol, i_qcol;
    wire       i_go = (state == S_RUN) && (i_nt < nt) && full[i_nt[0]];
    reg        ip_v, ip_b;
    reg [9:0]  ip_cl;
    reg [TAG_W-1:0] ip_tag;
    /* verilator lint_off UNUSEDSIGNAL */
    wire [31:0] c_word = i_cent >> C_LOG;
    wire [31:0] c_lane = i_cent & (C_EPW - 1);
    wire [31:0] q_word = i_qent >> Q_LOG;
    wire [31:0] q_lane = i_qent & (Q_EPW - 1);
    /* verilator lint_on UNUSEDSIGNAL */
    assign c_raddr = c_word[15:0];

    // ---- the two parameter banks, one set of registers per column ----
    wire [32*COLS-1:0] v_mult, v_bias;
    wire [6*COLS-1:0]  v_shift;
    genvar gc;
    generate
        for (gc = 0; gc < COLS; gc = gc + 1) begin : g_bank
            /* verilator lint_off UNUSEDSIGNAL */
            wire [31:0]  idx = lp_r0 + gc;           // this column's record
            wire [31:0]  iw = idx >> P_LOG;
            wire [31:0]  is = idx & (RPW - 1);
            wire [127:0] rec = p_rdata[128*is[9:0] +: 128];
            /* verilator lint_on UNUSEDSIGNAL */
            wire         hit = lp_v && (iw == lp_w);
            reg [31:0]   mult0, mult1, bias0, bias1;
            reg [5:0]    shift0, shift1;
            always @(posedge clk) begin
                if (hit && !lp_b) begin
                    mult0 <= rec[31:0];
                    shift0 <= rec[37:32];
                    bias0 <= rec[95:64];
                end
                if (hit && lp_b) begin
                    mult1 <= rec[31:0];
                    shift1 <= rec[37:32];
                    bias1 <= rec[95:64];
                end
            end
            assign v_mult[32*gc +: 32] = ip_b ? mult1 : mult0;
            assign v_shift[6*gc +: 6] = ip_b ? shift1 : shift0;
            assign v_bias[32*gc +: 32] = ip_b ? bias1 : bias0;
        end
    endgenerate

    wire                 rq_valid;
    wire [8*COLS-1:0]    rq_y;
    wire [TAG_W-1:0]     rq_tag;
    polyhal_requant #(.LANES(COLS), .TAG_W(TAG_W)) u_lanes (
        .clk(clk),
        .rst(rst),
        .in_valid(ip_v),
        .in_x(c_rdata[32*COLS*ip_cl +: 32*COLS]),
        .in_mult(v_mult),
        .in_shift(v_shift),
        .in_bias(v_bias),
        .in_bias_en(flags[2]),
        .in_half_even(flags[1]),
        .in_relu(flags[0]),
        .in_zp(zp),
        .in_tag(ip_tag),
        .out_valid(rq_valid),
        .out_y(rq_y),
        .out_tag(rq_tag)
    );
    assign q_we = rq_valid ? (LANE0 << rq_tag[9:0]) : {Q_EPW{1'b0}};
    assign q_waddr = rq_tag[25:10];
    assign q_wdata = {Q_EPW{rq_y}};

    reg [31:0] wr_cnt;

    always @(posedge clk) begin
        done <= 1'b0;
        sc_v <= 1'b0;
        lp_v <= 1'b0;
        ip_v <= 1'b0;
        if (rst) begin
            state <= S_IDLE;
            busy <= 1'b0;
            status <= 2'd0;
            full <= 2'b00;
        end else begin
            case (state)
                S_IDLE: begin
                    if (start) begin
                        m <= arg_m;
                        nt <= arg_nt;
                        zp <= arg_zp;
                        flags <= arg_flags;
                        c_base <= arg_c_base;
                        q_base <= arg_q_base;
                        p_base <= arg_p_base;
                        busy <= 1'b1;
                        state <= S_CHK1;
                    end
                end
                S_CHK1: begin
                    mnt <= {40'd0, m} * {40'd0, nt};
                    pcount <= {40'd0, nt} << COL_LOG;
                    state <= S_CHK2;
                end
                S_CHK2: begin
                    p_end <= p_base + pcount[31:0];
                    s_w <= p_base >> P_LOG;
                    s_last <= (p_base + pcount[31:0] - 32'd1) >> P_LOG;
                    scan_bad <= 1'b0;
                    status <= 2'd0;
                    if (mnt == 72'd0) begin
                        done <= 1'b1;
                        busy <= 1'b0;
                        state <= S_IDLE;
                    end else if (c_bad || q_bad || p_bad) begin
                        status <= 2'd3;
                        done <= 1'b1;
                        busy <= 1'b0;
                        state <= S_IDLE;
                    end else begin
                        state <= S_SCAN;
                    end
                end
                S_SCAN: begin
                    sc_v <= 1'b1;
                    sc_w <= s_w;
                    s_w <= s_w + 32'd1;
                    if (s_w == s_last) state <= S_SCANW;
                end
                S_SCANW: begin
                    l_nt <= 32'd0;
                    l_r0 <= p_base;
                    l_w <= p_base >> P_LOG;
                    l_wlast <= (p_base + COLS - 1) >> P_LOG;
                    i_nt <= 32'd0;
                    i_m <= 32'd0;
                    i_cent <= c_base;
                    i_qent <= q_base;
                    i_ccol <= c_base;
                    i_qcol <= q_base;
                    wr_cnt <= 32'd0;
                    full <= 2'b00;
                    if (scan_bad || scan_hit) begin
                        status <= 2'd3;
                        done <= 1'b1;
                        busy <= 1'b0;
                        state <= S_IDLE;
                    end else begin
                        state <= S_RUN;
                    end
                end
                S_RUN: begin
                    if (l_go) begin
                        lp_v <= 1'b1;
                        lp_b <= l_nt[0];
                        lp_r0 <= l_r0;
                        lp_w <= l_w;
                        lp_last <= l_end;
                        if (l_end) begin
                            l_nt <= l_nt + 32'd1;
                            l_r0 <= l_r1;
                            l_w <= l_r1 >> P_LOG;
                            l_wlast <= (l_r1 + COLS - 1) >> P_LOG;
                        end else begin
                            l_w <= l_w + 32'd1;
                        end
                    end
                    if (i_go) begin
                        ip_v <= 1'b1;
                        ip_b <= i_nt[0];
                        ip_cl <= c_lane[9:0];
                        ip_tag <= {q_word[15:0], q_lane[9:0]};
                        if (i_m == m - 32'd1) begin
                            i_m <= 32'd0;
                            i_nt <= i_nt + 32'd1;
                            full[i_nt[0]] <= 1'b0;
                            i_ccol <= i_ccol + 32'd1;
                            i_cent <= i_ccol + 32'd1;
                            i_qcol <= i_qcol + 32'd1;
                            i_qent <= i_qcol + 32'd1;
                        end else begin
                            i_m <= i_m + 32'd1;
                            i_cent <= i_cent + nt;
                            i_qent <= i_qent + nt;
                        end
                    end
                    if (rq_valid) begin
                        wr_cnt <= wr_cnt + 32'd1;
                        if (wr_cnt == mnt[31:0] - 32'd1) begin
                            done <= 1'b1;
                            busy <= 1'b0;
                            state <= S_IDLE;
                        end
                    end
                end
                default: state <= S_IDLE;
            endcase
            if (sc_v && scan_hit) scan_bad <= 1'b1;
            if (lp_v && lp_last) full[lp_b] <= 1'b1;
        end
    end
endmodule
