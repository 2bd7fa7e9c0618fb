"""What the machine was doing while a test measured something: the figures a fault or load
test prints are read beside it."""

from __future__ import annotations

import os


def load_average() -> str:
    """The 1-, 5- and 15-minute load averages, as a test's report prints them."""
    return " ".join(f"{x:.2f}" for x in os.getloadavg())
