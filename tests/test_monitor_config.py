"""Recording config: validation errors name the file and the field."""

from __future__ import annotations

import pytest

from monitor.config import RecordingConfig, RecordingConfigError, load_for_harness


def test_valid_config_and_limits(tmp_path):
    path = tmp_path / "recording.toml"
    path.write_text(
        "version = 1\n[limits]\nmax_arg_chars = 50\n"
        '[[boundary]]\ntarget = "loop:Agent.step"\n'
        '[[boundary]]\ntarget = "model_call:ModelCaller.call"\ngenai = true\nmax_return_chars = 9\n'
    )
    config = RecordingConfig.load(path)
    step, call = config.boundary
    assert (step.module, step.qualname) == ("loop", "Agent.step")
    assert config.arg_limit(step) == 50 and config.return_limit(step) == 4000
    assert call.genai and config.return_limit(call) == 9


@pytest.mark.parametrize(("text", "key", "needle"), [
    ('[[boundary]]\ntarget = "loop.Agent.step"\n', "boundary[0].target", "module:qualname"),
    ('[[boundary]]\ntarget = "loop:Agent.step"\ncapture = 1\n', "boundary[0].capture", "unknown key"),
    ('[limits]\nmax_arg_chars = -1\n', "limits.max_arg_chars", "greater than or equal"),
    ('[redact]\npatterns = ["(unclosed"]\n', "redact.patterns", "not a valid regex"),
    ('[[boundary]]\ntarget = "a:f"\n[[boundary]]\ntarget = "a:f"\n', "boundary", "listed twice"),
    ("version = 2\n", "version", "1"),
    ("[[boundary]\n", None, "not valid TOML"),
])
def test_errors_name_file_and_field(tmp_path, text, key, needle):
    path = tmp_path / "recording.toml"
    path.write_text(text)
    with pytest.raises(RecordingConfigError) as info:
        RecordingConfig.load(path)
    assert info.value.path == str(path) and info.value.key == key
    assert needle in str(info.value) and str(path) in str(info.value)


def test_harness_without_config_records_nothing(tmp_path):
    config, path = load_for_harness(tmp_path)
    assert path is None and config.boundary == []
