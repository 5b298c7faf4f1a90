"""``rise images``: the local base images (one per release), the task images built on them, leftover containers."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from rise.commands import console as _console
from trials.environments.docker import JOB_LABEL, TASK_IMAGE_REPO, TASK_LABEL
from trials.environments.docker import reap_leftovers as reap_containers
from trials.environments.images import BaseImageMap, build_log, cache_dir, docker_client, ensure_base_image
from trials.environments.local import reap_leftovers as reap_local
from trials.environments.releases import DEFAULT, RELEASES, get_release, mirror_for
from trials.errors import InfraError

images_app = typer.Typer(help="Build the local base images, list task images, reap leftover sandboxes.",
                         no_args_is_help=True)


def _client(console: Console):
    try:
        return docker_client()
    except InfraError as exc:
        console.print(f"[red]{escape(str(exc))}[/red]")
        raise typer.Exit(1) from None


@images_app.command("base")
def base(force: Annotated[bool, typer.Option("--force", help="rebuild the rootfs and re-import")] = False,
         release: Annotated[str, typer.Option("--release", help=f"which release: {', '.join(RELEASES)}")]
         = DEFAULT) -> None:
    """Build rise-base:<release> (debootstrap of Debian bookworm unless --release says another + docker import).
    Idempotent: an image that is there is kept."""
    console = _console.out()
    try:
        chosen = get_release(release)
    except InfraError as exc:
        console.print(f"[red]{escape(str(exc))}[/red]")
        raise typer.Exit(2) from None
    client = _client(console)
    where = f"{chosen.label} {chosen.version} from {mirror_for(chosen)}; log: {build_log(chosen)}"
    try:
        with console.status(f"building {chosen.image} ({escape(where)}; debootstrap, minutes the first time)"):
            image_id = ensure_base_image(force=force, client=client, release=chosen)
    except InfraError as exc:
        console.print(f"[red]{escape(str(exc))}[/red]" + (f"\nlog: {exc.log_path}" if exc.log_path else ""))
        raise typer.Exit(1) from None
    console.print(f"[green]{chosen.image}[/green] {image_id[:19]} ({escape(where)}; rootfs cache: {cache_dir()})")


@images_app.command("list")
def list_images() -> None:
    """List the base image and the cached task images, and show the base-image map in force."""
    console = _console.out()
    client = _client(console)
    table = Table(title="rise images")
    for col in ("image", "id", "task", "size MB", "created"):
        table.add_column(col)
    bases = {r.image for r in RELEASES.values()}
    for img in client.images.list():
        tags = [t for t in img.tags if t in bases or t.startswith(TASK_IMAGE_REPO + "-")]
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
