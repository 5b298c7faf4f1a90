#!/bin/bash
set -e
/app/.venv/bin/python "$(dirname "$0")/convert.py"
