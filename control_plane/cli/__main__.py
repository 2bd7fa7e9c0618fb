"""``python -m control_plane.cli`` is the ``httpbus`` command."""

from . import main

main()
