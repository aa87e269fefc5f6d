`timescale 1ns/1ps
// polyhal_fpga_sim: simulation-only wrapper of polyhal_fpga_top.
//
// It generates the clock itself (10 ns period), so the simulator free-runs
// without a host callback per cycle, and it holds the host side of a DMA
// engine: the host writes a batch's command words into `dma_in` and per
// command the number of words it sends and expects back (`dma_in_words`,
// `dma_out_words`), toggles `dma_start`, and waits for `dma_done` to rise. The engine
// then streams each command's words into the device one per cycle, captures
// its data and status words into `dma_out`, and starts the next command once
// the status word is in (the protocol's rule); a status word with a non-zero
// status (bits 63:32) ends the batch. `dma_ran` counts the commands finished,
// `dma_received` the words captured. So the host touches the simulation once
// per batch, not once per cycle or per word.
//
// While the engine is idle the stream ports pass straight through: a bench
// can drive `in_*` / `out_ready` itself, on the falling edge of `clk`.
module polyhal_fpga_sim #(
    parameter integer ROWS = 8,
    parameter integer COLS = 8,
    parameter integer WORD_BYTES = 128,
    parameter integer A_WORDS = 1024,
    parameter integer B_WORDS = 1024,
    parameter integer C_WORDS = 4096,
    parameter integer Q_WORDS = 1024,
    parameter integer P_WORDS = 64,
    // Room for the largest command (its buffer's depth plus a header each way),
    // and for a whole batch of most operations.
    parameter integer DMA_WORDS = A_WORDS + B_WORDS + C_WORDS + Q_WORDS + P_WORDS + 8,
    parameter integer DMA_COMMANDS = 256
) (
    output reg                      clk,
    input  wire                     rst,
    input  wire                     in_valid,
    output wire                     in_ready,
    input  wire [8*WORD_BYTES-1:0]  in_data,
    output wire                     out_valid,
    input  wire                     out_ready,
    output wire [8*WORD_BYTES-1:0]  out_data,
    output wire                     busy,
    input  wire                     dma_start,
    input  wire [31:0]              dma_commands,
    output reg                      dma_done,
    output reg  [31:0]              dma_ran,
    output reg  [31:0]              dma_received
);
    localparam integer WB = 8 * WORD_BYTES;
    localparam [1:0] IDLE = 2'd0, SEND = 2'd1, RECV = 2'd2;

    initial clk = 1'b0;
    always #5 clk = ~clk;

    reg [WB-1:0] dma_in  [0:DMA_WORDS-1];
    reg [WB-1:0] dma_out [0:DMA_WORDS-1];
    reg [31:0]   dma_in_words  [0:DMA_COMMANDS-1];
    reg [31:0]   dma_out_words [0:DMA_COMMANDS-1];

    reg [1:0]  state;
    reg        start_q;
    reg [31:0] command, in_ptr, in_left, out_left;

    wire          dev_in_ready, dev_out_valid;
    wire [WB-1:0] dev_out_data;
    wire          active = (state != IDLE);
    wire          dev_in_valid = active ? (state == SEND) : in_valid;
    wire [WB-1:0] dev_in_data = active ? dma_in[in_ptr] : in_data;
    wire          dev_out_ready = active ? (state == RECV) : out_ready;

    assign in_ready = active ? 1'b0 : dev_in_ready;
    assign out_valid = active ? 1'b0 : dev_out_valid;
    assign out_data = dev_out_data;

    initial begin
        state = IDLE;
        start_q = 1'b0;
        dma_done = 1'b1;
        dma_ran = 32'd0;
        dma_received = 32'd0;
        command = 32'd0;
        in_ptr = 32'd0;
        in_left = 32'd0;
        out_left = 32'd0;
    end

    always @(posedge clk) begin
        start_q <= dma_start;
        if (rst) begin
            state <= IDLE;
            dma_done <= 1'b1;
        end else begin
            case (state)
                IDLE: if (dma_start != start_q) begin  // the host toggled it
                    dma_ran <= 32'd0;
                    dma_received <= 32'd0;
                    command <= 32'd0;
                    in_ptr <= 32'd0;
                    if (dma_commands == 32'd0) begin
                        dma_done <= 1'b1;
                    end else begin
                        dma_done <= 1'b0;
                        in_left <= dma_in_words[0];
                        out_left <= dma_out_words[0];
                        state <= SEND;
                    end
                end
                SEND: if (dev_in_ready) begin   // the device takes word in_ptr now
                    in_ptr <= in_ptr + 32'd1;
                    in_left <= in_left - 32'd1;
                    if (in_left == 32'd1) state <= RECV;
                end
                RECV: if (dev_out_valid) begin  // a word leaves the device now
                    dma_out[dma_received] <= dev_out_data;
                    dma_received <= dma_received + 32'd1;
                    out_left <= out_left - 32'd1;
                    if (out_left == 32'd1) begin  // the command's status word
                        dma_ran <= command + 32'd1;
                        if (dev_out_data[63:32] != 32'd0 || command + 32'd1 == dma_commands) begin
                            state <= IDLE;
                            dma_done <= 1'b1;
                        end else begin
                            command <= command + 32'd1;
                            in_left <= dma_in_words[command + 32'd1];
                            out_left <= dma_out_words[command + 32'd1];
                            state <= SEND;
                        end
                    end
                end
                default: state <= IDLE;
            endcase
        end
    end

    polyhal_fpga_top #(
        .ROWS(ROWS), .COLS(COLS), .WORD_BYTES(WORD_BYTES),
        .A_WORDS(A_WORDS), .B_WORDS(B_WORDS), .C_WORDS(C_WORDS),
        .Q_WORDS(Q_WORDS), .P_WORDS(P_WORDS)
    ) u_top (
        .clk(clk), .rst(rst),
        .in_valid(dev_in_valid), .in_ready(dev_in_ready), .in_data(dev_in_data),
        .out_valid(dev_out_valid), .out_ready(dev_out_ready), .out_data(dev_out_data),
        .busy(busy)
    );
endmodule
