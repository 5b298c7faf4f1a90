#!/bin/bash
cat > /app/config.json <<'JSON'
{"name": "demo", "version": 2, "enabled": true}
JSON
