"""Run a module as ``python -m`` would, for launchers that take a file: spark-submit.

``spark-submit [options] /opt/httpbus/run_module.py spark [args]`` is
``python -m spark [args]`` with the driver started by spark-submit, so its
``--master``, ``--packages`` and ``--conf`` apply. A package module cannot be the file itself:
run as a script, its relative imports fail. The Dockerfile ships this file in the image.
"""

from __future__ import annotations

import runpy
import sys


def main() -> None:
    """Run ``sys.argv[1]`` as ``__main__`` with the remaining arguments."""
    if len(sys.argv) < 2:
        sys.exit("usage: run_module.py MODULE [ARGS...]")
    module = sys.argv[1]
    sys.argv = [module, *sys.argv[2:]]  # alter_sys puts the module's file in argv[0]
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
