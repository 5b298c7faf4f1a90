"""Escape suite: hostile implementer calls and candidates against the sandboxes and the host's git."""
