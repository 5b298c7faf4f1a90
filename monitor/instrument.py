"""Instrumentation by recording config at load time: no decorators in harness code.

For each boundary ``module:qualname`` the function is looked up in ``<package>.<module>``, wrapped (sync or
async; plain, static or class method), put back in its module or class, and every other reference to the
same function object in the package's loaded modules is replaced too (names bound by ``from .x import f``,
class attributes, module-level registry dicts), so calls through any of those names are recorded.

A span carries: ``code.function.name`` / ``code.file.path`` / ``code.line.number``, ``rise.boundary`` (the
config target, stable across harness copies), ``rise.trial_id`` and ``rise.episode`` (the contextvars of
``trials.harness_api`` at span start), ``rise.args`` (JSON object: argument name → bounded, redacted text),
``rise.return``, an ``exception`` event + error status when the call raises (the exception is re-raised
unchanged), and for ``genai = true`` boundaries the ``gen_ai.*`` attributes.
"""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import functools
import importlib
import inspect
import json
import logging
import pkgutil
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from trials.harness_api import EPISODE, TRIAL_ID, InferenceSummary

from .config import Boundary, RecordingConfig, RecordingConfigError
from .export import SLACK, Captured
from .redact import Redactor

log = logging.getLogger(__name__)

_MAX_DEPTH = 4
_ATOMS = (int, float, bool, type(None), complex)


# ---------------------------------------------------------------------------------------------- capture
_FIELDS: dict[type, tuple[str, ...] | None] = {}
_UNKNOWN = object()


def _field_names(cls: type) -> tuple[str, ...] | None:
    """Field names of a pydantic model or dataclass (cached per class), None for anything else."""
    pyd = getattr(cls, "__pydantic_fields__", None)
    if isinstance(pyd, dict):
        names: tuple[str, ...] | None = tuple(pyd)
    elif dataclasses.is_dataclass(cls):
        names = tuple(f.name for f in dataclasses.fields(cls))
    else:
        names = None
    _FIELDS[cls] = names
    return names


def bounded_repr(obj: Any, budget: int, depth: int = 0) -> str:
    """A repr that stops after about ``budget`` characters (never formats a whole 1 MB history)."""
    cls = obj.__class__
    if cls in _ATOMS:
        return repr(obj)
    if cls is str or cls is bytes:
        return repr(obj[:budget]) + ("…" if len(obj) > budget else "")
    if depth >= _MAX_DEPTH:
        return "…"
    if isinstance(obj, (list, tuple, set, frozenset, dict)):
        is_map = isinstance(obj, dict)
        opening, closing = ("{", "}") if is_map or isinstance(obj, (set, frozenset)) else (
            ("[", "]") if isinstance(obj, list) else ("(", ")"))
        parts, used = [], 0
        items = obj.items() if is_map else obj
        for i, item in enumerate(items):
            if used >= budget:
                parts.append(f"…+{len(obj) - i}")
                break
            if is_map:
                k, v = item
                piece = bounded_repr(k, budget - used, depth + 1) + ": " + bounded_repr(v, budget - used, depth + 1)
            else:
                piece = bounded_repr(item, budget - used, depth + 1)
            parts.append(piece)
            used += len(piece) + 2
        return opening + ", ".join(parts) + closing
    fields = _FIELDS.get(cls, _UNKNOWN)
    if fields is _UNKNOWN:
        fields = _field_names(cls)
    if fields is not None:
        parts, used = [], 0
        for name in fields:
            if used >= budget:
                parts.append("…")
                break
            piece = f"{name}={bounded_repr(getattr(obj, name, None), budget - used, depth + 1)}"
            parts.append(piece)
            used += len(piece) + 2
        return f"{cls.__name__}({', '.join(parts)})"
    if cls.__repr__ is object.__repr__:
        return f"<{cls.__qualname__}>"
    if isinstance(obj, enum.Enum):
        return f"{cls.__name__}.{obj.name}"
    try:
        text = repr(obj)
    except Exception as exc:  # noqa: BLE001 - a broken __repr__ must not break the harness call
        return f"<{cls.__qualname__} repr failed: {type(exc).__name__}>"
    return text[:budget] + ("…" if len(text) > budget else "")


def capture_raw(value: Any, limit: int) -> Captured:
    """The text of a value, bounded but not yet redacted nor cut (see :class:`monitor.export.Captured`).
    A string is kept as it is (immutable: the writer thread cuts it); anything else is formatted now, because
    it may change after the call."""
    if value.__class__ is str:
        return Captured(value, limit, len(value))
    return Captured(bounded_repr(value, limit + SLACK), limit, None)


