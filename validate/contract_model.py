"""The behavioural-contract file format (``<harness>/contracts/<mechanism>.toml``) and its predicate language.

A contract describes one mechanism of a harness: when it triggers, what it visibly does, which functions it
hooks and what state it keeps, the setting that switches it (a dotted key of ``settings.toml`` with its on and
off values), the mechanisms it needs or excludes, and cases. A case is a scripted scenario: a small task, the
scripted model's replies (each reply may be conditional on what the last user message contains) and
expectations over what the run left behind. Example::

    version = 1
    mechanism = "completion-handshake"
    name = "Double-confirmation of completion"
    setting = { key = "terminus.confirmations", on = 2, off = 1 }
    spans = ["completion:CompletionHandshake.on_reply"]

    [tasks.hello]
    instruction = "Create /app/hello.txt containing 'hi'."
    check = "grep -qx hi /app/hello.txt"

    [[cases]]
    name = "claim-is-questioned"
    kind = "positive"
    task = "hello"
    [[cases.replies]]
    contains = "Are you sure"
    task_complete = true
    [[cases.replies]]
    commands = [{ keystrokes = "echo hi > /app/hello.txt\\n" }]
    task_complete = true
    [[cases.expect]]
    path = "claims"
    op = "eq"
    value = 2
    configs = ["on"]

The predicate language is deliberately tiny and never evaluates code. A path starts at a name of the run's
document (``trajectory``, ``steps`` (agent steps), ``spans``, ``result``, ``outcome``, ``reward``, ``status``,
``claims``, ``observations``, ``requests``) followed by ``.key``, ``[3]`` / ``[-1]`` (index), ``[*]`` (every item:
the selection fans out) and filters ``[key=v]``, ``[key!=v]``, ``[key^=prefix]``, ``[key*=substring]`` (the items
of a list whose ``key``, itself a dotted path, matches; the filtered list stays one value). Operators on each
selected value (``quant`` = all | any | none): eq, ne, gt, gte, lt, lte, contains, not_contains, matches (regex),
in, len_eq, len_gte, len_lte; on the selection as a whole: exists, absent, count_eq, count_gte, count_lte.
"""

from __future__ import annotations

import json
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from trials.errors import RiseError
from trials.validation import first_problem

CONTRACT_VERSION = 1
CONTRACTS_DIR = "contracts"
Config = Literal["incumbent", "off", "on"]
CONFIGS: tuple[Config, ...] = ("incumbent", "off", "on")
_IDENT = re.compile(r"^[a-z0-9][a-z0-9_.-]*$")
_FUNC = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")


class ContractError(RiseError):
    """A contract file is invalid; names the file and the field."""

    def __init__(self, path: str | Path, field: str | None, message: str):
        self.path, self.field, self.message = str(path), field, message
        super().__init__(f"{self.path}" + (f" [{field}]" if field else "") + f": {message}")


# ---------------------------------------------------------------------------------------------- paths
class PathError(ValueError):
    pass


_SEGMENT = re.compile(r"""
    \.(?P<key>[A-Za-z_][\w-]*)
  | \[(?P<index>-?\d+)\]
  | \[(?P<star>\*)\]
  | \[(?P<fkey>[A-Za-z_][\w.-]*)\s*(?P<fop>!=|\^=|\*=|=)\s*(?P<fval>"[^"]*"|[^\]]*)\]
""", re.VERBOSE)
_ROOT = re.compile(r"^[A-Za-z_]\w*")


@dataclass(frozen=True)
class Segment:
    kind: Literal["key", "index", "star", "filter"]
    key: str = ""
    index: int = 0
    op: str = ""
    value: str = ""


