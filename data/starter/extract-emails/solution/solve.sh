#!/bin/bash
grep -oE '[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}' /app/server.log | tr 'A-Z' 'a-z' | sort -u > /app/emails.txt
