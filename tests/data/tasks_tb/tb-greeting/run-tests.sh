#!/bin/bash
# Terminal-Bench style verifier: its exit status is the verdict (no reward file).
python3 "$TEST_DIR/test_outputs.py"
