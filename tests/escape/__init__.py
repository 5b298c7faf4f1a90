"""Escape suite: hostile agents, implementer calls and candidates against the sandboxes, the reward and the host's
git; each test is an escape attempt that must be blocked and recorded."""
