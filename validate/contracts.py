"""Behavioural contracts of a candidate, checked in three configurations, with a repair loop.

``run_contracts(candidate_dir, incumbent_dir, frozen_store)`` runs every case of the candidate's contracts (by
default only the contracts it adds or changes against the incumbent: one mechanism per candidate) as scripted
scenarios in three configurations:

- ``incumbent``: the parent version with its defaults (case settings it does not know are left out);
- ``off``: the candidate with the contract's setting at its ``off`` value;
- ``on``: the candidate with the setting ``on``, its ``depends_on`` mechanisms on.

In every configuration the ``conflicts_with`` mechanisms are switched off where the harness has them. An
expectation is checked in the configurations it lists. One tagged ``incumbent`` is checked on the incumbent
first; the values it observed there are then frozen in the :class:`FrozenStore` and every other configuration,
and every later round, must select exactly those values. A crashed run (no outcome, harness crash or timeout,
⊥) fails its case; a negative case can never pass on a crash. Failures go to ``repair(candidate_dir, failures)
-> bool`` (True: something was changed, check again), at most ``max_repairs`` times.

Static problems (a contract that does not load, a switch key that settings.toml lacks, a hook or span that
does not exist, a dependency on an unknown mechanism) fail the check before anything runs.

A check that could not fail is a failure too: no configuration to run, a configuration in which no expectation
of a contract was checked, or a positive case whose ``on`` and ``off`` runs behave the same (the same reply
rules answered, the same claims, requests, status, reward and spans per boundary: the switch changed nothing).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import logging
import tempfile
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from handbook.source import HarnessSource
from monitor.agents import harness_agent
from trials.harness_api import write_json_atomic

from .contract_model import (
    CONFIGS,
    Case,
    Config,
    Contract,
    ContractError,
    Expectation,
    contract_files,
    load_contract,
    select,
)
from .scenarios import ScenarioRun, run_scenario

log = logging.getLogger(__name__)

FROZEN_VERSION = 1


# ---------------------------------------------------------------------------------------------- results
@dataclass
class ContractFailure:
    """One thing that went wrong: a static problem (``case`` None) or a failed check of one case run."""

    mechanism: str
    message: str
    case: str | None = None
    kind: str | None = None
    config: str | None = None
    expectation: str | None = None
    trial_dir: str | None = None

    def __str__(self) -> str:
        where = "/".join(p for p in (self.mechanism, self.case, self.config, self.expectation) if p)
        return f"{where}: {self.message}"


@dataclass
class CaseRun:
    mechanism: str
    case: str
    kind: str
    config: str
    passed: bool
    trial_dir: str
    status: str | None
    crash: str | None
    checked: int
    failures: list[ContractFailure] = field(default_factory=list)


@dataclass
class ContractReport:
    """What ``run_contracts`` found; ``passed`` only when nothing failed in the last attempt."""

    passed: bool
    candidate: str
    incumbent: str
    mechanisms: list[str]
    runs: list[CaseRun] = field(default_factory=list)
    problems: list[ContractFailure] = field(default_factory=list)
    repairs: int = 0
    history: list[list[str]] = field(default_factory=list)  # failures of the attempts before the last
    frozen_added: list[str] = field(default_factory=list)
    out_dir: str = ""

    @property
    def failures(self) -> list[ContractFailure]:
        return self.problems + [f for r in self.runs for f in r.failures]

    def summary(self) -> str:
        if self.passed:
            return (f"contracts passed: {', '.join(self.mechanisms) or 'none'} "
                    f"({len(self.runs)} case runs, {self.repairs} repair(s))")
        lines = [f"contracts failed ({len(self.failures)} failure(s), {self.repairs} repair(s)):"]
        lines += [f"  - {f}" for f in self.failures[:30]]
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


Repair = Callable[[Path, list[ContractFailure]], bool]


# ---------------------------------------------------------------------------------------------- frozen values
class FrozenStore:
    """Incumbent observations frozen per (mechanism, case, expectation, path), in one JSON file.

    The key holds the expectation's path, so editing a path freezes afresh instead of comparing apples with
    pears. Writes are atomic; a value once frozen is never overwritten (``put`` keeps the first)."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self._data: dict[str, Any] = {"version": FROZEN_VERSION, "values": {}}
        if self.path.is_file():
            data = json.loads(self.path.read_text())
            if data.get("version") != FROZEN_VERSION or not isinstance(data.get("values"), dict):
                raise ValueError(f"{self.path}: not a frozen-values file of version {FROZEN_VERSION}")
            self._data = data

    @staticmethod
    def key(mechanism: str, case: str, expectation: Expectation) -> str:
        return f"{mechanism}/{case}/{expectation.id}@{expectation.path}"

    def get(self, key: str) -> list[Any] | None:
        entry = self._data["values"].get(key)
        return None if entry is None else entry["values"]

    def put(self, key: str, values: list[Any], source: str) -> bool:
        """Freeze ``values``; False (nothing written) when the key was already frozen."""
        if self.path.is_file():  # another store object on the same file may have frozen values since
            on_disk = json.loads(self.path.read_text()).get("values", {})
            self._data["values"] = {**on_disk, **self._data["values"]}
        if key in self._data["values"]:
            return False
        self._data["values"][key] = {"values": values, "source": source,
                                     "frozen_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds")}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        write_json_atomic(self.path, self._data)
        return True

    def keys(self) -> list[str]:
        return sorted(self._data["values"])

    def __contains__(self, key: str) -> bool:
        return key in self._data["values"]


