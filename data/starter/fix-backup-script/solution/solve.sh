#!/bin/bash
cat > /app/backup.sh <<'SH'
#!/bin/bash
# Copy every .conf file from the config directory into the backup directory as <name>.bak
# and report how many files were backed up.
SRC=${CONFIG_DIR:-/app/config}
DEST=${BACKUP_DIR:-/app/backup}

mkdir -p "$DEST"
count=0
for f in "$SRC"/*.conf; do
    [ -e "$f" ] || continue
    cp -- "$f" "$DEST/$(basename -- "$f").bak"
    count=$((count + 1))
done
echo "backed up $count files"
SH
chmod +x /app/backup.sh
bash /app/backup.sh
