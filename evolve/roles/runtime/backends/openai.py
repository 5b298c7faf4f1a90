"""The ``openai`` backend: pydantic-ai's agent loop against any OpenAI-compatible endpoint (vLLM with a tool
parser, the bundled llama.cpp server started with ``--jinja``, hosted APIs).

pydantic-ai does the tool-calling loop, the output validation and the corrective turns (its retry prompts name
the failing fields); this module only adapts a role to it and records every model message as it happens.
"""

from __future__ import annotations

import json
from typing import Any

from openai import AsyncOpenAI
from pydantic_ai import (
    Agent,
    ModelRetry,
    NativeOutput,
    PromptedOutput,
    RetryFeedbackPart,
    RetryPromptPart,
    RunContext,
    TextPart,
    Tool,
    ToolCallPart,
    ToolOutput,
    ToolReturnPart,
    UnexpectedModelBehavior,
    UsageLimitExceeded,
    UsageLimits,
    capture_run_messages,
)
from pydantic_ai.exceptions import ModelAPIError, ModelHTTPError
from pydantic_ai.messages import ModelRequest, ModelResponse
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.models.wrapper import WrapperModel
from pydantic_ai.providers.openai import OpenAIProvider

from evolve.roles.runtime.backends.base import BackendJob, BackendReply
from evolve.roles.runtime.backends.schema_tools import SchemaToolClient, resolve_tool_calls
from evolve.roles.runtime.role import RoleError, Usage
from evolve.roles.runtime.tools import ToolSpec, invoke
from evolve.roles.runtime.transcript import Transcript, clip
from trials.endpoints.spec import EndpointSpec

FINAL_TOOL = "final_answer"
RETRY_TEMPERATURE = 0.7  # a corrective turn samples at least this hot (see ResampleOnRetry)