# ---------------------------------------------------------------------------------------------- loading
def load_contracts(harness_dir: str | Path) -> tuple[dict[str, Contract], list[ContractFailure]]:
    """Every contract of a harness by mechanism, and the files that did not load."""
    contracts, problems = {}, []
    for path in contract_files(harness_dir):
        try:
            c = load_contract(path)
        except ContractError as exc:
            problems.append(ContractFailure(path.stem, str(exc)))
            continue
        contracts[c.mechanism] = c
    return contracts, problems


def changed_contracts(candidate_dir: str | Path, incumbent_dir: str | Path) -> list[str]:
    """Mechanisms whose contract file the candidate adds or changes against the incumbent."""
    out = []
    for path in contract_files(candidate_dir):
        old = Path(incumbent_dir) / path.parent.name / path.name
        if not old.is_file() or old.read_bytes() != path.read_bytes():
            out.append(path.stem)
    return out


def static_problems(harness_dir: str | Path, contracts: dict[str, Contract]) -> list[ContractFailure]:
    """What is wrong with the contracts before anything runs (keys, hooks, spans, mechanism names)."""
    source = HarnessSource.from_dir(harness_dir)
    settings = source.settings() or {}
    boundaries = set(source.boundaries() or [])
    out: list[ContractFailure] = []
    for c in contracts.values():
        def bad(msg: str, c: Contract = c) -> None:
            out.append(ContractFailure(c.mechanism, msg))

        if c.setting.key not in settings:
            bad(f"setting {c.setting.key!r} is not a key of settings.toml")
        if c.setting.on == c.setting.off:
            bad(f"setting {c.setting.key!r}: on and off are the same value ({c.setting.on!r})")
        for hook in c.hooks:
            res = source.resolve(hook)
            if res.definition is None:
                bad(f"hook {hook}: {res.problem}")
        for span in c.spans:
            if span not in boundaries:
                bad(f"span {span} is not a boundary of recording.toml")
        for other in c.depends_on + c.conflicts_with:
            if other not in contracts:
                bad(f"{other!r} (depends_on/conflicts_with) is not a mechanism with a contract here")
        for case in c.cases:
            for key in case.settings:
                if key not in settings:
                    bad(f"case {case.name}: setting {key!r} is not a key of settings.toml")
    return out


def _settings_keys(harness_dir: Path) -> set[str]:
    return set(HarnessSource.from_dir(harness_dir).settings() or {})


def config_settings(config: Config, contract: Contract, case: Case, contracts: dict[str, Contract],
                    known: set[str]) -> dict[str, Any]:
    """The settings overrides of one configuration, limited to the keys this harness has."""
    out: dict[str, Any] = dict(case.settings)
    for other in contract.conflicts_with:
        if other in contracts:
            out[contracts[other].setting.key] = contracts[other].setting.off
    if config == "off":
        out[contract.setting.key] = contract.setting.off
    elif config == "on":
        for other in contract.depends_on:
            if other in contracts:
                out[contracts[other].setting.key] = contracts[other].setting.on
        out[contract.setting.key] = contract.setting.on
    return {k: v for k, v in out.items() if k in known}


# ---------------------------------------------------------------------------------------------- checking
def behaviour(document: dict[str, Any]) -> str:
    """What a scenario run visibly did, for telling the ``on`` run from the ``off`` run of a positive case."""
    spans = sorted(Counter(str(s.get("boundary")) for s in document.get("spans") or []).items())
    return json.dumps({k: document.get(k) for k in ("rules", "claims", "requests", "status", "reward")}
                      | {"spans": spans}, sort_keys=True, default=str)


