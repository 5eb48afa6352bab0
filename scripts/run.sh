#!/usr/bin/env bash
# The main job: set up (install missing packages, build), then run it. Extra arguments go to it.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec ./build/zero bench comm --ranks 2 --max-bytes 64M "$@"
