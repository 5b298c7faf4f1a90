"""Copy real trial folders into this data folder, small and redacted (how ``trials/`` was made).

    python tests/data/analysis/redact.py JOB_DIR [--out tests/data/analysis/trials/NAME]

Keeps what analysis reads (``result.json``; ``agent/``: ``trajectory.rich.json``, or ``trajectory.json`` for a
run from before the rich file had its own name, ``spans.jsonl``, ``trial_spec.json``, ``agent_result.json``,
summarization sub-call files) and drops the sandbox, logs and verifier output. Redaction: machine paths (the
job folder, temporary folders, home) become placeholders and captured span values longer than ``--max-value``
characters are cut (the trajectory keeps every message whole).
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
from pathlib import Path

KEEP_AGENT = ("trajectory.rich.json", "trajectory.json", "spans.jsonl", "trial_spec.json", "agent_result.json")
PATHS = re.compile(r"(/tmp/[^\s\"'\\]*|/root/[^\s\"'\\]*|/home/[^\s\"'\\]*|/work/[^\s\"'\\]*)")


def _redact_text(text: str, job: Path) -> str:
    text = text.replace(str(job.resolve()), "<job>").replace(str(job), "<job>")
    return PATHS.sub(lambda m: "<path>/" + Path(m.group(1)).name, text)


def _cut_span_values(line: str, max_value: int) -> str:
    obj = json.loads(line)
    for rs in obj.get("resourceSpans", []):
        for ss in rs.get("scopeSpans", []):
            for span in ss.get("spans", []):
                for attr in span.get("attributes", []):
                    if attr.get("key") == "rise.args":
                        continue  # a JSON object in a string: cutting it would make it unreadable
                    value = attr.get("value", {})
                    if isinstance(value.get("stringValue"), str) and len(value["stringValue"]) > max_value:
                        value["stringValue"] = value["stringValue"][:max_value] + "…[cut]"
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


def copy_trial(src: Path, dst: Path, job: Path, max_value: int) -> None:
    (dst / "agent").mkdir(parents=True, exist_ok=True)
    shutil.copy2(src / "result.json", dst / "result.json")
    (dst / "result.json").write_text(_redact_text((src / "result.json").read_text(), job))
    for f in sorted((src / "agent").iterdir()):
        if f.name not in KEEP_AGENT and not f.name.startswith("summarization-"):
            continue
        if f.name == "trajectory.json" and (src / "agent" / "trajectory.rich.json").is_file():
            continue  # the strict ATIF copy of the rich record: analysis does not read it
        text = _redact_text(f.read_text(encoding="utf-8", errors="replace"), job)
        if f.name == "spans.jsonl":
            text = "".join(_cut_span_values(ln, max_value) + "\n" for ln in text.splitlines() if ln.strip())
        (dst / "agent" / f.name).write_text(text, encoding="utf-8")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("job", type=Path)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--max-value", type=int, default=1500)
    args = parser.parse_args()
    for src in sorted(p for p in args.job.iterdir() if (p / "result.json").is_file()):
        copy_trial(src, args.out / src.name, args.job, args.max_value)
        print(f"{src.name}: {sum(f.stat().st_size for f in (args.out / src.name).rglob('*') if f.is_file())} bytes")


if __name__ == "__main__":
    main()