def parse_path(text: str) -> tuple[str, list[Segment]]:
    """``steps[-1].extra.completion`` → (``steps``, segments); PathError on anything else."""
    m = _ROOT.match(text)
    if not m:
        raise PathError(f"{text!r}: a path starts with a name (e.g. 'steps', 'spans', 'trajectory')")
    root, pos, segments = m.group(0), m.end(), []
    while pos < len(text):
        m = _SEGMENT.match(text, pos)
        if not m:
            raise PathError(f"{text!r}: cannot read the path at {text[pos:]!r}")
        if m.group("key") is not None:
            segments.append(Segment("key", key=m.group("key")))
        elif m.group("index") is not None:
            segments.append(Segment("index", index=int(m.group("index"))))
        elif m.group("star") is not None:
            segments.append(Segment("star"))
        else:
            value = m.group("fval").strip()
            if len(value) >= 2 and value[0] == value[-1] == '"':
                value = value[1:-1]
            segments.append(Segment("filter", key=m.group("fkey"), op=m.group("fop"), value=value))
        pos = m.end()
    return root, segments


def as_text(value: Any) -> str:
    """How a value compares in a filter: strings as they are, everything else as JSON (true, 3, null)."""
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True)


def _dig(node: Any, dotted: str) -> tuple[bool, Any]:
    for part in dotted.split("."):
        if isinstance(node, dict) and part in node:
            node = node[part]
        else:
            return False, None
    return True, node


def _filter_match(item: Any, seg: Segment) -> bool:
    found, value = _dig(item, seg.key)
    if not found:
        return seg.op == "!="
    text = as_text(value)
    return {"=": text == seg.value, "!=": text != seg.value, "^=": text.startswith(seg.value),
            "*=": seg.value in text}[seg.op]


def select(doc: dict[str, Any], path: str) -> list[Any]:
    """Every value ``path`` names in ``doc`` (a missing key or index just selects nothing)."""
    root, segments = parse_path(path)
    values = [doc[root]] if root in doc else []
    for seg in segments:
        out: list[Any] = []
        for v in values:
            if seg.kind == "key":
                if isinstance(v, dict) and seg.key in v:
                    out.append(v[seg.key])
            elif seg.kind == "index":
                if isinstance(v, list) and -len(v) <= seg.index < len(v):
                    out.append(v[seg.index])
            elif seg.kind == "star":
                if isinstance(v, list):
                    out.extend(v)
                elif isinstance(v, dict):
                    out.extend(v.values())
            elif isinstance(v, list):
                out.append([item for item in v if _filter_match(item, seg)])
        values = out
    return values


# ---------------------------------------------------------------------------------------------- predicates
ValueOp = Literal["eq", "ne", "gt", "gte", "lt", "lte", "contains", "not_contains", "matches", "in",
                  "len_eq", "len_gte", "len_lte"]
SelectionOp = Literal["exists", "absent", "count_eq", "count_gte", "count_lte"]
SELECTION_OPS = {"exists", "absent", "count_eq", "count_gte", "count_lte"}


def _number(x: Any) -> float:
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        raise TypeError(f"{x!r} is not a number")
    return float(x)


def _contains(container: Any, item: Any) -> bool:
    if isinstance(container, str):
        return isinstance(item, str) and item in container
    if isinstance(container, (list, dict)):
        return item in container
    return False


def apply_value_op(op: str, observed: Any, expected: Any) -> bool:
    """One operator on one observed value; a type mismatch is simply False."""
    try:
        if op == "eq":
            return observed == expected and isinstance(observed, bool) == isinstance(expected, bool)
        if op == "ne":
            return not apply_value_op("eq", observed, expected)
        if op in ("gt", "gte", "lt", "lte"):
            a, b = _number(observed), _number(expected)
            return {"gt": a > b, "gte": a >= b, "lt": a < b, "lte": a <= b}[op]
        if op == "contains":
            return _contains(observed, expected)
        if op == "not_contains":
            return not _contains(observed, expected)
        if op == "matches":
            return isinstance(observed, str) and re.search(str(expected), observed) is not None
        if op == "in":
            return isinstance(expected, list) and observed in expected
        if op in ("len_eq", "len_gte", "len_lte"):
            n, k = len(observed), int(expected)
            return {"len_eq": n == k, "len_gte": n >= k, "len_lte": n <= k}[op]
    except (TypeError, ValueError):
        return False
    raise ValueError(f"unknown operator {op!r}")


