"""``rise role``: run one role call (debugging a role, checks from outside), list the roles, read a transcript."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

role_app = typer.Typer(help="Agent roles: run one call, list them, read a call's transcript.", no_args_is_help=True)

ConfigOpt = Annotated[Path | None, typer.Option(
    "--config", help="an experiment.toml whose [agents] section picks backends, endpoints and limits")]


def _fail(message: str, code: int = 2) -> typer.Exit:
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(code)


def _agents_config(path: Path | None) -> tuple[Any, Any]:
    """(AgentsConfig, the experiment's endpoint) from ``--config``, or defaults."""
    from evolve.roles.runtime import AgentsConfig

    if path is None:
        return AgentsConfig(), None
    from evolve.experiment.config import ExperimentConfig

    try:
        config = ExperimentConfig.load(path)
    except ValueError as exc:
        raise _fail(str(exc)) from None
    return config.agents, config.endpoint


def _inputs(value: str) -> dict[str, Any]:
    if value.startswith("@"):
        path = Path(value[1:])
        try:
            value = path.read_text()
        except OSError as exc:
            raise _fail(f"--input {path}: {exc.strerror}") from None
    try:
        data = json.loads(value)
    except json.JSONDecodeError as exc:
        raise _fail(f"--input is not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise _fail("--input must be a JSON object")
    return data


@role_app.command("run")
def run(
    role_name: Annotated[str, typer.Argument(metavar="ROLE", help="a role name (rise role list)")],
    workspace: Annotated[Path, typer.Option("--workspace", "-w", help="the folder the role's tools see")],
    input_: Annotated[str, typer.Option("--input", "-i", help="inputs as JSON, or @FILE")] = "{}",
    backend: Annotated[str | None, typer.Option("--backend", "-b", help="openai | claude | replay")] = None,
    base_url: Annotated[str | None, typer.Option("--base-url", help="endpoint incl. /v1; none: bundled")] = None,
    model: Annotated[str | None, typer.Option("--model", help="served model name")] = None,
    api_key_env: Annotated[str | None, typer.Option("--api-key-env", help="variable holding the key")] = None,
    tool_calls: Annotated[str, typer.Option(
        "--tool-calls", help="with --base-url: native (the server's tool parser), schema (every reply "
        "constrained to one tool call by a JSON schema; small models on llama.cpp) or auto (schema on llama.cpp)"
    )] = "auto",
    recording: Annotated[Path | None, typer.Option("--recording", help="HTTP recording (replay backend)")] = None,
    record: Annotated[bool, typer.Option("--record", help="make the recording against --base-url")] = False,
    harness: Annotated[Path | None, typer.Option("--harness", help="harness whose Handbook tools read")] = None,
    transcripts: Annotated[Path, typer.Option("--transcripts", help="folder for the transcript")] = Path(
        "runs/role-calls"),
    config: ConfigOpt = None,
) -> None:
    """Run one role call; print the validated output (JSON) and the transcript path."""
    from evolve.roles.runtime import RoleError, get_role, make_backend, run_role
    from trials.endpoints.spec import EndpointSpec

    try:
        role = get_role(role_name)
    except KeyError as exc:
        raise _fail(str(exc).strip("\"'")) from None
    agents, exp_endpoint = _agents_config(config)
    role = agents.role_limits(role)
    kind = backend or (agents.roles[role.name].backend if role.name in agents.roles else None) or agents.backend
    if tool_calls not in ("auto", "native", "schema"):
        raise _fail(f"--tool-calls {tool_calls!r}: choose auto, native or schema")
    endpoint = (EndpointSpec(base_url=base_url, model=model, api_key_env=api_key_env, tool_calls=tool_calls)
                if base_url and model else None)
    if base_url and not model:
        raise _fail("--base-url needs --model (the served model name)")
    try:
        if kind == "replay":
            if recording is None:
                raise _fail("--backend replay needs --recording FILE")
            if record and endpoint is None:
                endpoint = _bundled_endpoint(model)
            chosen = make_backend("replay", endpoint, recording=recording, record=record)
        elif endpoint is not None:
            chosen = make_backend(kind, endpoint)
        elif kind == "claude":
            chosen = make_backend("claude", None, settings=agents.claude)
        else:
            chosen = make_backend("openai", agents.endpoint_for(role.name, exp_endpoint) or _bundled_endpoint(model))
    except (ValueError, FileNotFoundError) as exc:
        raise _fail(str(exc)) from None
    try:
        result = run_role(role, _inputs(input_), workspace, chosen, transcripts=transcripts, harness=harness)
    except RoleError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None
    typer.echo(result.output.model_dump_json(indent=2))
    typer.echo(f"transcript: {result.transcript}  ({result.backend}, {result.seconds:.1f} s, "
               f"{result.usage.requests} requests, {result.usage.tool_calls} tool calls, ${result.cost:.4f})", err=True)


def _bundled_endpoint(model: str | None) -> Any:
    from trials.endpoints.bundled import DEFAULT_MODEL
    from trials.endpoints.serve import ensure_bundled_server

    typer.echo(f"no --base-url: starting or reusing the bundled model server ({model or DEFAULT_MODEL})", err=True)
    return ensure_bundled_server(model or DEFAULT_MODEL, progress=lambda m: typer.echo(m, err=True))


@role_app.command("list")
def list_(config: ConfigOpt = None) -> None:
    """The roles with their backend, tools and limits."""
    from evolve.roles.runtime import list_roles

    agents, _ = _agents_config(config)
    for role in list_roles():
        role = agents.role_limits(role)
        override = agents.roles.get(role.name)
        kind = (override.backend if override else None) or agents.backend
        lim = role.limits
        usd = "-" if lim.max_usd is None else f"${lim.max_usd:g}"
        typer.echo(f"{role.name:<16} {kind:<7} turns={lim.max_turns} tokens={lim.max_output_tokens} "
                   f"deadline={lim.deadline_s:g}s usd={usd} tools={','.join(role.tools)}")
        typer.echo(f"{'':<16} {role.description}")


@role_app.command("show")
def show(
    transcript: Annotated[Path, typer.Argument(help="a transcript .jsonl (printed by rise role run)")],
    full: Annotated[bool, typer.Option("--full", help="do not clip long texts")] = False,
) -> None:
    """Print a transcript readably: prompts, model replies, tool calls and results, the outcome."""
    from evolve.roles.runtime.transcript import read_transcript

    try:
        rows = read_transcript(transcript)
    except (FileNotFoundError, ValueError) as exc:
        raise _fail(str(exc)) from None
    for row in rows:
        typer.echo(render_row(row, None if full else 600))


def render_row(row: dict[str, Any], limit: int | None) -> str:
    """One transcript line as text."""
    def cut(text: Any) -> str:
        text = text if isinstance(text, str) else json.dumps(text, ensure_ascii=False)
        return text if limit is None or len(text) <= limit else text[:limit] + f" ... [{len(text) - limit} more]"

    kind, head = row.get("kind", "?"), f"[{row.get('t', 0):8.2f}s] {row.get('kind', '?'):<15}"
    if kind == "start":
        return f"{head} {row['role']} on {row['backend']} in {row['workspace']}\n  inputs: {cut(row['inputs'])}"
    if kind in ("system", "prompt", "cli_stderr"):
        return f"{head}\n  " + cut(row.get("text", "")).replace("\n", "\n  ")
    if kind == "model_response":
        parts = [f"text: {cut(p['text'])}" if "text" in p else f"call {p['tool_call']}({cut(p['args'])})"
                 for p in row.get("parts", [])]
        return f"{head} " + ("\n  ".join(parts) or "(empty)")
    if kind == "tool_call":
        return f"{head} {row['tool']}({cut(row.get('args'))})"
    if kind == "tool_result":
        return f"{head} {row['tool']} -> {row['status']}\n  " + cut(row.get("result", "")).replace("\n", "\n  ")
    if kind == "tool_denied":
        return f"{head} {row['tool']} denied: {row['reason']}"
    if kind == "corrective_turn":
        return f"{head} fields: {', '.join(row.get('fields') or []) or '-'}\n  {cut(row.get('text', ''))}"
    if kind == "end":
        usage = row.get("usage") or {}
        tail = f" fields={row['fields']}" if row.get("fields") else ""
        err = f"\n  {row['error']}" if row.get("error") else ""
        return (f"{head} {row['status']} in {row.get('seconds')}s, {usage.get('requests')} requests, "
                f"{usage.get('tool_calls')} tool calls ({usage.get('refusals')} refused), "
                f"${row.get('cost') or 0:.4f}{tail}{err}")
    rest = {k: v for k, v in row.items() if k not in ("seq", "t", "kind")}
    return f"{head} {cut(rest)}"


def register(app: typer.Typer) -> None:
    app.add_typer(role_app, name="role")
