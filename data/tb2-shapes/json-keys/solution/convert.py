"""config.json to config.yaml with the venv's pyyaml."""

import json
from pathlib import Path

import yaml

data = json.loads(Path("/app/config.json").read_text())
Path("/app/config.yaml").write_text(yaml.safe_dump(data, sort_keys=True))
