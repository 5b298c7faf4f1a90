"""Hostile candidates and agents: each test is an escape attempt that must be blocked and recorded."""
