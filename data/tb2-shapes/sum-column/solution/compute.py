"""Sum the amount column of a CSV file."""

import csv
import sys

with open(sys.argv[1], newline="") as f:
    print(sum(int(row["amount"]) for row in csv.DictReader(f)))
