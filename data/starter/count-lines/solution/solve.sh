#!/bin/bash
wc -l < /app/data.txt | tr -d ' ' > /app/count.txt
