#!/bin/bash
# A verifier in a uv project of its own: uv init, uv add the test tools, uv run pytest.
apt-get update && apt-get install -y curl
curl -LsSf https://astral.sh/uv/0.9.5/install.sh | sh
source $HOME/.local/bin/env
cd /tests
uv init
uv add pytest==8.4.1 pyyaml==6.0.2
uv run pytest /tests/test_outputs.py -rA
if [ $? -eq 0 ]; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
