"""Run one persistent device simulation: ``python -m polyhal.simulators.fpga.launch
SIMULATOR BUILD_DIR FOLDER``.

:class:`~polyhal.simulators.fpga.link.SimulationLink` starts this module in a
process group of its own, with the socket's address in the environment; it
runs the simulator on the cached build through cocotb's runner with
:mod:`polyhal.simulators.fpga.server` as the test, and ends when the server
does. The results file and the simulator's log go to ``FOLDER``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from polyhal.simulators.fpga.build import DEVICE, SIMULATORS, simulator_env

SERVER_MODULE = "polyhal.simulators.fpga.server"


def main(argv: list[str]) -> int:
    """Run the simulation described by ``argv`` (simulator, build dir, folder)."""
    if len(argv) != 3 or argv[0] not in SIMULATORS:
        print(f"usage: python -m {__spec__.name if __spec__ else 'launch'} "
              f"{{{','.join(SIMULATORS)}}} BUILD_DIR FOLDER", file=sys.stderr)
        return 2
    simulator, build_dir, folder = argv[0], Path(argv[1]), Path(argv[2])
    from cocotb_tools.runner import get_runner

    os.environ.update(simulator_env(simulator))
    os.environ.pop("PYTEST_CURRENT_TEST", None)
    runner = get_runner(simulator)
    runner.test(test_module=SERVER_MODULE, hdl_toplevel=DEVICE, hdl_toplevel_lang="verilog",
                build_dir=build_dir, test_dir=folder, results_xml=str(folder / "results.xml"))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
