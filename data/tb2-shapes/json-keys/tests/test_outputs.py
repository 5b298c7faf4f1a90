import json
from pathlib import Path

import yaml


def test_yaml_matches_json():
    data = json.loads(Path("/app/config.json").read_text())
    assert yaml.safe_load(Path("/app/config.yaml").read_text()) == data


def test_sorted_dump():
    data = json.loads(Path("/app/config.json").read_text())
    assert Path("/app/config.yaml").read_text() == yaml.safe_dump(data, sort_keys=True)