def capture(value: Any, limit: int, redact: Callable[[str], str] | None) -> str:
    """Text of a value, redacted, then cut to ``limit`` characters with a marker saying how much was cut."""
    return capture_raw(value, limit).final(redact)


# ---------------------------------------------------------------------------------------------- sites
@dataclasses.dataclass
class Site:
    """What a wrapper needs about its boundary, computed once at instrumentation time."""

    target: str
    boundary: Boundary
    static_attrs: dict[str, Any]
    argnames: tuple[str, ...]
    skip: frozenset[str]
    arg_limit: int
    return_limit: int
    is_method: bool


@dataclasses.dataclass
class Patch:
    owner: Any  # module, class or dict
    name: Any
    original: Any


class Instrumentation:
    """Apply (and undo) a recording config to an imported harness package."""

    def __init__(self, package: str, config: RecordingConfig, tracer, redactor: Redactor | None = None, *,
                 config_path: str | Path | None = None, default_model: str | None = None,
                 defer_redaction: bool = False):
        self.package, self.config, self.tracer = package, config, tracer
        self.redactor = redactor or Redactor(patterns=config.redact.patterns, env_names=config.redact.env_names)
        self.config_path = config_path
        self.default_model = default_model
        # Deferred: spans carry Captured values that the sink's writer thread redacts (lean backend only;
        # SDK spans need final attribute values).
        self.defer = defer_redaction and getattr(tracer, "backend", "") == "lean"
        self.active = True
        self.terminating = False  # set by monitor.host on SIGTERM: cancellations are then the kill
        self.patches: list[Patch] = []
        self.sites: dict[str, Site] = {}
        self.internal_errors = 0
        self.inference = InferenceSummary()  # every recorded model call's time, for the trial's result.json

    # ------------------------------------------------------------------------------------------ apply
    def apply(self) -> list[str]:
        """Wrap every boundary; raise RecordingConfigError naming the first that does not resolve."""
        importlib.import_module(self.package)
        self._import_all_submodules()
        for i, b in enumerate(self.config.boundary):
            owner, attr, raw = self._resolve(i, b)
            self._wrap(owner, attr, raw, b, i)
        return list(self.sites)

    def remove(self) -> None:
        """Put every original back (the uninstrumented run of a benchmark, tests)."""
        for p in reversed(self.patches):
            if isinstance(p.owner, dict):
                p.owner[p.name] = p.original
            elif p.original is _MISSING:  # we shadowed an inherited method on a subclass
                delattr(p.owner, p.name)
            else:
                setattr(p.owner, p.name, p.original)
        self.patches.clear()
        self.sites.clear()

    def _import_all_submodules(self) -> None:
        # So references bound in modules the harness would import lazily are replaced too.
        pkg = sys.modules[self.package]
        for info in pkgutil.walk_packages(getattr(pkg, "__path__", []), prefix=self.package + "."):
            if info.name.rsplit(".", 1)[-1] in {"__main__", "tests", "conftest"}:
                continue
            try:
                importlib.import_module(info.name)
            except Exception as exc:  # noqa: BLE001 - not ours to fix; its boundaries (if any) will fail loudly below
                log.warning("monitor: could not import %s: %s", info.name, exc)

    def _fail(self, i: int, b: Boundary, message: str) -> RecordingConfigError:
        return RecordingConfigError(self.config_path, f"boundary[{i}].target",
                                    f"{b.target!r} (in package {self.package}): {message}")

    def _resolve(self, i: int, b: Boundary) -> tuple[Any, str, Any]:
        modname = f"{self.package}.{b.module}"
        try:
            module = importlib.import_module(modname)
        except ModuleNotFoundError as exc:
            if exc.name and modname.startswith(exc.name):
                raise self._fail(i, b, f"no module {modname}") from None
            raise self._fail(i, b, f"importing {modname} failed: {exc}") from exc
        except Exception as exc:
            raise self._fail(i, b, f"importing {modname} failed: {exc!r}") from exc
        owner: Any = module
        parts = b.qualname.split(".")
        for depth, part in enumerate(parts[:-1]):
            try:
                owner = getattr(owner, part)
            except AttributeError:
                raise self._fail(i, b, f"{modname} has no {'.'.join(parts[:depth + 1])}") from None
        attr = parts[-1]
        raw = None
        if isinstance(owner, type):
            for klass in owner.__mro__:
                if attr in vars(klass):
                    raw = vars(klass)[attr]
                    break
        else:
            raw = vars(owner).get(attr)
        if raw is None:
            raise self._fail(i, b, f"{modname}.{b.qualname} does not exist")
        return owner, attr, raw

    def _wrap(self, owner: Any, attr: str, raw: Any, b: Boundary, i: int) -> None:
        kind = None
        fn = raw
        if isinstance(raw, staticmethod):
            kind, fn = staticmethod, raw.__func__
        elif isinstance(raw, classmethod):
            kind, fn = classmethod, raw.__func__
        if getattr(fn, "__rise_boundary__", None):
            raise self._fail(i, b, f"already instrumented as {fn.__rise_boundary__}")
        if not inspect.isfunction(fn):
            raise self._fail(i, b, f"is a {type(raw).__name__}, not a function or method")
        if inspect.isgeneratorfunction(fn) or inspect.isasyncgenfunction(fn):
            raise self._fail(i, b, "generator functions cannot be boundaries (the span would end at creation)")
        code = fn.__code__
        argnames = code.co_varnames[: code.co_argcount + code.co_kwonlyargcount]
        is_method = isinstance(owner, type) and kind is not staticmethod
        site = Site(
            target=b.target, boundary=b,
            static_attrs={
                "code.function.name": f"{fn.__module__}.{fn.__qualname__}",
                "code.file.path": code.co_filename,
                "code.line.number": code.co_firstlineno,
                "rise.boundary": b.target,
                "openinference.span.kind": "LLM" if b.genai else "CHAIN",
            },
            argnames=argnames,
            skip=frozenset(b.skip_args) | ({argnames[0]} if is_method and argnames else set()),
            arg_limit=self.config.arg_limit(b), return_limit=self.config.return_limit(b),
            is_method=is_method,
        )
        wrapper = self._make_wrapper(fn, site)
        wrapped_raw = kind(wrapper) if kind else wrapper
        self.patches.append(Patch(owner, attr, vars(owner).get(attr, _MISSING)))
        setattr(owner, attr, wrapped_raw)
        self._replace_references(fn, wrapper, skip_owner=(owner, attr))
        self.sites[b.target] = site

    def _replace_references(self, fn: Any, wrapper: Any, skip_owner: tuple[Any, str]) -> None:
        prefix = self.package + "."
        for name, module in list(sys.modules.items()):
            if module is None or not (name == self.package or name.startswith(prefix)):
                continue
            for key, value in list(vars(module).items()):
                if value is fn:
                    self.patches.append(Patch(module, key, fn))
                    setattr(module, key, wrapper)
                elif isinstance(value, dict):
                    for dk, dv in list(value.items()):
                        if dv is fn:
                            self.patches.append(Patch(value, dk, fn))
                            value[dk] = wrapper
                elif isinstance(value, type) and getattr(value, "__module__", "").startswith(self.package):
                    for ck, cv in list(vars(value).items()):
                        if cv is fn and (value, ck) != skip_owner:
                            self.patches.append(Patch(value, ck, fn))
                            setattr(value, ck, wrapper)

    # ------------------------------------------------------------------------------------------ wrappers
    def _make_wrapper(self, fn: Callable, site: Site) -> Callable:
        enter, leave, leave_error = self._enter, self._leave, self._leave_error
        mon = self

        if inspect.iscoroutinefunction(fn):
            @functools.wraps(fn)
            async def wrapper(*args, **kwargs):
                if not mon.active:
                    return await fn(*args, **kwargs)
                handle = enter(site, args, kwargs)
                try:
                    result = await fn(*args, **kwargs)
                except BaseException as exc:
                    leave_error(site, handle, exc)
                    raise
                leave(site, handle, result)
                return result
        else:
            @functools.wraps(fn)
            def wrapper(*args, **kwargs):
                if not mon.active:
                    return fn(*args, **kwargs)
                handle = enter(site, args, kwargs)
                try:
                    result = fn(*args, **kwargs)
                except BaseException as exc:
                    leave_error(site, handle, exc)
                    raise
                leave(site, handle, result)
                return result

        wrapper.__rise_boundary__ = site.target
        wrapper.__rise_original__ = fn
        return wrapper

    def _enter(self, site: Site, args: tuple, kwargs: dict):
        try:
            attrs = site.static_attrs.copy()
            trial = TRIAL_ID.get()
            if trial is not None:
                attrs["rise.trial_id"] = trial
            episode = EPISODE.get()
            if episode is not None:
                attrs["rise.episode"] = episode
            b = site.boundary
            if b.capture_args or b.genai:
                named = dict(zip(site.argnames, args))
                if len(args) > len(site.argnames):
                    named["*args"] = args[len(site.argnames):]
                if kwargs:
                    named.update(kwargs)
                if b.capture_args:
                    limit, skip = site.arg_limit, site.skip
                    if self.defer:
                        attrs["rise.args"] = {k: capture_raw(v, limit) for k, v in named.items() if k not in skip}
                    else:
                        redact = self.redactor.redact
                        attrs["rise.args"] = json.dumps(
                            {k: capture(v, limit, redact) for k, v in named.items() if k not in skip},
                            ensure_ascii=False)
                if b.genai:
                    self._genai_request(site, named, attrs)
            return self.tracer.start(site.target, attrs, site.static_attrs)
        except Exception:  # noqa: BLE001 - the monitor must never change what the harness does
            self._internal_error()
            return None

    def _leave(self, site: Site, handle, result: Any) -> None:
        if handle is None:
            return
        try:
            extra: dict[str, Any] = {}
            if site.boundary.capture_return:
                extra["rise.return"] = (capture_raw(result, site.return_limit) if self.defer
                                        else capture(result, site.return_limit, self.redactor.redact))
            if site.boundary.genai:
                self._genai_response(result, extra)
            self.tracer.finish(handle, extra)
        except Exception:  # noqa: BLE001 - see _enter
            self._internal_error()

    def _leave_error(self, site: Site, handle, exc: BaseException) -> None:
        if handle is None:
            return
        try:
            limit = self.config.limits.max_exception_chars
            redact = self.redactor.redact
            etype = f"{type(exc).__module__}.{type(exc).__qualname__}".removeprefix("builtins.")
            message = capture(str(exc), limit, redact)
            stack = capture("".join(traceback.format_exception(exc)), limit, redact)
            cancelled = isinstance(exc, (asyncio.CancelledError, GeneratorExit))
            extra: dict[str, Any] | None = None
            if self.terminating:
                extra, cancelled = {"rise.terminated": True}, False
            elif cancelled:
                extra = {"rise.cancelled": True}
            self.tracer.finish(handle, extra, (etype, message, stack), error_status=not cancelled)
        except Exception:  # noqa: BLE001 - see _enter
            self._internal_error()

    def _genai_request(self, site: Site, named: dict[str, Any], attrs: dict[str, Any]) -> None:
        attrs["gen_ai.operation.name"] = "chat"
        model = None
        if site.is_method and site.argnames:
            obj = named.get(site.argnames[0])
            for path in ("model", "client.model", "client.spec.model", "spec.model", "client.endpoint.model"):
                value: Any = obj
                for part in path.split("."):
                    value = getattr(value, part, None)
                if isinstance(value, str):
                    model = value
                    break
        model = model or self.default_model
        if model:
            attrs["gen_ai.request.model"] = model
        n = named.get("n")
        attrs["gen_ai.request.choice.count"] = n if isinstance(n, int) else 1
        temperature = named.get("temperature")
        if isinstance(temperature, (int, float)) and not isinstance(temperature, bool):
            attrs["gen_ai.request.temperature"] = float(temperature)

    def _genai_response(self, result: Any, extra: dict[str, Any]) -> None:
        replies = list(result) if isinstance(result, (list, tuple)) else [result]
        timings = next((t for t in (getattr(r, "timings", None) for r in replies) if t is not None), None)
        if timings is not None and hasattr(timings, "span_attributes"):
            # the candidates of one call share its timings: one call, counted once
            extra.update(timings.span_attributes())
            self.inference.add(timings)
        extra["rise.candidates"] = len(replies)
        ins = [r.input_tokens for r in replies if isinstance(getattr(r, "input_tokens", None), int)]
        outs = [r.output_tokens for r in replies if isinstance(getattr(r, "output_tokens", None), int)]
        if ins:
            # n candidates of one request share its prompt: count the prompt once.
            extra["gen_ai.usage.input_tokens"] = max(ins) if len(replies) > 1 else ins[0]
        if outs:
            extra["gen_ai.usage.output_tokens"] = sum(outs)
        reasons = [r.finish_reason for r in replies if isinstance(getattr(r, "finish_reason", None), str)]
        if reasons:
            extra["gen_ai.response.finish_reasons"] = reasons

    def _internal_error(self) -> None:
        self.internal_errors += 1
        if self.internal_errors <= 3:
            log.exception("monitor: internal error while recording a span (the harness call is unaffected)")


class _Missing:
    def __repr__(self) -> str:
        return "<missing>"


_MISSING = _Missing()