class OpenAIBackend:
    """One endpoint; ``settings`` are request defaults (``temperature`` 0 and ``seed`` 0 unless given)."""

    name = "openai"

    def __init__(self, endpoint: EndpointSpec, *, settings: dict[str, Any] | None = None, max_retries: int = 1,
                 http_client: Any = None):
        self.endpoint = endpoint
        self.price = endpoint.price
        self.settings = {"temperature": 0.0, "seed": 0, **endpoint.sampling, **(settings or {})}
        self.max_retries = max_retries
        self.http_client = http_client
        self._tool_calls: str | None = None

    def _client(self) -> AsyncOpenAI:
        http_client = self.http_client
        if self._tool_calls is None:  # asked once per backend (auto probes the server)
            self._tool_calls = resolve_tool_calls(self.endpoint.tool_calls, self.endpoint.base_url)
        if http_client is None and self._tool_calls == "schema":
            http_client = SchemaToolClient(timeout=self.endpoint.timeout_sec)
        return AsyncOpenAI(base_url=self.endpoint.base_url, api_key=self.endpoint.api_key() or "EMPTY",
                             max_retries=self.max_retries, timeout=self.endpoint.timeout_sec,
                             **({"http_client": http_client} if http_client is not None else {}))

    def _request_settings(self, job: BackendJob) -> dict[str, Any]:
        max_tokens = job.role.limits.max_output_tokens
        if self.endpoint.max_output_tokens:
            max_tokens = min(max_tokens, self.endpoint.max_output_tokens)
        settings = {k: v for k, v in self.settings.items() if k in ("temperature", "top_p", "seed")}
        return {**settings, "max_tokens": max_tokens, **job.settings}

    def _token_cap(self, limits: Any) -> int | None:
        """A call's ``max_usd`` as a token ceiling at the dearer of the two prices (None: no $ limit or free)."""
        dearest = max(self.price.input_per_mtok, self.price.output_per_mtok)
        if limits.max_usd is None or dearest <= 0:
            return None
        return max(1, int(limits.max_usd * 1e6 / dearest))

    async def run(self, job: BackendJob) -> BackendReply:
        client = self._client()
        try:
            model = OpenAIChatModel(self.endpoint.model, provider=OpenAIProvider(openai_client=client))
            return await self._run(job, ResampleOnRetry(model, job.ctx.transcript))
        finally:
            await client.close()  # its connections belong to this event loop

    async def _run(self, job: BackendJob, model: ResampleOnRetry) -> BackendReply:
        role, limits = job.role, job.role.limits
        agent: Agent[None, Any] = Agent(
            model, output_type=_output_spec(job), instructions=job.system,
            tools=[_as_tool(spec, job) for spec in job.tools],
            retries={"tools": limits.corrective_turns, "output": limits.corrective_turns})

        @agent.output_validator
        def _enough_reading(ctx: RunContext[None], output: Any) -> Any:
            if job.ctx.usage.tool_calls < limits.min_tool_calls:
                raise ModelRetry(f"answer only after at least {limits.min_tool_calls} tool calls "
                                 f"(so far {job.ctx.usage.tool_calls}); read the files first")
            return output

        # max_turns requests, the last of them offering only the answer; an invalid answer there still gets its
        # corrective turns (the real 1.5B researcher, made to answer at its 10th request, wrote an answer the
        # validator sent back and the call died on the request limit with nothing kept)
        usage_limits = UsageLimits(request_limit=limits.max_turns + limits.corrective_turns,
                                   total_tokens_limit=self._token_cap(limits))
        transcript = job.ctx.transcript
        with capture_run_messages() as messages:
            try:
                async with agent.iter(job.prompt, model_settings=self._request_settings(job),
                                      usage_limits=usage_limits) as agent_run:
                    async for node in agent_run:  # a node is seen here before it runs
                        if _record_node(transcript, node):
                            model.corrective_turn()  # so the request it makes next samples
                    result = agent_run.result
            except UnexpectedModelBehavior as exc:
                fields = failing_fields(messages)
                raise RoleError(role.name, "invalid_output",
                                f"no valid answer after {limits.corrective_turns} corrective turn(s): {exc.message}",
                                fields=fields, usage=_usage(messages)) from None
            except UsageLimitExceeded as exc:
                raise RoleError(role.name, "limit", str(exc), fields=failing_fields(messages),
                                usage=_usage(messages)) from None
            except (ModelHTTPError, ModelAPIError) as exc:
                raise backend_error(role.name, exc, _usage(messages)) from exc
        if result is None:
            raise RoleError(role.name, "backend", "the agent run ended without a result", usage=_usage(messages))
        run_usage = result.usage
        usage = Usage(input_tokens=run_usage.input_tokens or 0, output_tokens=run_usage.output_tokens or 0,
                      requests=run_usage.requests)
        return BackendReply(output=result.output, usage=usage)


class ResampleOnRetry(WrapperModel):
    """The endpoint's model, except that a request answering a corrective turn samples: temperature at least
    ``RETRY_TEMPERATURE`` and the seed moved on by the number of corrective turns so far. At temperature 0 a
    small model sent back with the same context plus one line of feedback writes the same invalid answer again:
    the night of 2026-12-07, the 1.5B proposer gave one answer three times, word for word, and the round ended
    on it. Requests that are not corrective keep the role's own settings (recordings match on them)."""

    def __init__(self, wrapped: Any, transcript: Transcript):
        super().__init__(wrapped)
        self.transcript = transcript
        self.turns = 0  # corrective turns so far
        self.pending = False  # the next request answers one

    def corrective_turn(self) -> None:
        """The loop is about to send a corrective turn (told by the agent run's nodes: the messages this model
        gets do not always say so, e.g. the retry after a text reply arrives as a system part)."""
        self.turns += 1
        self.pending = True

    async def request(self, messages: list[Any], model_settings: Any, model_request_parameters: Any) -> Any:
        if self.pending:
            self.pending = False
            turns = self.turns
            settings = dict(model_settings or {})
            settings["temperature"] = max(float(settings.get("temperature") or 0.0), RETRY_TEMPERATURE)
            settings["seed"] = int(settings.get("seed") or 0) + turns
            self.transcript.write("resample", temperature=settings["temperature"], seed=settings["seed"],
                                  corrective_turns=turns)
            model_settings = settings
        return await super().request(messages, model_settings, model_request_parameters)


