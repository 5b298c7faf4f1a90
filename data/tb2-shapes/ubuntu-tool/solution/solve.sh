#!/bin/bash
/usr/local/bin/tool > /app/out.txt
