#!/usr/bin/env bash
# The main job on the embedded default: set up (idempotent, cached), serve the bundled Qwen2.5-Coder-1.5B on CPU,
# and run one round of `rise evolve` on the experiment runs/demo (scripts/demo-experiment.toml): the seed harness
# (Terminus-2 + Mid-Harness) as v0, its reference corpus on four starter tasks in the local bubblewrap sandbox,
# then analysis, research, a proposal, the implementer, checks, screening, evaluation and the decision, with
# the bundled model in every role; after an adoption, the new version is frozen and compared with its parent on
# the bundled 0.5B (served on port 8081). Rerunning it resumes where it stopped (nothing finished is redone).
# Extra arguments go to `rise evolve` (e.g. --rounds 2, --max-hours 3, --no-external-research).
# RISE_RUNS_DIR puts the experiment outside the checkout (default: its runs/): a new checkout on the same machine then
# resumes the same night, and `rise evolve` says where it stands first. `bash scripts/run.sh --status` only says so.
# Where the machine itself is gone, `bash scripts/run.sh --restore FILE` first unpacks a snapshot of the night
# (`rise record --snapshot` writes one beside the record at each stop: docs/nights/<date>/snapshot.tar.xz), then
# resumes it; it refuses when an experiment is already there.
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS="${RISE_RUNS_DIR:-$PWD/runs}"
if [ "${1:-}" = "--status" ]; then
  exec rise status demo --runs-dir "$RUNS"
fi
restore=
if [ "${1:-}" = "--restore" ]; then
  restore="${2:?--restore needs a snapshot file (docs/nights/<date>/snapshot.tar.xz)}"
  [ -f "$restore" ] || { echo "--restore: no file $restore" >&2; exit 2; }
  restore="$(cd "$(dirname "$restore")" && pwd)/$(basename "$restore")"
  shift 2
  if [ -e "$RUNS/demo" ]; then  # before the set-up: a refusal costs nothing
    echo "--restore: $RUNS/demo exists; a snapshot never replaces an experiment (move it away first)" >&2
    exit 2
  fi
fi
RISE_SETUP_MODELS="${RISE_SETUP_MODELS:-qwen2.5-coder-1.5b qwen2.5-coder-0.5b}" bash scripts/setup.sh
if ! python3 -c 'import httpx, sys; sys.exit(httpx.get("http://127.0.0.1:8080/health", timeout=3).status_code != 200)' \
    2>/dev/null; then
  # 32768 tokens over 2 slots: 16384 per request, room for the roles' conversations (a researcher call passed 8192)
  rise serve bundled -m qwen2.5-coder-1.5b --port 8080 --ctx 32768 -np 2 --detach
fi
# the second model of the transfer evaluation after an adoption ([transfer] in demo-experiment.toml); idle till then
if ! python3 -c 'import httpx, sys; sys.exit(httpx.get("http://127.0.0.1:8081/health", timeout=3).status_code != 200)' \
    2>/dev/null; then
  rise serve bundled -m qwen2.5-coder-0.5b --port 8081 --ctx 24576 -np 2 --detach || \
    echo "the 0.5B did not start: the transfer's second-model part will be recorded as skipped" >&2
fi
if [ -n "$restore" ]; then
  rise restore "$restore" --runs-dir "$RUNS"
fi
if [ ! -f "$RUNS/demo/experiment.toml" ]; then  # its presence means the experiment exists (rise init writes it last)
  echo "no experiment at $RUNS/demo: a new one is made" >&2
  for snap in docs/nights/*/snapshot.tar.xz; do  # say where a stopped night could be taken up instead
    if [ -f "$snap" ]; then
      echo "  (a night's snapshot is at $snap: \`bash scripts/run.sh --restore $snap\` resumes it)" >&2
    fi
  done
  rise init demo --config scripts/demo-experiment.toml --runs-dir "$RUNS" --no-power
fi
# The bundled 1.5B never wrote a working mechanism (README), and on the night of 2026-12-07 it could not edit a
# prompt template either (both prompt-tier candidates of round 2: "the implementer changed nothing"). So its
# proposals take the one tier that needs no coding agent: new values for the Handbook's switches, made into the
# candidate mechanically (pass --tiers settings,prompt or settings,prompt,code to allow more); its keys can only
# be the Handbook's switches (--strict-switches: it wrote behaviour ids as keys).
exec rise evolve demo --runs-dir "$RUNS" --config scripts/demo-experiment.toml --rounds 1 --resume \
  --tiers settings --strict-switches "$@"
