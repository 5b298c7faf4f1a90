#!/usr/bin/env bash
# Set up (idempotent, cached) and run the whole test suite, including the tests that need the real parts:
# tmux, bubblewrap, Docker and the bundled model. Extra arguments go to pytest (e.g. -m "not model").
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# In CI a missing part is a failure, not a skip: the parts were just set up.
export RISE_REQUIRE_PARTS="${RISE_REQUIRE_PARTS:-${CI:-0}}"
# Two test processes (pytest-xdist): most tests wait on sandboxes, subprocesses and scripted servers rather than
# compute, so two at a time finish sooner on two cores. The tests of one heavy shared part (the bundled model,
# Docker, Ray) stay together on one worker (tests/conftest.py). RISE_TEST_WORKERS=0 runs all in this process.
python3 -m pytest -q -rs --durations=15 -n "${RISE_TEST_WORKERS:-2}" --dist loadgroup "$@"
