"""The version of httpbus, read from the installed ``httpbus`` distribution.

The packages sit at the repository's root (``core``, ``segments``, …), so there is no
``httpbus`` package to hold a ``__version__``: the distribution's metadata is the one source.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    VERSION = version("httpbus")
except PackageNotFoundError:  # a checkout used without ``pip install -e .``
    VERSION = "0+unknown"
