"""One formatter of pydantic validation errors (issue 15 item 14): every loader words a bad field the same way."""

from __future__ import annotations

import pytest
from pydantic import BaseModel, ConfigDict, ValidationError

from monitor.config import RecordingConfig, RecordingConfigError
from trials.tasks.harbor import parse_task_toml
from trials.validation import describe, field_path, first_problem


class _Item(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    size: int


class _Doc(BaseModel):
    items: list[_Item]


def test_paths_labels_and_counts():
    data = {"items": [{"name": "a", "size": 1}, {"name": "b", "size": "x", "colour": "red"}]}
    with pytest.raises(ValidationError) as info:
        _Doc.model_validate(data)
    assert field_path(("items", 1, "size"), data) == "items[1] (b).size"
    assert field_path(("items", 1, "size")) == "items[1].size"
    field, message = first_problem(info.value, data)
    assert field == "items[1] (b).size" and message.endswith("(and 1 more)")
    assert describe(info.value, data) == ("items[1] (b).size: Input should be a valid integer, unable to parse "
                                          "string as an integer; items[1] (b).colour: unknown key")


def test_loaders_agree_on_wording(tmp_path):
    path = tmp_path / "recording.toml"
    path.write_text('[[boundary]]\ntarget = "loop:Agent.step"\ncapture = 1\n')
    with pytest.raises(RecordingConfigError) as info:
        RecordingConfig.load(path)
    assert info.value.key == "boundary[0].capture" and "unknown key" in str(info.value)
    task = tmp_path / "task.toml"
    task.write_text('version = "1.0"\nbogus = 1\n')
    _, problems = parse_task_toml(task)
    assert [(p.key, p.message) for p in problems] == [("bogus", "unknown key")]
