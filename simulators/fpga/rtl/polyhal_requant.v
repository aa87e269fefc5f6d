`timescale 1ns/1ps
// polyhal_requant: LANES pipelined requantizer lanes (quant.Requantize).
//
// For every lane, in exact integer arithmetic (docs/fpga.md):
//   s = x + bias (33 bits, bias 0 unless in_bias_en)
//   p = s * multiplier (64 bits; multiplier must be in [0, 2^31 - 1])
//   q = round(p / 2^shift): half_up (ties to +inf) or half_even; shift 0: q = p
//   y = min(127, max(relu ? zp : -128, q + zp))
// Four stages: out_* follow in_* by four cycles; in_tag rides along.
module polyhal_requant #(
    parameter integer LANES = 8,
    parameter integer TAG_W = 32
) (
    input  wire                  clk,
    input  wire                  rst,
    input  wire                  in_valid,
    input  wire [32*LANES-1:0]   in_x,
    input  wire [32*LANES-1:0]   in_mult,
    input  wire [6*LANES-1:0]    in_shift,
    input  wire [32*LANES-1:0]   in_bias,
    input  wire                  in_bias_en,
    input  wire                  in_half_even,
    input  wire                  in_relu,
    input  wire [7:0]            in_zp,
    input  wire [TAG_W-1:0]      in_tag,
    output wire                  out_valid,
    output wire [8*LANES-1:0]    out_y,
    output wire [TAG_W-1:0]      out_tag
);
    // Per-entry control through the four stages.
    reg [3:0]       v_q;
    reg [TAG_W-1:0] tag_q [0:3];
    reg [1:0]       half_even_q;   // needed in stages 1-2 (index 0: after S1)
    reg [2:0]       relu_q;        // needed up to stage 4
    reg [7:0]       zp_q [0:2];
    integer i;

    always @(posedge clk) begin
        if (rst) v_q <= 4'd0;
        else v_q <= {v_q[2:0], in_valid};
        tag_q[0] <= in_tag;
        for (i = 1; i < 4; i = i + 1) tag_q[i] <= tag_q[i-1];
        half_even_q <= {half_even_q[0], in_half_even};
        relu_q <= {relu_q[1:0], in_relu};
        zp_q[0] <= in_zp;
        zp_q[1] <= zp_q[0];
        zp_q[2] <= zp_q[1];
    end

    assign out_valid = v_q[3];
    assign out_tag = tag_q[3];

    genvar l;
    generate
        for (l = 0; l < LANES; l = l + 1) begin : g_lane
            wire [31:0] x = in_x[32*l +: 32];
            wire [31:0] b = in_bias_en ? in_bias[32*l +: 32] : 32'd0;

            // S1: s = x + bias, 33-bit signed.
            reg signed [32:0] s1;
            reg [31:0]        m1;
            reg [5:0]         sh1;
            always @(posedge clk) begin
                s1 <= $signed({x[31], x}) + $signed({b[31], b});
                m1 <= in_mult[32*l +: 32];
                sh1 <= in_shift[6*l +: 6];
            end

            // S2: p = s * multiplier, 64-bit signed (|p| < 2^63).
            /* verilator lint_off UNUSEDSIGNAL */
            wire signed [65:0] pfull = s1 * $signed({1'b0, m1});   // |p| < 2^63
            /* verilator lint_on UNUSEDSIGNAL */
            reg signed [63:0]  p2;
            reg [5:0]          sh2;
            always @(posedge clk) begin
                p2 <= pfull[63:0];
                sh2 <= sh1;
            end

            // S3: f = floor(p / 2^shift), r = p - f*2^shift, round-up decision.
            wire [63:0] one_sh = 64'd1 << sh2;
            wire [63:0] half = one_sh >> 1;               // 2^(shift-1), 0 if shift = 0
            wire [63:0] rem = p2 & (one_sh - 64'd1);
            wire signed [63:0] f = p2 >>> sh2;
            wire tie_up = half_even_q[1] ? f[0] : 1'b1;
            wire inc = (sh2 != 6'd0) && ((rem > half) || ((rem == half) && tie_up));
            reg signed [63:0] f3;
            reg               inc3;
            always @(posedge clk) begin
                f3 <= f;
                inc3 <= inc;
            end

            // S4: q = f + inc, t = q + zero_point, saturate to [lo, 127].
            wire signed [65:0] t = $signed({f3[63], f3[63], f3}) + $signed({65'd0, inc3})
                                   + $signed({{58{zp_q[2][7]}}, zp_q[2]});
            wire signed [65:0] lo = relu_q[2] ? $signed({{58{zp_q[2][7]}}, zp_q[2]})
                                              : -66'sd128;
            reg [7:0] y4;
            always @(posedge clk) begin
                if (t > 66'sd127) y4 <= 8'd127;
                else if (t < lo) y4 <= lo[7:0];
                else y4 <= t[7:0];
            end
            assign out_y[8*l +: 8] = y4;
        end
    endgenerate
endmodule
