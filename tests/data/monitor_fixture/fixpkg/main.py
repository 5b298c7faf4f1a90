"""Entry point with the harness contract: main(["--spec", PATH]) -> int, always writes agent_result.json."""

from __future__ import annotations

import argparse
import asyncio
import traceback

from trials.harness_api import AgentOutcome, TrialSpec

from .loop import Agent


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--spec", required=True)
    args = parser.parse_args(argv)
    spec = TrialSpec.load(args.spec)
    outcome = AgentOutcome()
    try:
        outcome.episodes = asyncio.run(Agent(spec.settings.get("mode", "plain")).run())
    except Exception as exc:  # noqa: BLE001 - the contract: always write an outcome
        outcome.status, outcome.error_kind = "error", "crash"
        outcome.error = "".join(traceback.format_exception(exc))
    finally:
        outcome.write(spec.agent_dir)
    return 0
