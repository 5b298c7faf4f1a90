"""``rise images``: the local Debian base image, the task images built from it, and leftover containers."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from rise.commands import console as _console
from trials.environments.docker import JOB_LABEL, TASK_IMAGE_REPO, TASK_LABEL
from trials.environments.docker import reap_leftovers as reap_containers
from trials.environments.images import BASE_IMAGE, BaseImageMap, cache_dir, docker_client, ensure_base_image
from trials.environments.local import reap_leftovers as reap_local
from trials.errors import InfraError

images_app = typer.Typer(help="Build the local base image, list task images, reap leftover sandboxes.",
                         no_args_is_help=True)


def _client(console: Console):
    try:
        return docker_client()
    except InfraError as exc:
        console.print(f"[red]{escape(str(exc))}[/red]")
        raise typer.Exit(1) from None


@images_app.command("base")
def base(force: Annotated[bool, typer.Option("--force", help="rebuild the rootfs and re-import")] = False) -> None:
    """Build rise-base:bookworm (debootstrap from this machine's Debian mirror + docker import). Idempotent."""
    console = _console.out()
    client = _client(console)
    try:
        with console.status(f"building {BASE_IMAGE} (debootstrap, ~1-2 min the first time)"):
            image_id = ensure_base_image(force=force, client=client)
    except InfraError as exc:
        console.print(f"[red]{escape(str(exc))}[/red]" + (f"\nlog: {exc.log_path}" if exc.log_path else ""))
        raise typer.Exit(1) from None
    console.print(f"[green]{BASE_IMAGE}[/green] {image_id[:19]} (rootfs cache: {cache_dir()})")


@images_app.command("list")
def list_images() -> None:
    """List the base image and the cached task images, and show the base-image map in force."""
    console = _console.out()
    client = _client(console)
    table = Table(title="rise images")
    for col in ("image", "id", "task", "size MB", "created"):
        table.add_column(col)
    for img in client.images.list():
        tags = [t for t in img.tags if t == BASE_IMAGE or t.startswith(TASK_IMAGE_REPO + "-")]
        for tag in tags:
            table.add_row(tag, img.short_id.removeprefix("sha256:"), (img.labels or {}).get(TASK_LABEL, ""),
                          f"{img.attrs.get('Size', 0) / 1e6:.0f}", str(img.attrs.get("Created", ""))[:19])
    console.print(table)
    mapping = BaseImageMap.from_env()
    rules = ", ".join(f"{k} -> {v}" for k, v in mapping.rules.items()) or "(none; set RISE_BASE_IMAGE_MAP)"
    console.print(f"base-image map: {escape(rules)}; any other FROM not present locally -> {mapping.default}")


@images_app.command("reap")
def reap(job: Annotated[str | None, typer.Option("--job", help="only this job's sandboxes")] = None,
         live: Annotated[bool, typer.Option("--live", help="also those whose owning process still runs")]
         = False,
         task_images: Annotated[bool, typer.Option("--task-images", help="also remove cached task images")]
         = False) -> None:
    """Remove sandboxes left by crashed jobs (their owner process is gone): docker containers labelled rise.job
    and local bwrap keepers. Sandboxes of running jobs are kept unless --live."""
    console = _console.out()
    n_local = reap_local(job, include_live=live)
    n_docker = reap_containers(job, include_live=live)
    console.print(f"removed {n_docker} container(s) with label {JOB_LABEL}{'=' + job if job else ''}, "
                  f"killed {n_local} local sandbox keeper(s)")
    if task_images:
        client = _client(console)
        removed = 0
        for img in client.images.list():
            for tag in img.tags:
                if tag.startswith(TASK_IMAGE_REPO + "-"):
                    client.images.remove(tag, force=True)
                    removed += 1
        console.print(f"removed {removed} task image tag(s)")


def register(app: typer.Typer) -> None:
    app.add_typer(images_app, name="images")
