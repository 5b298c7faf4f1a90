#!/bin/bash
mkdir -p /logs/verifier
if [ "$(cat /app/out.txt)" = hello ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt
