"""Run a harness package instrumented: ``python -m monitor.host --harness DIR --spec SPEC``.

Puts DIR's parent on ``sys.path``, imports the package under DIR's name, applies ``DIR/recording.toml`` (if
present), writes spans to ``<agent_dir>/spans.jsonl`` (and to an OTLP/HTTP collector when the standard
``OTEL_EXPORTER_OTLP_*`` variables say so; confined, through the trial channel to the runner's collector), sets ``trials.harness_api.TRIAL_ID``, then calls
``<pkg>.main.main(["--spec", SPEC])`` and exits with its return code.

Ended spans reach the disk within ``write_linger_ms`` (the writer thread writes them in bursts; ``write = "sync"``
writes each before its call returns), so SIGKILL loses the spans still open and those of the last burst window.
On SIGTERM (the runner's first signal at the timeout) a ``SystemExit`` unwinds the harness: open spans end with an
error status, the harness's own ``finally`` blocks run, and the exporter is shut down, writing every span.
"""

from __future__ import annotations

import argparse
import atexit
import importlib
import json
import logging
import os
import signal
import socket
import sys
from pathlib import Path
from typing import Any

from trials.harness_api import TRIAL_ID, TrialSpec, write_json_atomic
from trials.results import MONITOR_STATS_FILE

from .channel_export import ChannelSpanExporter, channel_collector
from .config import RecordingConfigError, load_for_harness
from .export import JsonLinesSink, OtlpHttpForwarder, otlp_http_configured
from .instrument import Instrumentation
from .redact import Redactor, install_log_redaction
from .tracer import make_tracer

log = logging.getLogger(__name__)
SPANS_FILENAME = "spans.jsonl"
EXIT_CONFIG_ERROR = 3


class Monitor:
    """Everything the host sets up for one harness process; ``close()`` is idempotent."""

    def __init__(self, harness_dir: str | Path, spec: TrialSpec, *, spans_path: str | Path | None = None,
                 backend: str | None = None, env: dict[str, str] | None = None):
        self.harness_dir = Path(harness_dir).resolve()
        self.package = self.harness_dir.name
        self.spec = spec
        self.config, self.config_path = load_for_harness(self.harness_dir)
        env = dict(os.environ if env is None else env)
        self.redactor = Redactor(env, env_names=self.config.redact.env_names,
                                 extra_env_vars=[spec.endpoint.api_key_env] if spec.endpoint.api_key_env else [],
                                 patterns=self.config.redact.patterns)
        self.resource: dict[str, Any] = {
            "service.name": f"riseharness.{self.package}",
            "service.version": spec.harness_version,
            "host.name": socket.gethostname(),
            "process.pid": os.getpid(),
            "rise.trial_id": spec.trial_id,
            "rise.task_name": spec.task_name,
            "rise.harness_version": spec.harness_version,
            "rise.harness_package": self.package,
            "gen_ai.request.model": spec.endpoint.model,
            # Phoenix files traces by this resource attribute (its "project"); override with RISE_TRACE_PROJECT
            "openinference.project.name": os.environ.get("RISE_TRACE_PROJECT", "riseharness"),
        }
        self.spans_path = Path(spans_path) if spans_path else Path(spec.agent_dir) / SPANS_FILENAME
        self.sink = JsonLinesSink(self.spans_path, self.resource, redact=self.redactor.redact,
                                  mode=self.config.write, linger_sec=self.config.write_linger_ms / 1000)
        if otlp_http_configured(env):
            try:
                self.sink.forwarders.append(OtlpHttpForwarder(self.resource))
            except Exception as exc:  # noqa: BLE001 - a bad collector setting must not cost the trial
                log.warning("monitor: OTLP/HTTP export disabled: %s", exc)
        elif (sock := channel_collector(env)) is not None:  # confined: live, through the trial channel
            self.sink.forwarders.append(OtlpHttpForwarder(self.resource, ChannelSpanExporter(sock)))
        self.tracer = make_tracer(backend or self.config.backend, self.sink.submit, self.resource)
        self.instrumentation = Instrumentation(self.package, self.config, self.tracer, self.redactor,
                                               config_path=self.config_path, default_model=spec.endpoint.model,
                                               defer_redaction=True)
        self._root = None
        self._closed = False

    def start(self) -> list[str]:
        """Import and instrument the package, open the trial's root span. Returns the instrumented targets."""
        parent = str(self.harness_dir.parent)
        if parent not in sys.path:
            sys.path.insert(0, parent)
        pkg = importlib.import_module(self.package)
        where = Path(getattr(pkg, "__file__", None) or next(iter(getattr(pkg, "__path__", [])), "")).resolve()
        if self.harness_dir not in where.parents:
            raise RecordingConfigError(self.config_path, None, f"package {self.package} was imported from "
                                       f"{where}, not from {self.harness_dir} (a name clash?)")
        targets = self.instrumentation.apply()
        TRIAL_ID.set(self.spec.trial_id)
        self._root = self.tracer.start("rise.trial", {
            "rise.trial_id": self.spec.trial_id, "rise.task_name": self.spec.task_name,
            "rise.harness_version": self.spec.harness_version, "rise.boundaries": json.dumps(targets),
            "openinference.span.kind": "AGENT",
        })
        return targets

    def lost_spans(self) -> dict[str, int]:
        """Spans lost so far, by cause: failed writes of spans.jsonl, spans a collector did not take, and
        recording errors inside the instrumentation (each one a span missing or incomplete)."""
        return {"write": self.sink.spans_lost,
                "forward": sum(f.failed for f in self.sink.forwarders),
                "instrumentation": self.instrumentation.internal_errors}

    def close(self, exit_code: int | None = None, error: BaseException | None = None) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            if self._root is not None:
                self.sink.flush()  # so the write count includes every span that ended before the root
                lost = self.lost_spans()
                extra: dict[str, Any] = {f"rise.spans_lost.{k}": v for k, v in lost.items()}
                if exit_code is not None:
                    extra["rise.exit_code"] = exit_code
                info = None
                if error is not None:
                    info = (type(error).__qualname__, self.redactor.redact(str(error))[:2000], "")
                self.tracer.finish(self._root, extra, info)
            self.tracer.shutdown()
        finally:
            self.sink.shutdown()
            self._write_stats()

    def _write_stats(self) -> None:
        """The final lost-span counts (forwarders have finished now) for the runner's result.json."""
        lost = self.lost_spans()
        if any(lost.values()):
            log.warning("monitor: %s span(s) lost (%s); the trace of %s is incomplete", sum(lost.values()),
                        ", ".join(f"{k} {v}" for k, v in lost.items() if v), self.spec.trial_id)
        try:
            write_json_atomic(Path(self.spec.agent_dir) / MONITOR_STATS_FILE,
                              {"lost_spans": lost, "spans_written": self.sink.spans_written,
                               "inference": self.instrumentation.inference.model_dump()})
        except OSError as exc:  # the runner then finds no stats file and says so
            log.warning("monitor: could not write %s: %s", MONITOR_STATS_FILE, exc)


