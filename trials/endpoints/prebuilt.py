"""llama.cpp's server from a prebuilt wheel, with llama-server's command line: a candidate for the build (issue 42).

Compiling ``llama-server`` is about 80 % of a fresh machine's set-up (315 s of wall, 629 s of CPU on 2 cores). The
package index keeps ``xllamacpp``, a wheel with llama.cpp's server compiled in (CPU build for x86-64, no
``-march=native``), which serves the same HTTP API from inside a Python process. This module gives it the command
line of the flags the platform passes to ``llama-server`` (:func:`trials.endpoints.bundled.server_command`, the
slot cache of :meth:`ServerProcess.bundled`, ``rise serve --seed``), so the same command can name either.

``RISE_LLAMA_ENGINE=wheel`` chooses it (:func:`trials.endpoints.bundled.engine`); ``scripts/test.sh`` does, the main
job keeps the build, whose decode measured 6-8 % faster (``python benchmarks/inference.py --arms today prebuilt``).
An unknown flag is refused by name rather than dropped, so a setting never silently differs between the two servers.

    python -m trials.endpoints.prebuilt -m MODEL.gguf --host H --port P -c CTX -t T -np N --alias NAME --jinja
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from typing import Any

PACKAGE = "xllamacpp"
VERSION = "2026.10.11549"  # llama.cpp b11549; the built server is b11434 (bundled.LLAMA_VERSION)
INSTALL_HINT = f"pip install {PACKAGE}=={VERSION}"


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="python -m trials.endpoints.prebuilt", allow_abbrev=False,
        description="Serve a GGUF model with the llama.cpp server of the xllamacpp wheel, taking the llama-server "
                    "flags the platform uses; any other flag is an error.")
    ap.add_argument("-m", "--model", required=True, help="the GGUF file")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8080)
    ap.add_argument("-c", "--ctx-size", type=int, default=0, help="total context tokens, split across the slots")
    ap.add_argument("-t", "--threads", type=int, default=-1)
    ap.add_argument("-np", "--parallel", type=int, default=1, help="slots (sequences decoded together)")
    ap.add_argument("--alias", default=None, help="the model name the server answers to")
    ap.add_argument("--jinja", action="store_true", help="the model's own chat template (tools need it)")
    ap.add_argument("--slot-save-path", default="", help="where /slots/N?action=save writes")
    ap.add_argument("--seed", type=int, default=None, help="sampling seed")
    ap.add_argument("--metrics", action="store_true", help="the Prometheus /metrics endpoint")
    return ap


def params_from(args: argparse.Namespace, xlc: Any) -> Any:
    """``xllamacpp.CommonParams`` for ``args`` (the field names are llama.cpp's ``common_params``)."""
    p = xlc.CommonParams()
    p.model.path = args.model
    p.hostnames = [args.host]
    p.port = args.port
    p.n_ctx = args.ctx_size
    p.n_parallel = args.parallel
    p.cpuparams.n_threads = args.threads
    p.cpuparams_batch.n_threads = args.threads
    if args.alias:
        p.model_alias = {args.alias}
    p.use_jinja = bool(args.jinja)
    if args.slot_save_path:  # llama-server's parser ends it with a separator; the server joins by concatenation
        p.slot_save_path = args.slot_save_path.rstrip("/") + "/"
    if args.seed is not None:
        p.sampling.seed = args.seed
    p.endpoint_metrics = bool(args.metrics)
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        import xllamacpp as xlc
    except ImportError:
        print(f"prebuilt server: {PACKAGE} is not installed in {sys.executable} ({INSTALL_HINT})", file=sys.stderr)
        return 2
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    server = xlc.Server(params_from(args, xlc))  # loads the model and starts listening
    print(f"prebuilt server ({PACKAGE} {getattr(xlc, '__version__', '?')}) listening on "
          f"{server.listening_address}", flush=True)
    while not stop.wait(0.5):
        pass
    del server
    return 0


if __name__ == "__main__":
    sys.exit(main())
