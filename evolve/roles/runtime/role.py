"""What a role is (template + output model + tools + limits), what one call returns, and how it fails."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from trials.harness_api import Cost

OutputMode = Literal["tool", "prompted", "native"]
ErrorKind = Literal["invalid_output", "bad_input", "timeout", "budget", "limit", "backend", "replay_miss",
                    "config"]


class Limits(BaseModel):
    """Bounds of one role call. ``max_usd`` is checked against the budget before the call and after it."""

    model_config = ConfigDict(extra="forbid")
    max_turns: int = Field(default=12, ge=1, description="model requests in one call; from the last one only the answer "
                           "is offered, with up to corrective_turns more requests to correct it")
    max_output_tokens: int = Field(default=1024, ge=1, description="max_tokens of each model request")
    deadline_s: float = Field(default=300.0, gt=0, description="wall clock for the whole call; then killed")
    max_usd: float | None = Field(default=None, ge=0, description="dollars one call may cost")
    corrective_turns: int = Field(default=2, ge=0, description="retries after an invalid answer")
    min_tool_calls: int = Field(default=0, ge=0, description="an answer before this many tool calls is sent back")
    tool_output_chars: int = Field(default=8000, ge=200, description="a longer tool result is truncated")
    run_timeout_s: float = Field(default=60.0, gt=0, description="time limit of one run(cmd)")
    max_repeated_failures: int = Field(
        default=0, ge=0, description="the same tool call (same tool, same arguments) failing this many times "
        "withdraws the tools: only the answer is offered from then on; from its second failure on it is told so; "
        "0 = never (the default: recordings of real runs hold such repeats; the implementer sets 3)")
    max_repeated_calls: int = Field(
        default=0, ge=0, description="the same read (same tool, same arguments, no write between) answered this "
        "many times withdraws the tools: only the answer is offered from then on; from its second time on the "
        "result says it is a repeat; 0 = never (the default, for the same reason; the main job's read-only roles "
        "set 3: the 1.5B analyst read one digest 8 times in a row)")


class Role(BaseModel):
    """One kind of LLM work: a jinja2 prompt, a pydantic output model, a tool set and limits."""

    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True, frozen=True)
    name: str = Field(pattern=r"^[a-z][a-z0-9_-]*$")
    description: str
    template: Path = Field(description="jinja2 template of the task prompt; renders ``inputs``")
    output: type[BaseModel] = Field(description="the validated answer")
    inputs: type[BaseModel] | None = Field(default=None, description="validates the inputs before the call "
                                           "(defaults filled in); required of a registered role")
    tools: tuple[str, ...] = Field(default=(), description="names in the tool registry")
    limits: Limits = Field(default_factory=Limits)
    output_mode: OutputMode = Field(
        default="tool", description="tool: a final_answer tool call; prompted: JSON text; native: JSON schema")


class Usage(Cost):
    """What one role call used: the platform's cost record (tokens; the call's dollars and seconds are the
    :class:`RoleResult`'s) with the requests it made, and the tool calls and refused tool calls the runtime
    counted."""

    requests: int = 0
    tool_calls: int = 0
    refusals: int = 0

    def plus(self, other: Usage) -> Usage:
        """A new record: this one and ``other`` summed, field by field."""
        return Usage(**{k: getattr(self, k) + getattr(other, k) for k in Usage.model_fields})


class RoleResult(BaseModel):
    """A validated answer and what it took. ``transcript`` is the JSONL file of the call."""

    model_config = ConfigDict(arbitrary_types_allowed=True)
    role: str
    call_id: str
    output: BaseModel
    transcript: Path
    usage: Usage
    cost: float
    seconds: float
    backend: str


class RoleError(Exception):
    """A role call that produced no valid answer; ``fields`` names what failed validation, if anything.

    ``started`` is False for a call refused before it began (bad inputs, a template that does not render, an
    unknown tool, a spent budget): no request was sent, no transcript written, nothing charged, and a caller
    books no call for it (:func:`evolve.roles.analysis.pipeline.error_info`)."""

    def __init__(self, role: str, kind: ErrorKind, message: str, *, fields: list[str] | None = None,
                 transcript: Path | None = None, usage: Usage | None = None, cost: float = 0.0,
                 started: bool = True):
        self.role, self.kind, self.fields = role, kind, list(fields or [])
        self.transcript, self.usage, self.cost = transcript, usage or Usage(), cost
        self.message, self.started = message, started
        named = f" (fields: {', '.join(self.fields)})" if self.fields else ""
        where = f" [transcript: {transcript}]" if transcript else ""
        super().__init__(f"role {role}: {kind}: {message}{named}{where}")


class RoleInputError(RoleError):
    """Inputs that do not fit the role's input model (or its template): raised before the call starts."""

    def __init__(self, role: str, message: str, *, fields: list[str] | None = None):
        super().__init__(role, "bad_input", message, fields=fields, started=False)


