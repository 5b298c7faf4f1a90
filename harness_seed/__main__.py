"""``python -m harness_seed --spec trial_spec.json`` (or ``python -m harness`` for a copy)."""

from .main import main

raise SystemExit(main())
