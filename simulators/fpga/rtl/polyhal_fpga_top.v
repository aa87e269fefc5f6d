`timescale 1ns/1ps
// polyhal_fpga_top: the polyhal FPGA device (docs/fpga.md, "The device").
//
// A command decoder on a valid/ready word stream in, a status/data word
// stream out, five word-wide buffers (A, B int8 operands; C int32 results;
// P per-column requantization records; Q int8 results), the GEMM engine
// (systolic array) and the REQUANT engine. Every command answers with one
// status word: {.., cycles of this command, MAC beats (64), cycle counter
// (64), status, opcode} in 32-bit little-endian fields.
module polyhal_fpga_top #(
    parameter integer ROWS = 8,
    parameter integer COLS = 8,
    parameter integer WORD_BYTES = 128,
    parameter integer A_WORDS = 1024,
    parameter integer B_WORDS = 1024,
    parameter integer C_WORDS = 4096,
    parameter integer Q_WORDS = 1024,
    parameter integer P_WORDS = 64
) (
    input  wire                     clk,
    input  wire                     rst,
    input  wire                     in_valid,
    output wire                     in_ready,
    input  wire [8*WORD_BYTES-1:0]  in_data,
    output wire                     out_valid,
    input  wire                     out_ready,
    output wire [8*WORD_BYTES-1:0]  out_data,
    output wire                     busy
);
    localparam integer W = WORD_BYTES;
    localparam integer DW = 8 * W;
    localparam integer C_LANES = W / (4 * COLS);
    localparam integer Q_LANES = W / COLS;

    localparam [31:0] OP_WRITE = 32'd1, OP_READ = 32'd2, OP_GEMM = 32'd3,
                      OP_REQUANT = 32'd4, OP_STATUS = 32'd5;
    localparam [2:0] ST_IDLE = 3'd0, ST_WPAY = 3'd1, ST_READ = 3'd2, ST_GEMM = 3'd3,
                     ST_REQ = 3'd4, ST_STATUS = 3'd5;

    reg [2:0]  st;
    reg [63:0] cyc;
    reg [63:0] macs;
    reg [31:0] op;
    reg [63:0] hdr_cyc;
    reg [1:0]  result;

    wire [31:0] f0 = in_data[31:0];
    wire [31:0] f1 = in_data[63:32];
    wire [31:0] f2 = in_data[95:64];
    wire [31:0] f3 = in_data[127:96];
    wire [31:0] f4 = in_data[159:128];
    wire [31:0] f5 = in_data[191:160];
    wire [31:0] f6 = in_data[223:192];
    wire [31:0] f7 = in_data[255:224];

    wire in_fire = in_valid & in_ready;
    wire hdr_fire = in_fire && (st == ST_IDLE);
    assign in_ready = (st == ST_IDLE) || (st == ST_WPAY);
    assign busy = (st != ST_IDLE);

    // ---- WRITE / READ address checks ----
    localparam [31:0] A_D = A_WORDS, B_D = B_WORDS, C_D = C_WORDS, P_D = P_WORDS,
                      Q_D = Q_WORDS;
    reg [31:0] depth;
    always @* begin
        case (f1)
            32'd0: depth = A_D;
            32'd1: depth = B_D;
            32'd2: depth = C_D;
            32'd3: depth = P_D;
            32'd4: depth = Q_D;
            default: depth = 32'd0;
        endcase
    end
    wire xfer_ok = (f1 <= 32'd4) && ((f3 == 32'd0) || ({1'b0, f2} + {1'b0, f3} <= {1'b0, depth}));

    reg        x_ok;        // WRITE/READ in range
    reg [2:0]  x_buf;
    reg [15:0] x_addr;
    reg [31:0] x_left;      // WRITE: words still to come; READ: reads still to issue

    // ---- out stream FIFO (4 words) ----
    reg [DW-1:0] fifo [0:3];
    reg [1:0]    f_wp, f_rp;
    reg [2:0]    f_cnt;
    reg          rd_v1;      // a READ word arrives from its RAM this cycle
    wire         pop = out_valid & out_ready;
    assign out_valid = (f_cnt != 3'd0);
    assign out_data = fifo[f_rp];

    wire rd_issue = (st == ST_READ) && (x_left != 32'd0) && ({1'b0, f_cnt} + {3'd0, rd_v1} < 4'd4);

    // ---- engines ----
    wire        g_busy, g_done, g_beat;
    wire [1:0]  g_status;
    wire [15:0] g_a_raddr, g_b_raddr, g_c_waddr;
    wire [C_LANES-1:0] g_c_we;
    wire [DW-1:0] g_c_wdata;
    wire        r_busy, r_done;
    wire [1:0]  r_status;
    wire [15:0] r_c_raddr, r_p_raddr, r_q_waddr;
    wire [Q_LANES-1:0] r_q_we;
    wire [DW-1:0] r_q_wdata;

    wire [DW-1:0] a_rdata, b_rdata, c_rdata, p_rdata, q_rdata;

    polyhal_gemm_engine #(
        .ROWS(ROWS), .COLS(COLS), .WORD_BYTES(W),
        .A_WORDS(A_WORDS), .B_WORDS(B_WORDS), .C_WORDS(C_WORDS)
    ) u_gemm (
        .clk(clk), .rst(rst),
        .start(hdr_fire && f0 == OP_GEMM),
        .arg_mt(f1), .arg_nt(f2), .arg_k(f3),
        .arg_a_base(f4), .arg_b_base(f5), .arg_c_base(f6),
        .busy(g_busy), .done(g_done), .status(g_status), .mac_beat(g_beat),
        .a_raddr(g_a_raddr), .a_rdata(a_rdata),
        .b_raddr(g_b_raddr), .b_rdata(b_rdata),
        .c_we(g_c_we), .c_waddr(g_c_waddr), .c_wdata(g_c_wdata)
    );

    polyhal_requant_engine #(
        .COLS(COLS), .WORD_BYTES(W),
        .C_WORDS(C_WORDS), .Q_WORDS(Q_WORDS), .P_WORDS(P_WORDS)
    ) u_requant (
        .clk(clk), .rst(rst),
        .start(hdr_fire && f0 == OP_REQUANT),
        .arg_m(f1), .arg_nt(f2), .arg_zp(f3[7:0]), .arg_flags(f4[2:0]),
        .arg_c_base(f5), .arg_q_base(f6), .arg_p_base(f7),
        .busy(r_busy), .done(r_done), .status(r_status),
        .c_raddr(r_c_raddr), .c_rdata(c_rdata),
        .p_raddr(r_p_raddr), .p_rdata(p_rdata),
        .q_we(r_q_we), .q_waddr(r_q_waddr), .q_wdata(r_q_wdata)
    );

    // ---- buffers ----
    wire wr_fire = in_fire && (st == ST_WPAY) && x_ok;
    wire reading = (st == ST_READ);

    polyhal_ram #(.WIDTH(DW), .LANES(1), .DEPTH(A_WORDS)) u_a (
        .clk(clk), .we(wr_fire && x_buf == 3'd0), .waddr(x_addr), .wdata(in_data),
        .raddr(reading ? x_addr : g_a_raddr), .rdata(a_rdata));
    polyhal_ram #(.WIDTH(DW), .LANES(1), .DEPTH(B_WORDS)) u_b (
        .clk(clk), .we(wr_fire && x_buf == 3'd1), .waddr(x_addr), .wdata(in_data),
        .raddr(reading ? x_addr : g_b_raddr), .rdata(b_rdata));
    wire c_host = wr_fire && x_buf == 3'd2;
    polyhal_ram #(.WIDTH(DW), .LANES(C_LANES), .DEPTH(C_WORDS)) u_c (
        .clk(clk), .we(c_host ? {C_LANES{1'b1}} : g_c_we),
        .waddr(c_host ? x_addr : g_c_waddr), .wdata(c_host ? in_data : g_c_wdata),
        .raddr(reading ? x_addr : r_c_raddr), .rdata(c_rdata));
    polyhal_ram #(.WIDTH(DW), .LANES(1), .DEPTH(P_WORDS)) u_p (
        .clk(clk), .we(wr_fire && x_buf == 3'd3), .waddr(x_addr), .wdata(in_data),
        .raddr(reading ? x_addr : r_p_raddr), .rdata(p_rdata));
    wire q_host = wr_fire && x_buf == 3'd4;
    polyhal_ram #(.WIDTH(DW), .LANES(Q_LANES), .DEPTH(Q_WORDS)) u_q (
        .clk(clk), .we(q_host ? {Q_LANES{1'b1}} : r_q_we),
        .waddr(q_host ? x_addr : r_q_waddr), .wdata(q_host ? in_data : r_q_wdata),
        .raddr(x_addr), .rdata(q_rdata));

    reg [2:0] rd_buf;
    reg [DW-1:0] rd_word;
    always @* begin
        case (rd_buf)
            3'd0: rd_word = a_rdata;
            3'd1: rd_word = b_rdata;
            3'd2: rd_word = c_rdata;
            3'd3: rd_word = p_rdata;
            default: rd_word = q_rdata;
        endcase
    end

    // ---- status word ----
    wire [63:0] cmd_cycles = cyc - hdr_cyc;
    wire [DW-1:0] status_word = {{(DW-224){1'b0}}, cmd_cycles[31:0], macs, cyc,
                                 30'd0, result, op};
    wire st_push = (st == ST_STATUS) && (f_cnt < 3'd4);
    wire push = rd_v1 | st_push;

    /* verilator lint_off UNUSEDSIGNAL */
    wire unused_ok = &{1'b0, g_busy, r_busy, cmd_cycles[63:32]};
    /* verilator lint_on UNUSEDSIGNAL */

    always @(posedge clk) begin
        if (push) fifo[f_wp] <= rd_v1 ? rd_word : status_word;
        if (rst) begin
            st <= ST_IDLE;
            cyc <= 64'd0;
            macs <= 64'd0;
            f_wp <= 2'd0;
            f_rp <= 2'd0;
            f_cnt <= 3'd0;
            rd_v1 <= 1'b0;
            result <= 2'd0;
            op <= 32'd0;
            hdr_cyc <= 64'd0;
        end else begin
            cyc <= cyc + 64'd1;
            if (g_beat) macs <= macs + 64'd1;
            if (push) f_wp <= f_wp + 2'd1;
            if (pop) f_rp <= f_rp + 2'd1;
            f_cnt <= f_cnt + {2'd0, push} - {2'd0, pop};
            rd_v1 <= rd_issue;
            case (st)
                ST_IDLE: begin
                    if (in_fire) begin
                        op <= f0;
                        hdr_cyc <= cyc;
                        x_ok <= xfer_ok;
                        x_buf <= f1[2:0];
                        x_addr <= f2[15:0];
                        x_left <= f3;
                        result <= 2'd0;
                        case (f0)
                            OP_WRITE: begin
                                if (!xfer_ok) result <= 2'd2;
                                st <= (f3 == 32'd0) ? ST_STATUS : ST_WPAY;
                            end
                            OP_READ: begin
                                if (!xfer_ok) result <= 2'd2;
                                st <= (f3 == 32'd0 || !xfer_ok) ? ST_STATUS : ST_READ;
                            end
                            OP_GEMM: st <= ST_GEMM;
                            OP_REQUANT: st <= ST_REQ;
                            OP_STATUS: st <= ST_STATUS;
                            default: begin
                                result <= 2'd1;
                                st <= ST_STATUS;
                            end
                        endcase
                    end
                end
                ST_WPAY: begin
                    if (in_fire) begin
                        x_addr <= x_addr + 16'd1;
                        x_left <= x_left - 32'd1;
                        if (x_left == 32'd1) st <= ST_STATUS;
                    end
                end
                ST_READ: begin
                    if (rd_issue) begin
                        x_addr <= x_addr + 16'd1;
                        x_left <= x_left - 32'd1;
                    end
                    if (x_left == 32'd0 && !rd_v1) st <= ST_STATUS;
                end
                ST_GEMM: begin
                    if (g_done) begin
                        result <= g_status;
                        st <= ST_STATUS;
                    end
                end
                ST_REQ: begin
                    if (r_done) begin
                        result <= r_status;
                        st <= ST_STATUS;
                    end
                end
                default: begin  // ST_STATUS
                    if (st_push) st <= ST_IDLE;
                end
            endcase
        end
    end

    always @(posedge clk) begin
        if (hdr_fire) rd_buf <= f1[2:0];
    end
endmodule
