"""Run inside a Python 3.12 virtual environment that has Harbor installed (see tests/test_harbor_diff.py).

Reads ``[{"id", "format", "text", "truncated"}]`` as JSON on stdin and writes, for each case, what Harbor's
own Terminus-2 parsers decide: ``{"id", "error", "warnings", "complete", "commands", "salvage"}``, where
``warnings`` is the list of the parser's warning lines and ``salvage`` (truncated XML only) is
``[salvaged text or null, several blocks?]``.
"""

import json
import sys

from harbor.agents.terminus_2.terminus_json_plain_parser import TerminusJSONPlainParser
from harbor.agents.terminus_2.terminus_xml_plain_parser import TerminusXMLPlainParser


def lines(warning: str) -> list[str]:
    """The parser joins its warnings as "- a\\n- b"; split them back."""
    if not warning:
        return []
    return [w.removeprefix("- ") for w in ("\n" + warning).split("\n- ") if w.strip()]


def main() -> None:
    parsers = {"json": TerminusJSONPlainParser(), "xml": TerminusXMLPlainParser()}
    out = []
    for case in json.load(sys.stdin):
        parser = parsers[case["format"]]
        result = parser.parse_response(case["text"])
        row = {"id": case["id"], "error": result.error or None, "warnings": lines(result.warning),
               "complete": bool(result.is_task_complete),
               "commands": [[c.keystrokes, float(c.duration)] for c in result.commands], "salvage": None}
        if case["truncated"] and hasattr(parser, "salvage_truncated_response"):
            text, multiple = parser.salvage_truncated_response(case["text"])
            row["salvage"] = [text, bool(multiple)]
        out.append(row)
    json.dump(out, sys.stdout, indent=1)


if __name__ == "__main__":
    main()