def vacuity_problems(contracts: dict[str, Contract], chosen: list[str], runs: list[CaseRun],
                     configs: tuple[Config, ...]) -> list[ContractFailure]:
    """Configurations in which a contract checked no expectation at all: it passed there without a test."""
    out = []
    for m in chosen:
        for config in configs:
            if not any(r.checked for r in runs if r.mechanism == m and r.config == config):
                out.append(ContractFailure(m, f"no expectation was checked in configuration {config!r}; each "
                                           "configuration needs at least one (set its configs)", config=config))
    return out


def evaluate_run(contract: Contract, case: Case, config: Config, run: ScenarioRun, frozen: FrozenStore,
                 source: str, frozen_added: list[str]) -> CaseRun:
    """Check a case run's expectations for ``config`` (freezing incumbent values on the incumbent)."""
    failures: list[ContractFailure] = []

    def fail(message: str, e: Expectation | None = None) -> None:
        failures.append(ContractFailure(contract.mechanism, message, case.name, case.kind, config,
                                        e.id if e else None, str(run.trial_dir)))

    if run.crash and (case.kind == "negative" or not case.allow_crash):
        fail(f"the run crashed: {run.crash}")
    checked = 0
    for e in case.expect:
        if config not in e.configs:
            continue
        checked += 1
        if e.tag == "incumbent":
            key = FrozenStore.key(contract.mechanism, case.name, e)
            if config == "incumbent" and (e.value is not None or e.op in ("exists", "absent")):
                ok, _, msg = e.check(run.document)
                if not ok:
                    fail(f"incumbent behaviour: {msg}", e)
                    continue
            stored = frozen.get(key)
            if stored is None:
                if config != "incumbent":
                    fail("no frozen incumbent value to compare with (the incumbent run did not freeze one)", e)
                    continue
                values = select(run.document, e.path)
                if run.crash:
                    fail("not freezing values observed in a crashed run", e)
                elif frozen.put(key, values, source):
                    frozen_added.append(key)
                continue
            ok, _, msg = e.check_frozen(run.document, stored)
        else:
            ok, _, msg = e.check(run.document)
        if not ok:
            fail(msg, e)
    status = run.document.get("status")
    return CaseRun(contract.mechanism, case.name, case.kind, config, not failures, str(run.trial_dir), status,
                   run.crash, checked, failures)


async def _run_case(contract: Contract, case: Case, contracts: dict[str, Contract], candidate: Path,
                    incumbent: Path, frozen: FrozenStore, out: Path, sem: asyncio.Semaphore,
                    configs: tuple[Config, ...], frozen_added: list[str], agents: dict) -> list[CaseRun]:
    task = contract.tasks[case.task]
    base = out / contract.mechanism / case.name
    known = {"incumbent": _settings_keys(incumbent), "candidate": _settings_keys(candidate)}
    source = f"incumbent {agents['incumbent'].harness_version}"

    seen: dict[Config, str] = {}

    async def one(config: Config) -> CaseRun:
        harness = incumbent if config == "incumbent" else candidate
        keys = known["incumbent" if config == "incumbent" else "candidate"]
        settings = config_settings(config, contract, case, contracts, keys)
        async with sem:
            run = await run_scenario(harness, case, task, settings, base / config, label=config,
                                     agent=agents["incumbent" if config == "incumbent" else "candidate"])
        seen[config] = behaviour(run.document)
        return evaluate_run(contract, case, config, run, frozen, source, frozen_added)

    results = []
    if "incumbent" in configs:  # first: it freezes what the other two are compared with
        results.append(await one("incumbent"))
    rest = [c for c in configs if c != "incumbent"]
    async with asyncio.TaskGroup() as tg:
        tasks = [tg.create_task(one(c)) for c in rest]
    results += [t.result() for t in tasks]
    if case.kind == "positive" and "on" in seen and "off" in seen and seen["on"] == seen["off"]:
        on = next(r for r in results if r.config == "on")
        on.failures.append(ContractFailure(contract.mechanism, "the on and off runs behave the same on this positive "
                                           "case (same replies, claims, status, reward and spans): the switch "
                                           "changed nothing", case.name, case.kind, "on", None, on.trial_dir))
        on.passed = False
    return results


