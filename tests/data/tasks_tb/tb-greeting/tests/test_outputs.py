import sys
from pathlib import Path

path = Path("/app/greeting.txt")
ok = path.is_file() and path.read_text().strip() == "hi there"
print("PASS" if ok else "FAIL")
sys.exit(0 if ok else 1)
