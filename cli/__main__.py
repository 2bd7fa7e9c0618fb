"""``python -m cli`` is the ``httpbus`` command."""

from cli import main

main()