def _load_main(package: str):
    try:
        return importlib.import_module(f"{package}.main")
    except ModuleNotFoundError as exc:
        if exc.name == f"{package}.main":
            raise SystemExit(f"monitor.host: harness package {package} has no main.py") from None
        raise


def run(harness_dir: str | Path, spec_path: str | Path, *, backend: str | None = None) -> int:
    """Instrument and run one harness process; returns the harness's exit code."""
    spec = TrialSpec.load(spec_path)
    monitor = Monitor(harness_dir, spec, backend=backend)
    install_log_redaction(monitor.redactor)
    atexit.register(monitor.close)

    def on_sigterm(signum, frame):
        # Unwind instead of dying: open spans end (error status), the harness's finally blocks run.
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        monitor.instrumentation.terminating = True
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, on_sigterm)
    try:
        monitor.start()
    except RecordingConfigError as exc:
        monitor.close(EXIT_CONFIG_ERROR, exc)
        print(f"monitor.host: {exc}", file=sys.stderr)
        return EXIT_CONFIG_ERROR
    code: int | None = None
    error: BaseException | None = None
    try:
        mod = _load_main(monitor.package)
        code = mod.main(["--spec", str(spec_path)])
        code = 0 if code is None else int(code)
        return code
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        error = exc if code else None
        raise
    except BaseException as exc:
        error, code = exc, 1
        raise
    finally:
        monitor.close(code, error)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m monitor.host", description=__doc__.splitlines()[0])
    parser.add_argument("--harness", required=True, help="the harness package directory")
    parser.add_argument("--spec", required=True, help="the trial's trial_spec.json")
    parser.add_argument("--backend", choices=["lean", "sdk"], default=None,
                        help="override the recording config's span backend")
    args = parser.parse_args(argv)
    return run(args.harness, args.spec, backend=args.backend)


if __name__ == "__main__":
    sys.exit(main())
