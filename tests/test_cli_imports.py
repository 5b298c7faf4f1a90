"""Every ``rise`` command starts by importing rise.cli; the heavy libraries only some commands compute with
(scipy.stats: decisions and power; openai: model calls) are imported when used, not at start (issue 42: they
were 1.4 of the 2.4 s every command, test and script spent before doing anything)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
HEAVY = ("scipy", "scipy.stats", "openai")


def test_starting_rise_imports_neither_scipy_nor_openai():
    code = f"import json, sys, rise.cli; print(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))"
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == [], out.stdout


def test_the_lazy_distributions_are_scipys_own():
    from scipy.stats import binom as real_binom

    from validate._lazy_scipy import binom, hypergeom

    assert binom.sf(2, 5, 0.5) == real_binom.sf(2, 5, 0.5)
    assert abs(float(hypergeom.pmf(1, 10, 3, 4)) - 0.5) < 1e-12  # C(3,1) C(7,3) / C(10,4) = 105 / 210
