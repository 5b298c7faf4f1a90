"""Evidence and analysis: from a version's reference corpus to ranked groups of findings.

- ``trial_view``, ``detectors``, ``digest``: deterministic detectors over a trial's dual trace and its cached
  digest (``rise trace digest TRIAL_DIR``);
- ``pairs``: flipping tasks and their success/failure pairs, all-failure and at-risk tasks;
- ``inputs``, ``roles`` (+ ``*.md.j2``): what the analyst, grouper and reviewer are given, on the role runtime
  of :mod:`evolve.roles.runtime` (and the ``digest`` tool);
- ``evidence``: every reference of a finding checked against the traces;
- ``ranking``: review verdicts, ranking, exclusion of groups tried and rejected before;
- ``pipeline``: the keyed, resumable run (``rise analyze``); ``records``: JSON, Markdown summary, printout;
- ``models``: the data formats.
"""