def _short(value: Any, limit: int = 160) -> str:
    text = as_text(value)
    return text if len(text) <= limit else text[:limit] + f"… ({len(text)} chars)"


class Expectation(BaseModel):
    """One predicate over a run's document."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(default="", description="stable id within the case (default: e<index>)")
    path: str
    op: ValueOp | SelectionOp
    value: Any = None
    quant: Literal["all", "any", "none"] = "all"
    configs: list[Config] = Field(default_factory=lambda: list(CONFIGS),
                                  description="the configurations this expectation is checked in")
    tag: Literal["incumbent"] | None = Field(
        default=None, description="incumbent: checked on the incumbent first, the observed values are then "
        "frozen and every later check (other configurations, later rounds) compares against them")
    note: str = ""

    @field_validator("path")
    @classmethod
    def _path(cls, value: str) -> str:
        try:
            parse_path(value)
        except PathError as exc:
            raise ValueError(str(exc)) from None
        return value

    @model_validator(mode="after")
    def _value_needed(self) -> Expectation:
        if self.op not in ("exists", "absent") and self.value is None and self.tag is None:
            raise ValueError(f"op {self.op!r} needs a value")
        if self.op == "matches":
            try:
                re.compile(str(self.value))
            except re.error as exc:
                raise ValueError(f"value {self.value!r} is not a valid regex: {exc}") from None
        if not self.configs:
            raise ValueError("configs is empty")
        if self.tag == "incumbent" and "incumbent" not in self.configs:
            raise ValueError("an expectation tagged incumbent is observed on the incumbent: configs must list it")
        return self

    def check(self, doc: dict[str, Any]) -> tuple[bool, list[Any], str]:
        """(passed, selected values, message) for this predicate on ``doc``."""
        selected = select(doc, self.path)
        n = len(selected)
        if self.op in SELECTION_OPS:
            ok = {"exists": n > 0, "absent": n == 0,
                  "count_eq": n == _as_int(self.value), "count_gte": n >= _as_int(self.value),
                  "count_lte": n <= _as_int(self.value)}[self.op]
            return ok, selected, f"{self.path}: {n} value(s) selected, wanted {self.op} {self.value or ''}".strip()
        results = [apply_value_op(self.op, v, self.value) for v in selected]
        if self.quant == "none":
            ok = not any(results)
        elif not selected:
            ok = False
        else:
            ok = all(results) if self.quant == "all" else any(results)
        shown = ", ".join(_short(v) for v in selected[:3]) + (" …" if n > 3 else "") if selected else "nothing"
        return ok, selected, f"{self.path} {self.quant} {self.op} {_short(self.value)}: observed {shown}"

    def check_frozen(self, doc: dict[str, Any], frozen: list[Any]) -> tuple[bool, list[Any], str]:
        """Whether ``doc`` selects exactly the frozen incumbent values."""
        selected = select(doc, self.path)
        ok = json.dumps(selected, sort_keys=True) == json.dumps(frozen, sort_keys=True)
        return ok, selected, (f"{self.path}: observed {_short(selected)}, the incumbent's frozen value is "
                              f"{_short(frozen)}")


def _as_int(value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return -1


# ---------------------------------------------------------------------------------------------- scenarios
class ScriptCommand(BaseModel):
    model_config = ConfigDict(extra="forbid")

    keystrokes: str
    duration: float = Field(default=0.3, ge=0)


class Reply(BaseModel):
    """One scripted model reply: raw ``text``, or the parts of a reply in the harness's JSON format. The first
    rule whose conditions hold and whose ``times`` are not used up answers a request."""

    model_config = ConfigDict(extra="forbid")

    contains: list[str] | str = Field(default_factory=list, description="the last user message contains all")
    not_contains: list[str] | str = Field(default_factory=list, description="...and none of these")
    times: int | None = Field(default=None, ge=1, description="how often this rule may answer (None: always)")
    text: str | None = None
    analysis: str = "Scripted analysis."
    plan: str = "Scripted plan."
    commands: list[ScriptCommand] = Field(default_factory=list)
    task_complete: bool = False

    @field_validator("contains", "not_contains")
    @classmethod
    def _listify(cls, value: list[str] | str) -> list[str]:
        return [value] if isinstance(value, str) else value

    def render(self, fmt: str = "json") -> str:
        """The reply text in the harness's response format (``json`` or ``xml``); ``text`` as it is."""
        if self.text is not None:
            return self.text
        if fmt == "xml":
            keys = "".join(f'<keystrokes duration="{c.duration:g}">{c.keystrokes}</keystrokes>\n'
                           for c in self.commands)
            return (f"<response>\n<analysis>{self.analysis}</analysis>\n<plan>{self.plan}</plan>\n"
                    f"<commands>\n{keys}</commands>\n<task_complete>{str(self.task_complete).lower()}"
                    "</task_complete>\n</response>")
        return json.dumps({"analysis": self.analysis, "plan": self.plan,
                           "commands": [c.model_dump() for c in self.commands],
                           "task_complete": self.task_complete})

    def matches(self, last_user: str) -> bool:
        return all(s in last_user for s in self.contains) and not any(s in last_user for s in self.not_contains)


