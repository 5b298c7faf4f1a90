#!/bin/bash
# A verifier that installs pip from apt and pytest from the package index when it runs.
apt-get update
apt-get install -y python3-pip
pip3 install --break-system-packages pytest==8.4.1

mkdir -p /logs/verifier
pytest /tests/test_outputs.py -rA
if [ $? -eq 0 ]; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
