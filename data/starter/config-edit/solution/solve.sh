#!/bin/bash
sed -i -e 's/^port = .*/port = 8080/' -e 's/^debug = .*/debug = false/' /app/app.conf
echo 'log_level = info' >> /app/app.conf
