#!/bin/sh
# The peers' own virtual environments for benchmarks/peers/run.py (never the project's): pfl-research and
# Flower, each with torch pinned by the repository's constraints.txt (torch 2.13.0, the CPU build here).
# Usage: sh benchmarks/peers/setup_venvs.sh [PFL_VENV] [FLWR_VENV]   (defaults .venv-pfl, .venv-flwr)
set -eu
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
PFL_VENV=${1:-.venv-pfl}
FLWR_VENV=${2:-.venv-flwr}
python3 -m venv "$PFL_VENV"
"$PFL_VENV/bin/pip" install -q -c "$ROOT/constraints.txt" -r "$HERE/requirements-pfl.txt"
python3 -m venv "$FLWR_VENV"
"$FLWR_VENV/bin/pip" install -q -c "$ROOT/constraints.txt" -r "$HERE/requirements-flwr.txt"
echo "pfl: $PFL_VENV/bin/python  flower: $FLWR_VENV/bin/python (PFL_PYTHON / FLWR_PYTHON to use others)"
