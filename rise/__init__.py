"""The ``rise`` command line of the whole platform: ``rise.cli:app``, one module of commands per room under
``rise/commands/``."""
