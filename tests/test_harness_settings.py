"""trials/harness_settings.py: the one reader of harness settings as data (flatten, nest, merge, --setting)."""

from __future__ import annotations

import pytest

from harness_seed.settings import load_settings
from trials import harness_settings as hs
from trials.harness_settings import Defaults, SettingError

SEED = "harness_seed"


def test_flatten_and_nest_round_trip_the_seed_file():
    table = hs.read(SEED)
    flat = hs.flatten(table)
    assert flat["terminus.max_episodes"] == 1_000_000 and flat["midharness.verifier"] == "pairwise"
    assert all(not isinstance(v, dict) for v in flat.values())
    assert hs.nest(flat) == table


def test_flatten_keeps_arrays_as_values():
    assert hs.flatten({"a": {"b": [1, {"c": 2}]}, "d": 3}) == {"a.b": [1, {"c": 2}], "d": 3}


def test_nest_mixes_dotted_and_nested_and_refuses_a_key_below_a_value():
    assert hs.nest({"a.b": 1, "a": {"c": 2}, "d": {"e.f": 3}}) == {"a": {"b": 1, "c": 2}, "d": {"e": {"f": 3}}}
    with pytest.raises(TypeError, match="'a.b.c' goes below a value that is not a table"):
        hs.nest({"a.b": 1, "a.b.c": 2})


def test_merge_lays_tables_into_tables_without_changing_either():
    base, extra = {"a": {"b": 1, "c": 2}, "x": 1}, {"a": {"b": 5}, "y": 2}
    assert hs.merge(base, extra) == {"a": {"b": 5, "c": 2}, "x": 1, "y": 2}
    assert base == {"a": {"b": 1, "c": 2}, "x": 1} and extra == {"a": {"b": 5}, "y": 2}


def test_lookup_and_section():
    table = {"tmux": {"width": 160}, "x": 1}
    assert hs.lookup(table, "tmux.width") == 160
    assert hs.lookup(table, "tmux.nope") is None and hs.lookup(table, "x.y", "absent") == "absent"
    assert hs.section({"tmux.width": 1, "tmux": {"height": 2}, "model.seed": 3}, "tmux") == {"width": 1, "height": 2}
    assert hs.section({"tmux": 5}, "tmux") == {} and hs.section({"a.b": 1, "a.b.c": 2}, "a") == {}


def test_the_seed_loader_uses_the_same_nesting():
    overrides = {"terminus.max_episodes": 7, "tmux": {"width": 100}}
    s = load_settings(overrides)
    assert (s.terminus.max_episodes, s.tmux.width) == (7, 100)
    assert s.model_dump()["tmux"] == hs.merge(hs.read(SEED)["tmux"], hs.nest(overrides)["tmux"])


def test_overrides_take_the_type_of_their_default():
    d = Defaults.of_harness(SEED)
    got = hs.parse_overrides(["terminus.max_episodes=5", "tmux.session_name=123", "terminus.format=\"xml\"",
                              "tmux.blocking=true", "model.retry_wait_min_sec=2", "model.max_tokens=null",
                              "model.temperature=0.5", "other=[1, 2]", "text=hello"], d)
    assert got == {"terminus.max_episodes": 5, "tmux.session_name": "123", "terminus.format": "xml",
                   "tmux.blocking": True, "model.retry_wait_min_sec": 2, "model.max_tokens": None,
                   "model.temperature": 0.5, "other": [1, 2], "text": "hello"}
    # without defaults (an agent without settings.toml): JSON where it parses, else text
    assert hs.parse_overrides(["a.b=3", "c=true", "d=hello", "f="]) == {"a.b": 3, "c": True, "d": "hello", "f": ""}


def test_a_value_of_the_wrong_type_names_the_key():
    d = Defaults.of_harness(SEED)
    with pytest.raises(SettingError, match=r"setting terminus.max_episodes wants an integer .*got 'many'"):
        hs.parse_overrides(["terminus.max_episodes=many"], d)
    with pytest.raises(SettingError, match=r"setting tmux.blocking wants true or false"):
        d.coerce("tmux.blocking", "1")
    with pytest.raises(SettingError, match=r"setting tmux.width wants an integer"):
        d.coerce("tmux.width", "1.5")


def test_an_unknown_key_is_named_with_the_keys_beside_it():
    d = Defaults.of_harness(SEED)
    with pytest.raises(SettingError, match=r"unknown setting terminus.max_episode \(known: .*terminus.max_episodes"):
        d.coerce("terminus.max_episode", "5")
    assert "terminus.max_episode" not in d and "terminus.max_episodes" in d


def test_a_malformed_setting_is_refused():
    for item in ("novalue", "=3", "  =x"):
        with pytest.raises(SettingError, match="--setting wants KEY=VALUE"):
            hs.parse_overrides([item])


def test_defaults_of_a_folder_without_a_readable_file_are_none(tmp_path):
    assert Defaults.of_harness(None) is None and Defaults.of_harness(tmp_path) is None
    (tmp_path / hs.SETTINGS_FILE).write_text("[tmux\n")
    assert Defaults.of_harness(tmp_path) is None


def test_json_schema_keys_follow_refs():
    schema = {"properties": {"a": {"$ref": "#/$defs/A"}, "b": {"type": "integer"}},
              "$defs": {"A": {"properties": {"x": {"type": "boolean"}}}}}
    assert hs.json_schema_keys(schema) == {"a.x": {"type": "boolean"}, "b": {"type": "integer"}}
    assert hs.json_schema_keys(schema, "mid") == {"mid.a.x": {"type": "boolean"}, "mid.b": {"type": "integer"}}
