"""Checks for project-skeleton: the directories, the empty __init__.py and the README's first line."""
import sys
from pathlib import Path

root = Path("/app/project")
failures = []
for name in ("src", "tests", "docs"):
    if not (root / name).is_dir():
        failures.append(f"{root / name} is not a directory")
init = root / "src" / "__init__.py"
if not init.is_file():
    failures.append(f"{init} does not exist")
elif init.stat().st_size != 0:
    failures.append(f"{init} is not empty")
readme = root / "README.md"
if not readme.is_file():
    failures.append(f"{readme} does not exist")
elif readme.read_text().splitlines()[:1] != ["# project"]:
    failures.append(f"the first line of {readme} is not '# project'")
if failures:
    sys.exit("\n".join("FAIL: " + f for f in failures))
print("PASS")
