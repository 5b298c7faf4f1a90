"""Run the implementer role once on a proposal against an experiment's incumbent, then the checks a round would
run on what it left: how well a model (the experiment's ``[agents]`` backend for the implementer) builds a
mechanism, without a whole ``rise evolve`` round around it.

    python scripts/implement_once.py NAME PROPOSAL.json [--slug SLUG] [--round N] [--runs-dir runs]

The candidate goes on ``cand/rNN-SLUG`` (round 90 by default, out of the way of real rounds; an existing branch of
that name is reset to the incumbent first), committed as ``rise evolve`` commits it; nothing is booked in the
ledger. Prints the implementer's answer, its tool calls (refusals among them), the smoke check and the contracts.
Exit status: 0 when both checks passed, 1 otherwise (or when it changed nothing), 2 when the role call itself
failed."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from pathlib import Path

from evolve.experiment.store import open_experiment
from evolve.options import default_backends
from evolve.roles.implement.implementer import IMPLEMENTER, diff_of, implement
from evolve.roles.proposals.models import ProposalSpec
from evolve.roles.runtime import RoleError, read_transcript
from evolve.round.controller import Controller
from validate.contracts import run_contracts
from validate.smoke import smoke_check


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("name", help="experiment name or path")
    ap.add_argument("proposal", type=Path, help="a ProposalSpec as JSON (what the proposer would have answered)")
    ap.add_argument("--slug", default=None, help="default: the proposal's mechanism")
    ap.add_argument("--round", type=int, default=90)
    ap.add_argument("--runs-dir", type=Path, default=Path("runs"))
    args = ap.parse_args(argv)

    exp = open_experiment(args.name, args.runs_dir)
    spec = ProposalSpec.model_validate(json.loads(args.proposal.read_text()))
    slug = args.slug or spec.mechanism
    incumbent = exp.incumbent()
    incumbent_dir = Controller(exp).version_dir(incumbent)
    role = exp.config.agents.role_limits(IMPLEMENTER)
    out = exp.root / "implement_once" / f"r{args.round:02d}" / slug
    started = time.monotonic()
    print(f"implementer on {slug!r} from {incumbent} ({role.limits.max_turns} turns, "
          f"{role.limits.deadline_s:g} s at most)", flush=True)
    try:
        branch, commit, res = implement(exp, args.round, spec, default_backends(exp)("implementer", slug),
                                        slug=slug, incumbent_dir=incumbent_dir, role=role,
                                        transcripts=out / "transcripts")
    except RoleError as exc:
        print(f"the role call failed after {time.monotonic() - started:.0f} s: {exc}")
        return 2
    tools, problems, withdrawn = Counter(), [], []
    for line in read_transcript(res.transcript):
        if line.get("kind") == "repeat_breaker":
            withdrawn.append(f"{line.get('tool')} failed {line.get('failures')} times with the same arguments")
        if line.get("kind") == "tool_result":
            tools[line.get("tool", "?")] += 1
            if line.get("status") != "ok":
                problems.append(f"{line.get('tool')}: {str(line.get('result', ''))[:300]}")
    print(f"{branch} at {commit[:12]} after {res.seconds:.0f} s; transcript {res.transcript}")
    print("answer:", res.output.model_dump_json(indent=1))
    print("tool calls:", dict(tools) or "none", f"; refused or failed: {len(problems)}")
    for p in problems:
        print("  ", p.replace("\n", " "))
    for w in withdrawn:
        print(f"tools withdrawn (only the answer offered from then on): {w}")
    diff = diff_of(exp, exp.commit_of(incumbent), commit)
    print(f"diff: {len(diff.splitlines())} lines, files: "
          f"{exp.repo.git.diff('--name-only', exp.commit_of(incumbent), commit).split() or 'none'}")
    if not diff.strip():
        print("the implementer changed nothing (rise evolve books such an implementation as failed): no checks run")
        return 1
    _, wt = exp.create_candidate(args.round, slug)  # the worktree implement() used (it exists: nothing made)
    smoke = smoke_check(wt, out / "smoke")
    print(smoke.summary())
    if not smoke.passed:
        return 1
    contracts = run_contracts(wt, incumbent_dir, exp.root / "contracts_frozen.json")
    print(contracts.summary())
    return 0 if contracts.passed else 1


if __name__ == "__main__":
    sys.exit(main())
