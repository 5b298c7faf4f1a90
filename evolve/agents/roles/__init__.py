"""Roles that ship with the runtime. Other issues add theirs in their own modules with ``register_role``."""
