#!/usr/bin/env bash
# The main job: set up (install missing packages, build), then train a small GPT on the built-in
# corpus with ZeRO stage 3 over 2 ranks (threads of one process): progress, validation loss,
# samples and the report (memory and bytes per step per rank, measured beside the theory).
# About 1-2 minutes on 2 cores. Extra arguments go to `zero train` (e.g. --stage 0, --ranks 3).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec ./build/zero train --config configs/main.json "$@"