def backend_error(role: str, exc: Exception, usage: Usage) -> RoleError:
    """A RoleError for an endpoint failure; a request missing from a recording says so (replay backend)."""
    cause: BaseException | None = exc
    while cause is not None:
        if type(cause).__name__ == "CannotOverwriteExistingCassetteException":
            return RoleError(role, "replay_miss", "a request is not in the recording (did the prompt, the tools "
                             f"or the inputs change since it was recorded?): {str(cause)[:600]}", usage=usage)
        cause = cause.__cause__ or cause.__context__
    return RoleError(role, "backend", f"endpoint failed: {type(exc).__name__}: {exc}", usage=usage)


def _output_spec(job: BackendJob) -> Any:
    model, mode = job.role.output, job.role.output_mode
    if mode == "prompted":
        return PromptedOutput(model)
    if mode == "native":
        return NativeOutput(model)
    return ToolOutput(model, name=FINAL_TOOL, description="Give your final answer.")


def _as_tool(spec: ToolSpec, job: BackendJob) -> Tool[None]:
    async def call(**args: Any) -> str:
        return await invoke(spec, job.ctx, args)

    def offered(ctx: RunContext[None], tool_def: Any) -> Any:
        # the last request within max_turns offers only the answer: a model that keeps reading (a small one
        # loops on the same file) is made to answer instead of running out of turns
        # so does a call that failed max_repeated_failures times with the same arguments (tools.invoke)
        if ctx.run_step >= job.role.limits.max_turns or job.ctx.extra.get("answer_now"):
            return None
        return tool_def

    tool = Tool.from_schema(call, name=spec.name, description=spec.description, json_schema=spec.json_schema())
    tool.prepare = offered
    return tool


def _record_node(transcript: Transcript, node: Any) -> bool:
    """Write the model's reply (text, tool calls, usage) and the corrective prompts as they happen; whether the
    node is a request that carries a corrective turn."""
    if Agent.is_call_tools_node(node):
        response: ModelResponse = node.model_response
        parts: list[dict[str, Any]] = []
        for part in response.parts:
            if isinstance(part, TextPart):
                parts.append({"text": clip(part.content)})
            elif isinstance(part, ToolCallPart):
                parts.append({"tool_call": part.tool_name, "args": clip(part.args_as_json_str()),
                              "id": part.tool_call_id})
        transcript.write("model_response", parts=parts, model=response.model_name,
                         finish_reason=response.finish_reason,
                         usage={"input_tokens": response.usage.input_tokens,
                                "output_tokens": response.usage.output_tokens})
    elif Agent.is_model_request_node(node):
        corrective = False
        for part in node.request.parts:
            if _is_corrective(part):
                corrective = True
                text = part.content if isinstance(part.content, str) else json.dumps(part.content, default=str)
                transcript.write("corrective_turn", tool=getattr(part, "tool_name", None), fields=_fields_of(part),
                                 text=clip(text))
        return corrective
    return False


def _is_corrective(part: Any) -> bool:
    # pydantic-ai sends a retry as a RetryPromptPart, a RetryFeedbackPart (text output) or, for a tool, as a
    # ToolReturnPart marked with retry information
    if isinstance(part, RetryPromptPart | RetryFeedbackPart):
        return True
    return isinstance(part, ToolReturnPart) and part.retry is not None


def _fields_of(part: Any) -> list[str]:
    if isinstance(part.content, str) or not isinstance(part.content, list):
        return []
    return [".".join(str(p) for p in e.get("loc", ())) or "(root)" for e in part.content if isinstance(e, dict)]


def failing_fields(messages: list[Any]) -> list[str]:
    """The fields the last corrective turn named (empty when the model never gave a parsable answer)."""
    for message in reversed(messages):
        if isinstance(message, ModelRequest):
            for part in message.parts:
                if _is_corrective(part):
                    fields = _fields_of(part)
                    return fields or ["(answer)"]
    return []


def _usage(messages: list[Any]) -> Usage:
    usage = Usage()
    for message in messages:
        if isinstance(message, ModelResponse):
            usage.input_tokens += message.usage.input_tokens or 0
            usage.output_tokens += message.usage.output_tokens or 0
            usage.requests += 1
    return usage
