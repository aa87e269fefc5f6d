#!/usr/bin/env bash
# Installs everything the test suite needs, then runs the whole suite.
# Usage: bash scripts/test.sh [pytest arguments]
set -euo pipefail
cd "$(dirname "$0")/.."
# brian2's cython and cpp_standalone targets compile C++.
if ! command -v g++ >/dev/null; then
    apt-get update -qq && apt-get install -y -qq g++ >/dev/null
fi
# bench: the peers that the benchmarks' --quick runs in .ci/run compare against.
python -m pip install --quiet --disable-pip-version-check -e '.[test,bench]'
python -m pytest --durations=25 "$@"
