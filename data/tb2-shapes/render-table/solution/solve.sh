#!/bin/bash
cd /app && python3 -c 'import json; from tabulate import tabulate; print(tabulate(json.load(open("rows.json")), headers="keys", tablefmt="github"))' > table.txt
