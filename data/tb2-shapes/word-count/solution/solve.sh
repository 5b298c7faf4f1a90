#!/bin/bash
wc -w < /app/poem.txt | tr -d " " > /app/count.txt
