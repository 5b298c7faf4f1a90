#!/usr/bin/env bash
# Set up (idempotent, cached) and run the main job on the embedded default: the seed harness (Terminus-2 +
# Mid-Harness, N=1) against the bundled Qwen2.5-Coder-1.5B on CPU, in the local bubblewrap sandbox, over the
# starter suite, twice per task. Extra arguments go to `rise eval` (e.g. --task hello-file -r 1).
set -euo pipefail
cd "$(dirname "$0")/.."
RISE_SETUP_MODELS="${RISE_SETUP_MODELS:-qwen2.5-coder-1.5b}" bash scripts/setup.sh
exec rise eval --tasks data/starter --agent seed --env local -r 2 --json runs/starter-seed.json "$@"
