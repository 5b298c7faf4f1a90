"""Run inside the Harbor virtual environment (see tests/test_harbor_diff.py): reads ``[[text, max_bytes]]`` as
JSON on stdin and writes, for each text, what Harbor's Terminus-2 output limiter makes of it once and what it
makes of that result a second time (as its loop does when it builds an observation)."""

import json
import sys

from harbor.agents.terminus_2.terminus_2 import Terminus2

# The limiter reads nothing from the agent, so it is called without building one (which needs a model).
limit = Terminus2._limit_output_length
out = []
for text, max_bytes in json.load(sys.stdin):
    once = limit(None, text, max_bytes)
    out.append([once, limit(None, once, max_bytes)])
print(json.dumps(out))
