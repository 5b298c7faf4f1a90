#!/usr/bin/env bash
# Idempotent set-up for a fresh machine: system packages, the Python package, the bundled llama.cpp server and
# model (cached under ~/.cache/riseharness), and the local Docker base image. A second run takes seconds.
#   RISE_SETUP_MODELS="qwen2.5-coder-1.5b qwen2.5-coder-0.5b"  which bundled models to assemble
#   RISE_SETUP_DOCKER=0                                          skip the Docker base image
#   RISE_CACHE_DIR=/path                                         the cache (see trials/cache.py)
#   RISE_LLAMA_ENGINE=wheel                                      llama.cpp's server from the xllamacpp wheel: no build
set -euo pipefail
cd "$(dirname "$0")/.."
say() { printf '\033[1m[setup]\033[0m %s\n' "$*"; }

need_apt=()
for pair in bwrap:bubblewrap debootstrap:debootstrap cmake:cmake ninja:ninja-build tmux:tmux g++:g++ nsenter:util-linux \
            slirp4netns:slirp4netns; do
  case "${RISE_LLAMA_ENGINE:-build}:${pair%%:*}" in wheel:cmake|wheel:ninja) continue ;; esac  # nothing to compile
  command -v "${pair%%:*}" >/dev/null 2>&1 || need_apt+=("${pair#*:}")
done
if [ "${RISE_SETUP_CHROMIUM:-1}" = 1 ] && ! command -v chromium >/dev/null 2>&1; then need_apt+=(chromium); fi
# apt runs beside pip (neither needs the other); the build below waits for it (cmake, ninja, g++).
apt_pid=
apt_log="$(mktemp -t rise-setup-apt.XXXXXX)"
if [ ${#need_apt[@]} -gt 0 ]; then
  say "installing system packages, beside the Python package: ${need_apt[*]}"
  if [ "$(id -u)" != 0 ]; then SUDO=sudo; else SUDO=; fi
  ( $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_apt[@]}" ) \
    >"$apt_log" 2>&1 &
  apt_pid=$!
fi
# A background step's end: on failure its output and what failed, then stop the set-up.
finish() {  # PID LOG WHAT
  if ! wait "$1"; then
    cat "$2" >&2
    say "$3 failed (output above: $2)"
    exit 1
  fi
}
wait_apt() {
  if [ -n "$apt_pid" ]; then
    finish "$apt_pid" "$apt_log" "installing system packages (${need_apt[*]})"
    apt_pid=
    say "system packages installed"
  fi
}

# The rise cache, by the rule of trials/cache.py: RISE_CACHE_DIR, else the deprecated RISE_CACHE, else XDG.
stamp_dir="${RISE_CACHE_DIR:-${RISE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/riseharness}}"
mkdir -p "$stamp_dir"
hash=$(sha256sum pyproject.toml | cut -c1-16)
# The editable install must point at THIS checkout (a second clone on the same machine must not test the first).
installed=$(cd / && python3 -c 'import pathlib, trials; print(pathlib.Path(trials.__file__).resolve().parent.parent)' 2>/dev/null || true)
pip_pid=
pip_log="$(mktemp -t rise-setup-pip.XXXXXX)"
if [ ! -f "$stamp_dir/pip-$hash" ] || ! command -v rise >/dev/null 2>&1 || [ "$installed" != "$(pwd -P)" ]; then
  say "installing the Python package and its dependencies"
  ( python3 -m pip install -q --disable-pip-version-check -e '.[dev]' && touch "$stamp_dir/pip-$hash" ) \
    >"$pip_log" 2>&1 &
  pip_pid=$!
fi
wait_pip() {
  if [ -n "$pip_pid" ]; then
    finish "$pip_pid" "$pip_log" "installing the Python package"
    pip_pid=
    say "Python package installed"
  fi
}

wait_apt

# The slow first-run steps overlap: compiling llama-server is CPU-bound, while pip, the model download and
# debootstrap mostly wait on the network and the disk. The build reads only trials/ and httpx, so where httpx is
# importable already it starts from this checkout before pip is done.
# The wheel engine (RISE_LLAMA_ENGINE=wheel) pip-installs into the same Python: after the package, not beside it.
if [ "${RISE_LLAMA_ENGINE:-build}" = wheel ] || ! python3 -c 'import httpx' >/dev/null 2>&1; then wait_pip; fi
if [ "${RISE_LLAMA_ENGINE:-build}" = wheel ]; then
  say "bundled model server (the prebuilt xllamacpp wheel) and models"
else
  say "bundled model server and models (first run builds llama-server, ~5 min on 2 cores)"
fi
PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" python3 - "${RISE_SETUP_MODELS:-qwen2.5-coder-1.5b qwen2.5-coder-0.5b}" <<'PY' &
import sys
from concurrent.futures import ThreadPoolExecutor
from trials.endpoints import bundled

def say(m):
    print("  ", m, flush=True)

with ThreadPoolExecutor(2) as pool:  # models download while the server compiles
    models = pool.submit(lambda: [bundled.ensure_model(n, progress=say) for n in sys.argv[1].split()])
    print("  server:", bundled.ensure_server(progress=say), flush=True)
    for path in models.result():
        print("  model:", path, flush=True)
PY
server_pid=$!

wait_pip
image_log="$stamp_dir/setup-base-image.log"
image_pid=
if [ "${RISE_SETUP_DOCKER:-1}" = 1 ] && docker info >/dev/null 2>&1; then
  say "Docker base image, in the background (first run: debootstrap + import, ~2 min; log: $image_log)"
  rise images base >"$image_log" 2>&1 &
  image_pid=$!
else
  say "Docker engine not reachable or RISE_SETUP_DOCKER=0: skipping the base image (--env docker unavailable)"
fi

if ! wait "$server_pid"; then
  say "the bundled model server or a model failed (above)"
  exit 1
fi
if [ -n "$image_pid" ]; then
  finish "$image_pid" "$image_log" "the Docker base image"
  tail -n 1 "$image_log"
fi
say "ready"
