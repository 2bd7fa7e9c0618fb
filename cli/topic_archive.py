"""``httpbus topic archive list``: the windows the archiver wrote of a topic (docs/archive.md).

The archive itself is a topic setting: ``topic create|update --archive-to s3://bucket/prefix``
(``--archive-every``, ``--archive-keep-days``; ``topic update --no-archive`` stops it)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

import typer

from cli.kit import Call, Project, Topic, command, console, get, table
from control_plane.client import path

app = typer.Typer(help="A topic's archive: list.", no_args_is_help=True)


@command(app, "list")
def list_(project: Project, topic: Topic) -> Call:
    """The archived windows of a topic (oldest first): messages, bytes, the Parquet file."""
    where = path("v1", "projects", project, "topics", topic, "archive")
    return get(where, text=lambda found: print_listing(project, topic, found))


def print_listing(project: str, topic: str, found: dict[str, Any]) -> None:
    keep = found.get("keep_days")
    kept = f", kept {keep} days" if keep else ""
    console.print(f"{project}/{topic} → {found['to']} every {found['every']}{kept}")
    rows = [
        (w["start"], w["end"], w["messages"], w["duplicates"], w["bytes"], w["key"])
        for w in found.get("windows") or []
    ]
    if rows:
        cols = ("start", "end", "messages", "duplicates", "bytes", "file")
        table("archived windows", cols, rows)
    until = found.get("archived_until")
    console.print(f"archived until {until}" if until else "nothing archived yet (no closed window)")


ArchiveTo = Annotated[
    str | None,
    typer.Option(
        "--archive-to",
        help="Archive each closed hour to s3://bucket/prefix or file:///folder (docs/archive.md).",
    ),
]
ArchiveEvery = Annotated[
    str | None,
    typer.Option("--archive-every", help="The window of each archive file: 1h (default) … 24h."),
]
ArchiveKeepDays = Annotated[
    int | None,
    typer.Option(
        "--archive-keep-days", min=1, help="Delete archived windows older than this many days."
    ),
]


@dataclass(frozen=True)
class Archiving:
    """The archive options of ``topic create`` and ``topic update`` (an option group of the
    kit)."""

    archive_to: ArchiveTo = None
    archive_every: ArchiveEvery = None
    archive_keep_days: ArchiveKeepDays = None

    def body(self) -> dict[str, Any] | None:
        """The ``archive`` setting the options name (None: they name none)."""
        to, every, keep_days = self.archive_to, self.archive_every, self.archive_keep_days
        if to is None:
            if every is not None or keep_days is not None:
                raise typer.BadParameter(
                    "--archive-every and --archive-keep-days need --archive-to"
                )
            return None
        body: dict[str, Any] = {"to": to}
        if every is not None:
            body["every"] = every
        if keep_days is not None:
            body["keep_days"] = keep_days
        return body
