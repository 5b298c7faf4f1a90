#!/bin/bash
# A multi-file solution: the work is in compute.py beside this script.
set -e
python3 "$(dirname "$0")/compute.py" /app/sales.csv > /app/total.txt
