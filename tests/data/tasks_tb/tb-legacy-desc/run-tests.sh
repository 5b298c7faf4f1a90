#!/bin/bash
grep -qx done /app/status.txt
