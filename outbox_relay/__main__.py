"""``python -m outbox_relay --config FILE`` (or ``httpbus outbox run --config FILE``)."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from .service import serve
from .settings import RelaySettings


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m outbox_relay", description="The httpbus outbox relay (docs/outbox.md)."
    )
    parser.add_argument(
        "--config",
        type=Path,
        default=os.environ.get("HTTPBUS_CONFIG"),
        help="YAML or TOML settings file (default: $HTTPBUS_CONFIG)",
    )
    serve(RelaySettings.load(parser.parse_args(argv).config))


if __name__ == "__main__":
    main()
