"""Roles. Every module here is imported by ``get_role``/``list_roles`` and registers its roles with
``register_role`` (a role module also imports the modules of the tools it adds, so they are registered too)."""