class TaskSpec(BaseModel):
    """A small task written out as a Harbor task folder for one scenario run (local sandbox)."""

    model_config = ConfigDict(extra="forbid")

    instruction: str
    files: dict[str, str] = Field(default_factory=dict, description="path under /app → content, copied in")
    setup: list[str] = Field(default_factory=list, description="shell lines run at build time (RUN)")
    check: str | None = Field(default=None, description="shell condition: reward 1 iff it succeeds")
    test: str | None = Field(default=None, description="a whole tests/test.sh instead of check")
    agent_timeout_sec: float = Field(default=60.0, gt=0)
    allow_internet: bool = False

    @model_validator(mode="after")
    def _one_check(self) -> TaskSpec:
        if (self.check is None) == (self.test is None):
            raise ValueError("give exactly one of check (a shell condition) or test (a test.sh)")
        for rel in self.files:
            if rel.startswith("/") or ".." in Path(rel).parts:
                raise ValueError(f"files: {rel!r} must be a relative path inside /app")
        return self


class Case(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    kind: Literal["positive", "negative", "recovery"]
    description: str = ""
    task: str = Field(description="a key of the contract's [tasks]")
    settings: dict[str, Any] = Field(default_factory=dict, description="overrides in every configuration")
    replies: list[Reply] = Field(min_length=1)
    fallback: Reply | None = Field(default=None, description="when no rule answers (default: claim completion)")
    max_requests: int = Field(default=40, ge=1, description="after this many model requests: always fallback")
    max_episodes: int = Field(default=12, ge=1, description="terminus.max_episodes for the run")
    expect: list[Expectation] = Field(min_length=1)
    allow_crash: bool = Field(default=False, description="a crashed run may still pass (never for negative)")

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not _IDENT.match(value):
            raise ValueError(f"{value!r}: names are lower-case letters, digits, '.', '_' or '-'")
        return value

    @model_validator(mode="after")
    def _ids(self) -> Case:
        if self.kind == "negative" and self.allow_crash:
            raise ValueError("a negative case can never pass on a crash (allow_crash must be false)")
        seen: set[str] = set()
        for i, e in enumerate(self.expect):
            if not e.id:
                e.id = f"e{i}"
            if e.id in seen:
                raise ValueError(f"expect[{i}]: id {e.id!r} is used twice")
            seen.add(e.id)
        return self


class Switch(BaseModel):
    """The setting that switches the mechanism: a dotted key of settings.toml and its two values."""

    model_config = ConfigDict(extra="forbid")

    key: str
    on: Any = True
    off: Any = False

    @field_validator("key")
    @classmethod
    def _key(cls, value: str) -> str:
        if not re.match(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)+$", value):
            raise ValueError(f"{value!r} is not a dotted settings key (section.name)")
        return value


class Contract(BaseModel):
    """One mechanism's behavioural contract."""

    model_config = ConfigDict(extra="forbid")

    version: Literal[1] = CONTRACT_VERSION
    mechanism: str
    name: str
    summary: str = ""
    triggers: list[str] = Field(min_length=1, description="when the mechanism acts")
    effects: list[str] = Field(min_length=1, description="what can be observed when it acts")
    hooks: list[str] = Field(default_factory=list, description="module:qualname functions it lives in")
    state: list[str] = Field(default_factory=list, description="state it reads and writes")
    setting: Switch
    depends_on: list[str] = Field(default_factory=list, description="mechanisms switched on with it")
    conflicts_with: list[str] = Field(default_factory=list, description="mechanisms switched off with it")
    spans: list[str] = Field(default_factory=list, description="recording.toml boundaries evidencing it")
    tasks: dict[str, TaskSpec] = Field(min_length=1)
    cases: list[Case] = Field(min_length=2)

    @field_validator("mechanism")
    @classmethod
    def _mechanism(cls, value: str) -> str:
        return Case._name(value)

    @field_validator("hooks", "spans")
    @classmethod
    def _refs(cls, values: list[str]) -> list[str]:
        for v in values:
            if not _FUNC.match(v):
                raise ValueError(f"{v!r} is not module:qualname")
        return values

    @model_validator(mode="after")
    def _cases(self) -> Contract:
        kinds = {c.kind for c in self.cases}
        for needed in ("positive", "negative"):
            if needed not in kinds:
                raise ValueError(f"cases: at least one {needed} case is required")
        names = [c.name for c in self.cases]
        if len(set(names)) != len(names):
            raise ValueError("cases: a case name is used twice")
        for c in self.cases:
            if c.task not in self.tasks:
                raise ValueError(f"case {c.name!r}: task {c.task!r} is not in [tasks] ({', '.join(self.tasks)})")
        if self.mechanism in self.depends_on or self.mechanism in self.conflicts_with:
            raise ValueError("a mechanism cannot depend on or conflict with itself")
        if set(self.depends_on) & set(self.conflicts_with):
            raise ValueError("depends_on and conflicts_with overlap")
        return self

    def case(self, name: str) -> Case:
        for c in self.cases:
            if c.name == name:
                return c
        raise KeyError(f"contract {self.mechanism!r} has no case {name!r}")


def parse_contract(data: dict[str, Any], path: str | Path = "<contract>") -> Contract:
    try:
        contract = Contract.model_validate(data)
    except ValidationError as exc:
        field, message = first_problem(exc, data, label_keys=("name",))
        raise ContractError(path, field, message) from None
    stem = Path(path).stem
    if str(path) != "<contract>" and contract.mechanism != stem:
        raise ContractError(path, "mechanism", f"{contract.mechanism!r} must match the file name {stem!r}")
    return contract


def load_contract(path: str | Path) -> Contract:
    """Read and validate one contract file; ContractError names the file and the field."""
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text())
    except OSError as exc:
        raise ContractError(path, None, f"cannot read: {exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ContractError(path, None, f"not valid TOML: {exc}") from None
    return parse_contract(data, path)


def contract_files(harness_dir: str | Path) -> list[Path]:
    return sorted((Path(harness_dir) / CONTRACTS_DIR).glob("*.toml"))
