"""``python -m rise``: the same as the ``rise`` command."""

from rise.cli import main

main()
