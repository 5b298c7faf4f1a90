"""Implementation: the implementer role (a coding agent with write_file, edit_file, run in bubblewrap and
check) builds one proposal as a commit on ``cand/rNN-slug``; :func:`repair_hook` sends the controller's contract
failures back to it (bounded by the controller's ``max_repairs``)."""

from evolve.roles.implement.implementer import (
    IMPLEMENTER,
    ImplementerAnswer,
    ImplementerInputs,
    diff_of,
    implement,
    repair_hook,
)

__all__ = ["IMPLEMENTER", "ImplementerAnswer", "ImplementerInputs", "diff_of", "implement", "repair_hook"]
