"""The ``rise`` command line of the whole platform: ``rise.cli:main`` (``rise.cli.app`` holds every command), one
module of commands per room under ``rise/commands/``."""
