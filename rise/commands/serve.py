"""``rise serve``: start, inspect and stop model servers (the bundled CPU model, or ``vllm serve``)."""

from __future__ import annotations

import json
import signal
import time
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from rise.commands import console as rise_console
from trials.endpoints import bundled
from trials.endpoints.serve import (
    DEFAULT_PORTS,
    ServerProcess,
    ServerStartError,
    describe,
    dumps_spec,
    list_states,
    parse_lora,
    stop_server,
    visible_gpus,
    vllm_replicas,
)

serve_app = typer.Typer(
    help="Start, health-check and stop an OpenAI-compatible model server. A started server prints the "
    "endpoint spec (base_url, model, context limit) that `rise eval --base-url URL --model NAME` takes.",
    no_args_is_help=True,
)

Port = Annotated[int | None, typer.Option("--port", help="port to listen on (bundled 8080, vllm 8000)")]
Host = Annotated[str, typer.Option("--host", help="address to bind")]
Name = Annotated[str | None, typer.Option("--name", help="name for status/stop (default KIND-PORT)")]
Detach = Annotated[bool, typer.Option("--detach", "-d", help="return once healthy; stop with `rise serve stop`")]
ReadyTimeout = Annotated[float | None, typer.Option("--ready-timeout", help="seconds to wait for /health")]


def _console() -> Console:
    return rise_console.out()


def _run(server: ServerProcess, detach: bool) -> None:
    console = _console()

    def progress(msg: str) -> None:
        console.print(f"[dim]·[/dim] {escape(msg)}")

    def on_term(signum: int, frame: object) -> None:  # a `kill` of the CLI stops the server too
        raise KeyboardInterrupt

    if not detach:
        # before the start: the state file says "healthy" inside start(), and a kill from then on must stop the
        # server like Ctrl-C does (the default action killed the CLI and left the server running)
        signal.signal(signal.SIGTERM, on_term)
    try:
        spec = server.start(progress=progress, detach=detach)
    except ServerStartError as exc:
        console.print(f"[red]could not start {server.name}:[/red] {escape(str(exc))}")
        raise typer.Exit(1) from None
    except KeyboardInterrupt:
        server.stop()
        if server.spec is not None:  # it was up: an ordinary stop
            console.print(f"{server.name} stopped")
            return
        console.print("[yellow]interrupted; server stopped[/yellow]")
        raise typer.Exit(130) from None
    try:
        console.print(dumps_spec(spec), markup=False)
        if detach:
            console.print(f"[green]{server.name}[/green] running in the background (pid {server.pid}); "
                          f"stop it with: rise serve stop {server.name}")
            return
        console.print(f"[green]{server.name}[/green] serving; Ctrl-C stops it")
        code = server.wait()
    except KeyboardInterrupt:
        console.print("stopping…")
        server.stop()
        console.print(f"{server.name} stopped")
        return
    server.stop()
    console.print(f"[red]{server.name} exited with code {code}[/red]; log: {server.log_path}")
    raise typer.Exit(1)


def seed_head() -> str:
    """The seed harness's shared first-prompt head (imported late: only a bundled start needs it)."""
    from harness_seed.templates import first_prompt_head

    return first_prompt_head()


@serve_app.command("bundled")
def serve_bundled(
    model: Annotated[str, typer.Option("--model", "-m", help=f"one of: {', '.join(bundled.MODELS)}")]
    = bundled.DEFAULT_MODEL,
    port: Port = None,
    host: Host = "127.0.0.1",
    ctx: Annotated[int, typer.Option("--ctx", help="total context tokens (llama.cpp splits it across slots)")]
    = 8192,
    threads: Annotated[int | None, typer.Option("--threads", "-t", help="CPU threads (default: all cores)")]
    = None,
    parallel: Annotated[int, typer.Option("--parallel", "-np", help="concurrent request slots")] = 2,
    name: Name = None,
    detach: Detach = False,
    ready_timeout: ReadyTimeout = None,
    warm: Annotated[bool, typer.Option("--warm/--no-warm", help="compute the seed's shared first-prompt head "
                                       "once and copy it to every slot before serving")] = True,
) -> None:
    """Serve the bundled CPU model (llama.cpp); the first run builds llama-server (~5 min; with
    RISE_LLAMA_ENGINE=wheel it installs the prebuilt xllamacpp wheel instead, seconds), later runs take seconds."""
    if model not in bundled.MODELS:
        _console().print(f"[red]unknown model {escape(model)}[/red]; known: {', '.join(bundled.MODELS)}")
        raise typer.Exit(2)
    try:
        bundled.engine()
    except bundled.BundledSetupError as exc:
        _console().print(f"[red]{escape(str(exc))}[/red]")
        raise typer.Exit(2) from None
    server = ServerProcess.bundled(model, port or DEFAULT_PORTS["bundled"], host=host, ctx=ctx, threads=threads,
                                   parallel=parallel, name=name, warm_head=seed_head() if warm else None)
    if ready_timeout:
        server.ready_timeout = ready_timeout
    _run(server, detach)


