"""The polyhal FPGA device: RTL, golden models, build layer and test benches.

- ``rtl/``: the synthesizable Verilog-2005 device (``polyhal_fpga_top``: command
  decoder, buffers, systolic-array GEMM engine, requantizer) and the
  simulation wrapper ``polyhal_fpga_sim`` that generates its own clock.
- :mod:`.golden`: integer numpy models of the device's arithmetic and layouts.
- :mod:`.build`: simulator choice, parameter checks, cached builds, bench runs
  (:mod:`.objcache`: Verilator's run-time library compiled once, not per build).
- :mod:`.stream`: the host side of the word streams as cocotb coroutines.
- ``benches/``: cocotb test benches, one per module (run by the test suite).

The specification is docs/fpga.md.
"""
