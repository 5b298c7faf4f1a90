"""A tiny harness-shaped package for the monitor's tests (no decorators, like a real harness)."""