async def _attempt(candidate: Path, incumbent: Path, frozen: FrozenStore, out: Path, *,
                   scope: Literal["changed", "all"], mechanisms: list[str] | None, concurrency: int,
                   configs: tuple[Config, ...]) -> ContractReport:
    contracts, problems = load_contracts(candidate)
    if mechanisms is not None:
        chosen = list(mechanisms)
        problems += [ContractFailure(m, "the candidate has no contract for this mechanism")
                     for m in chosen if m not in contracts]
    elif scope == "changed":
        chosen = changed_contracts(candidate, incumbent)
        if not chosen and not problems:
            problems.append(ContractFailure("-", "the candidate adds or changes no contract (each candidate "
                                            "ships the contract of its mechanism in contracts/)"))
    else:
        chosen = sorted(contracts)
    problems += [p for p in static_problems(candidate, contracts) if p.mechanism in chosen]
    chosen = [m for m in chosen if m in contracts]
    report = ContractReport(False, str(candidate), str(incumbent), chosen, problems=problems, out_dir=str(out))
    if problems:
        return report
    if not configs:  # nothing would run: a pass here would prove nothing
        report.problems.append(ContractFailure("-", "no configuration to check (configs is empty)"))
        return report
    try:
        agents = {"candidate": harness_agent(candidate), "incumbent": harness_agent(incumbent)}
    except ValueError as exc:  # not a harness package
        report.problems.append(ContractFailure("-", str(exc)))
        return report
    sem = asyncio.Semaphore(max(1, concurrency))
    async with asyncio.TaskGroup() as tg:
        jobs = [tg.create_task(_run_case(contracts[m], case, contracts, candidate, incumbent, frozen, out, sem,
                                         configs, report.frozen_added, agents))
                for m in chosen for case in contracts[m].cases]
    report.runs = [r for j in jobs for r in j.result()]
    report.problems += vacuity_problems(contracts, chosen, report.runs, configs)
    report.passed = not report.failures
    return report


async def arun_contracts(candidate_dir: str | Path, incumbent_dir: str | Path,
                         frozen_store: FrozenStore | str | Path, *, repair: Repair | None = None,
                         max_repairs: int = 2, out_dir: str | Path | None = None,
                         scope: Literal["changed", "all"] = "changed", mechanisms: list[str] | None = None,
                         concurrency: int = 3, configs: tuple[Config, ...] = CONFIGS) -> ContractReport:
    """Async :func:`run_contracts`."""
    candidate, incumbent = Path(candidate_dir).resolve(), Path(incumbent_dir).resolve()
    frozen = frozen_store if isinstance(frozen_store, FrozenStore) else FrozenStore(frozen_store)
    root = Path(out_dir) if out_dir else Path(tempfile.mkdtemp(prefix="rise-contracts-"))
    history: list[list[str]] = []
    repairs = 0
    while True:
        out = root / f"attempt{repairs}"
        report = await _attempt(candidate, incumbent, frozen, out, scope=scope, mechanisms=mechanisms,
                                concurrency=concurrency, configs=configs)
        report.repairs, report.history = repairs, history
        out.mkdir(parents=True, exist_ok=True)
        write_json_atomic(out / "report.json", report.to_dict())
        if report.passed or repair is None or repairs >= max_repairs:
            return report
        failures = report.failures
        history.append([str(f) for f in failures])
        repairs += 1
        log.info("contracts: %d failure(s); repair attempt %d of %d", len(failures), repairs, max_repairs)
        changed = await asyncio.to_thread(repair, candidate, failures)
        if not changed:
            report.repairs = repairs
            return report


def run_contracts(candidate_dir: str | Path, incumbent_dir: str | Path, frozen_store: FrozenStore | str | Path,
                  **kwargs: Any) -> ContractReport:
    """Run the candidate's contracts in the three configurations (see the module docstring).

    ``frozen_store``: a :class:`FrozenStore` or the path of its JSON file (e.g. ``runs/<exp>/frozen.json``).
    Keyword options: ``repair``, ``max_repairs`` (2), ``out_dir`` (a temp dir), ``scope`` (``changed`` |
    ``all``), ``mechanisms`` (explicit list), ``concurrency`` (3), ``configs``. Call :func:`arun_contracts`
    from async code."""
    return asyncio.run(arun_contracts(candidate_dir, incumbent_dir, frozen_store, **kwargs))


def mechanism_spans(harness_dir: str | Path, mechanisms: list[str] | None = None) -> dict[str, list[str]]:
    """The recorded boundaries each contract names as evidence (for screening: did the mechanism run?)."""
    contracts, _ = load_contracts(harness_dir)
    return {m: list(c.spans) for m, c in contracts.items() if mechanisms is None or m in mechanisms}
