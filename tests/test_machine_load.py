"""The machine's load over a trial (trials/load.py), read from the real kernel through psutil."""

from __future__ import annotations

import time
from collections import namedtuple

import pytest

from trials.load import LoadProbe, MachineLoad, cpu_shares


def test_probe_reads_the_real_machine():
    probe = LoadProbe.start()
    end = time.monotonic() + 0.5
    while time.monotonic() < end:  # keep one CPU busy, so the interval has ticks to share out
        pass
    load = probe.finish()
    assert load.cpus and load.cpus >= 1
    assert load.loadavg_start is not None and len(load.loadavg_start) == 3 and len(load.loadavg_end) == 3
    assert load.busy is not None and 0 < load.busy <= 1
    assert load.steal is not None and 0 <= load.steal < 1  # Linux counts steal in /proc/stat
    assert load.load_per_cpu == pytest.approx(load.loadavg_end[0] / load.cpus)


def test_shares_of_a_known_interval():
    Linux = namedtuple("Linux", "user nice system idle iowait irq softirq steal guest guest_nice")
    before = Linux(100, 0, 50, 800, 10, 0, 0, 40, 5, 0)
    after = Linux(160, 0, 70, 880, 10, 0, 0, 80, 9, 0)  # 60 + 20 busy, 80 idle, 40 stolen of 200 (guest inside user)
    assert cpu_shares(before, after) == (0.2, 0.6)
    Mac = namedtuple("Mac", "user nice system idle")  # no steal counted: None, never 0
    assert cpu_shares(Mac(1, 0, 1, 8), Mac(3, 0, 1, 10)) == (None, 0.5)
    assert cpu_shares(before, before) == (None, None) and cpu_shares(None, after) == (None, None)


def test_an_old_result_has_no_load():
    assert MachineLoad().load_per_cpu is None