_ROLES: dict[str, Role] = {}


def register_role(role: Role) -> Role:
    """Make ``role`` known to ``rise role`` and :func:`get_role`; a second role of the same name is an error, and so
    is a role without an input model (every registered role's inputs are validated before its call)."""
    if role.inputs is None:
        raise ValueError(f"role {role.name!r} has no input model (Role.inputs): its inputs could not be checked")
    old = _ROLES.get(role.name)
    if old is not None and old is not role:
        raise ValueError(f"role {role.name!r} is already registered")
    _ROLES[role.name] = role
    return role


# The modules that register roles (each room of evolve/roles/); a module not built yet is skipped, one that fails to
# import is an error. Imported by name, so the runtime does not depend on the rooms that use it.
ROLE_MODULES = ("evolve.roles.explorer", "evolve.roles.analysis.roles", "evolve.roles.researcher",
                "evolve.roles.proposals", "evolve.roles.implement")


def _load_builtin_roles() -> None:
    """Import every module of :data:`ROLE_MODULES` (each registers its roles, and imports the modules of any tools
    they add). A role elsewhere is known once its module is imported."""
    import importlib

    for name in ROLE_MODULES:
        try:
            importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name != name:
                raise


def get_role(name: str) -> Role:
    """A registered role by name; the error lists the known ones."""
    _load_builtin_roles()
    try:
        return _ROLES[name]
    except KeyError:
        raise KeyError(f"unknown role {name!r}; known: {', '.join(sorted(_ROLES)) or 'none'}") from None


def list_roles() -> list[Role]:
    """All registered roles, by name."""
    _load_builtin_roles()
    return [_ROLES[k] for k in sorted(_ROLES)]


def validate_inputs(role: Role, inputs: Any) -> dict[str, Any]:
    """The inputs as a dict, validated by ``role.inputs`` when it has one: defaults filled in; a missing, unknown
    or wrong field is a :class:`RoleInputError` naming the role, each field and what was wrong with it."""
    from pydantic import ValidationError

    if isinstance(inputs, BaseModel):
        inputs = inputs.model_dump(mode="json")
    if not isinstance(inputs, dict):
        raise RoleInputError(role.name, f"inputs must be a JSON object, not {type(inputs).__name__}")
    if role.inputs is None:
        return inputs
    try:
        return role.inputs.model_validate(inputs).model_dump(mode="json")
    except ValidationError as exc:
        errors = exc.errors(include_url=False)
        problems = "; ".join(f"{_loc(e['loc'])}: {e['msg']}" + _got(e) for e in errors)
        raise RoleInputError(role.name, f"inputs do not fit {role.inputs.__name__}: {problems}",
                             fields=[_loc(e["loc"]) for e in errors]) from None


def _loc(loc: tuple[Any, ...]) -> str:
    return ".".join(map(str, loc)) or "(inputs)"


def _got(error: Any) -> str:
    """The offending value, short (none for a missing field: there is no value to show)."""
    if error["type"] == "missing":
        return ""
    text = repr(error.get("input"))
    return f" (got {text[:60] + '...' if len(text) > 60 else text})"
