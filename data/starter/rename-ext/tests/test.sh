#!/bin/bash
# Verifier for rename-ext: check.py (python3 stdlib only) decides; the reward file is the verdict.
mkdir -p /logs/verifier
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
if python3 "$HERE/check.py"; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
exit 0
