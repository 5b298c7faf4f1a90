"""What this platform does with every ``task.toml`` field a Terminal-Bench 2 (Harbor) task may set.

Each field is either honoured (the trial behaves as Harbor's would) or named here as ignored, with the reason, so
``rise tasks check`` and ``rise tasks import`` can say which of a task's settings have no effect here. A field
absent from this table is rejected by the strict model (``model.py``), so nothing is dropped without a word.
"""

from __future__ import annotations

from typing import Literal, NamedTuple

from .model import TaskConfig


class Field(NamedTuple):
    disposition: Literal["honoured", "ignored", "refused"]
    note: str


FIELDS: dict[str, Field] = {
    "version": Field("honoured", "schema_version 1.0/1.1 are read the same way"),
    "artifacts": Field("ignored", "Harbor copies these paths out of the sandbox after a trial; the trial folder "
                                  "here keeps the agent's and verifier's logs only"),
    "task.name": Field("honoured", "the part after the last '/' names the task"),
    "task.description": Field("honoured", "shown by rise tasks list"),
    "task.authors": Field("honoured", "kept as metadata"),
    "task.keywords": Field("honoured", "kept as metadata"),
    "metadata": Field("honoured", "kept; category and difficulty are shown by rise tasks list"),
    "verifier.timeout_sec": Field("honoured", "the verifier's wall-clock limit"),
    "verifier.env": Field("honoured", "passed to tests/test.sh; ${VAR} expanded from the host"),
    "verifier.user": Field("honoured", "the user tests/test.sh runs as"),
    "agent.timeout_sec": Field("honoured", "the agent's wall-clock limit"),
    "agent.user": Field("honoured", "the user the agent runs as"),
    "environment.build_timeout_sec": Field("honoured", "the image build's limit"),
    "environment.docker_image": Field("honoured", "used when present in the local engine; offline, a missing "
                                                  "prebuilt image is replaced by building environment/Dockerfile "
                                                  "(an adapter change, recorded)"),
    "environment.cpus": Field("honoured", "docker: nano_cpus; local: the sandbox's CPU limit"),
    "environment.memory_mb": Field("honoured", "docker: mem_limit; local: the sandbox's memory limit"),
    "environment.memory": Field("honoured", "Terminal-Bench 2.0's \"2G\" spelling, read as memory_mb"),
    "environment.storage": Field("ignored", "Terminal-Bench 2.0's \"10G\" spelling of storage_mb (ignored, below)"),
    "environment.storage_mb": Field("ignored", "no per-container disk quota: Docker's storage-opt needs an "
                                               "overlay on xfs with project quotas, which this engine lacks"),
    "environment.gpus": Field("refused", "sandboxes here have no GPU: a task that asks for one cannot run"),
    "environment.allow_internet": Field("honoured", "false: no network (docker network none; local: own netns)"),
    "environment.mcp_servers": Field("ignored", "no MCP servers are started for the agent"),
    "environment.env": Field("honoured", "set in the sandbox; ${VAR} expanded from the host"),
    "environment.workdir": Field("honoured", "the agent's working folder"),
    "solution.env": Field("honoured", "passed to solution/solve.sh by the oracle"),
}


def _set_fields(config: TaskConfig) -> dict[str, object]:
    """Every dotted key ``task.toml`` wrote (defaults left out), with its value."""
    out: dict[str, object] = {}
    for name in config.model_fields_set:
        value = getattr(config, name)
        if hasattr(value, "model_fields_set"):
            for sub in value.model_fields_set:
                out[f"{name}.{sub}"] = getattr(value, sub)
        else:
            out[name] = value
    return out


def ignored_settings(config: TaskConfig) -> list[str]:
    """One line per field the task sets to something this platform does not do (empty values say nothing)."""
    lines = []
    for key, value in sorted(_set_fields(config).items()):
        field = FIELDS.get(key)
        if field is not None and field.disposition == "ignored" and value not in (None, [], {}, ""):
            lines.append(f"{key} = {value!r} ignored: {field.note}")
    return lines


def refused_settings(config: TaskConfig) -> list[str]:
    """Why the task cannot run here at all, from its fields alone (a GPU it asks for)."""
    if config.environment.gpus > 0:
        return [f"environment.gpus = {config.environment.gpus}: {FIELDS['environment.gpus'].note}"]
    return []
