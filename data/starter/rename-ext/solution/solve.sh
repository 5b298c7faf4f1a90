#!/bin/bash
cd /app/notes
for f in *.txt; do
  [ -e "$f" ] || continue
  mv -- "$f" "${f%.txt}.md"
done
