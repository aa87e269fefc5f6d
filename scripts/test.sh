#!/usr/bin/env bash
# Installs everything the test suite needs, then runs the whole suite.
# Usage: bash scripts/test.sh [pytest arguments]
set -euo pipefail
cd "$(dirname "$0")/.."
python -m pip install --quiet --disable-pip-version-check -e '.[test]'
python -m pytest --durations=25 "$@"
