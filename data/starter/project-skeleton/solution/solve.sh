#!/bin/bash
set -e
mkdir -p /app/project/src /app/project/tests /app/project/docs
: > /app/project/src/__init__.py
printf '# project\n\nA sample project.\n' > /app/project/README.md
