"""cocotb test benches of the FPGA RTL (run through :func:`..build.run_bench`).

Their module names do not start with ``test_`` so pytest never collects them;
each reads its random seed from ``POLYHAL_FPGA_SEED`` so a failure reproduces.
"""
