"""The topic page's archive section: what the archiver wrote of a topic (docs/archive.md),
read from ``GET …/topics/{t}/archive`` and summed up for the page."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from control_plane.client import AdminClient, ApiError, path

# The newest windows the page lists; `httpbus topic archive list` lists every one.
SHOWN = 24


@dataclass(frozen=True)
class ArchiveView:
    """A topic's archive as the page shows it: the listing's totals and its newest windows."""

    to: str
    every: str
    keep_days: int | None
    archived_until: str | None
    files: int
    messages: int
    duplicates: int
    bytes: int
    first: str | None  # the oldest window's start
    latest: list[dict[str, Any]]  # newest first, at most SHOWN


def summed(listing: dict[str, Any]) -> ArchiveView:
    """The page's view of an archive listing (the API's ``ArchiveListing``)."""
    windows = listing["windows"]
    return ArchiveView(
        to=listing["to"],
        every=listing["every"],
        keep_days=listing["keep_days"],
        archived_until=listing["archived_until"],
        files=len(windows),
        messages=sum(w["messages"] for w in windows),
        duplicates=sum(w["duplicates"] for w in windows),
        bytes=sum(w["bytes"] for w in windows),
        first=windows[0]["start"] if windows else None,
        latest=list(reversed(windows[-SHOWN:])),
    )


async def archive_of(
    api: AdminClient, project: str, topic: dict[str, Any]
) -> tuple[ArchiveView | None, str | None]:
    """The topic's archive (None: it has no ``archive`` setting) and, when the listing could
    not be read (an object store down, a bucket gone), why: the rest of the page still shows."""
    if topic.get("archive") is None:
        return None, None
    try:
        listing = await api.get(path("v1", "projects", project, "topics", topic["name"], "archive"))
    except ApiError as exc:
        if exc.status == 0 or exc.status >= 500 or exc.status == 404:
            return None, exc.message
        raise
    return summed(listing), None
