#!/bin/bash
echo "hi there" > /app/greeting.txt