@serve_app.command("vllm", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def serve_vllm(
    ctx: typer.Context,
    model: Annotated[str, typer.Argument(help="model path or hub id for `vllm serve`")],
    served_name: Annotated[str | None, typer.Option("--served-name", help="name clients send as model")] = None,
    max_model_len: Annotated[int | None, typer.Option("--max-model-len", help="context limit in tokens")] = None,
    lora: Annotated[list[str] | None, typer.Option("--lora", help="NAME=PATH LoRA adapter; repeatable")] = None,
    seed: Annotated[int | None, typer.Option("--seed", help="sampling seed")] = None,
    port: Port = None,
    host: Host = "127.0.0.1",
    name: Name = None,
    detach: Detach = False,
    ready_timeout: ReadyTimeout = None,
    per_gpu: Annotated[bool, typer.Option("--per-gpu", help="one replica per GPU on consecutive ports (an "
                                          "endpoint pool for rise eval --base-url A --base-url B ...)")] = False,
    gpus: Annotated[str | None, typer.Option("--gpus", help="with --per-gpu: these devices, e.g. 0,1 "
                                             "(default: every visible GPU)")] = None,
) -> None:
    """Serve MODEL with vLLM (GPU); flags after `--` go to `vllm serve` as they are.

    Example: rise serve vllm Qwen/Qwen2.5-Coder-7B-Instruct --lora verifier=/ckpt -- --gpu-memory-utilization 0.9
    """
    try:
        adapters = parse_lora(lora or [])
    except ValueError as exc:
        _console().print(f"[red]{escape(str(exc))}[/red]")
        raise typer.Exit(2) from None
    if per_gpu or gpus:
        if name:
            _console().print("[red]--name names one server; replicas are named vllm-PORT[/red]")
            raise typer.Exit(2)
        try:
            devices = [g.strip() for g in gpus.split(",") if g.strip()] if gpus else visible_gpus()
            servers = vllm_replicas(model, devices, port or DEFAULT_PORTS["vllm"], host=host,
                                    served_name=served_name, max_model_len=max_model_len, seed=seed,
                                    lora=adapters, extra=list(ctx.args), ready_timeout=ready_timeout)
        except ServerStartError as exc:
            _console().print(f"[red]{escape(str(exc))}[/red]")
            raise typer.Exit(1) from None
        _run_replicas(servers, detach)
        return
    server = ServerProcess.vllm(model, port or DEFAULT_PORTS["vllm"], host=host, served_name=served_name,
                                max_model_len=max_model_len, seed=seed, lora=adapters, extra=list(ctx.args),
                                name=name, ready_timeout=ready_timeout)
    _run(server, detach)


def _run_replicas(servers: list[ServerProcess], detach: bool) -> None:
    """Start replicas one after the other (each healthy before the next); print the pool they form."""
    console = _console()
    started: list[ServerProcess] = []
    try:
        for server in servers:
            spec = server.start(progress=lambda msg: console.print(f"[dim]·[/dim] {escape(msg)}"), detach=detach)
            started.append(server)
            console.print(dumps_spec(spec), markup=False)
    except (ServerStartError, KeyboardInterrupt) as exc:
        for server in [*started, *servers[len(started):len(started) + 1]]:
            server.stop()
        console.print(f"[red]replicas stopped:[/red] {escape(str(exc) or 'interrupted')}")
        raise typer.Exit(1 if isinstance(exc, ServerStartError) else 130) from None
    urls = " ".join(f"--base-url {s.base_url}" for s in started)
    console.print(f"pool of {len(started)}: rise eval ... {urls} --model {started[0].served_model}", markup=False)
    if detach:
        console.print("stop them with: " + "; ".join(f"rise serve stop {s.name}" for s in started))
        return

    def on_term(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_term)
    try:
        while all(s.running() for s in started):
            time.sleep(1.0)
    except KeyboardInterrupt:
        console.print("stopping…")
    dead = [s.name for s in started if not s.running()]
    for server in started:
        server.stop()
    if dead:
        console.print(f"[red]{', '.join(dead)} exited[/red]; the other replicas were stopped")
        raise typer.Exit(1)


@serve_app.command("stop")
def serve_stop(name: Annotated[str, typer.Argument(help="server name shown by `rise serve status`")]) -> None:
    """Stop a server started with --detach (or one whose `rise serve` was killed)."""
    if stop_server(name):
        _console().print(f"{escape(name)} stopped")
        return
    _console().print(f"[red]no server named {escape(name)}[/red] (see `rise serve status`)")
    raise typer.Exit(1)


@serve_app.command("status")
def serve_status(as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False) -> None:
    """List known servers: healthy, starting, or dead (a stale record `rise serve stop` removes)."""
    rows = [describe(s) for s in list_states()]
    if as_json:
        print(json.dumps(rows, indent=2))
        return
    console = _console()
    if not rows:
        console.print("no servers recorded")
        return
    table = Table(title="model servers")
    for col in ("name", "kind", "status", "pid", "base_url", "model"):
        table.add_column(col)
    colour = {"healthy": "green", "starting": "yellow", "dead": "red"}
    for r in rows:
        table.add_row(escape(r["name"]), r["kind"], f"[{colour[r['status']]}]{r['status']}[/]", str(r["pid"]),
                      escape(r["base_url"]), escape(r["model"]))
    console.print(table)


def register(app: typer.Typer) -> None:
    app.add_typer(serve_app, name="serve")
