"""``httpbus sub replay`` and ``sub replay-status``: a window of the topic replayed into one
subscription, from the archive and from storage (docs/archive.md, "Replay into one
subscription"). Registered on ``httpbus sub`` by :mod:`cli.sub`."""

from __future__ import annotations

import asyncio
from typing import Annotated, Any

import typer
from rich.progress import TextColumn

from cli.dlq import time_option
from cli.kit import EXIT_FAILED, Call, Output, Project, fail, get, progress
from cli.kit import Subscription as Name
from control_plane.client import AdminClient, path

POLL_S = 0.5


def _where(project: str, name: str) -> str:
    return path("v1", "projects", project, "subscriptions", name, "replay")


def replay(
    project: Project,
    name: Name,
    since: Annotated[str, typer.Option(help="Accepted at or after this RFC 3339 time.")],
    until: Annotated[
        str, typer.Option(help="Accepted before this RFC 3339 time (or 'now').")
    ] = "now",
    rate: Annotated[
        int, typer.Option(min=1, max=10_000, help="Messages a second handed to it.")
    ] = 100,
    wait: Annotated[
        bool,
        typer.Option(help="Follow it with a progress bar until it is done (--no-wait: start it)."),
    ] = True,
    output: Output = "text",
) -> Call:
    """Replay the topic's messages accepted between two times — the archived hours and what
    storage still holds — into this subscription only, in group order, through its filter,
    signing, retries and DLQ, marked X-Replay: true. Other subscriptions see nothing; each
    message's trace shows a `replayed` event."""
    body = {
        "since": time_option(since, "--since"),
        "until": time_option(until, "--until"),
        "rate": rate,
    }
    where = _where(project, name)

    async def work(api: AdminClient) -> dict[str, Any]:
        found: dict[str, Any] = await api.post(where, body)
        if not wait:
            return found
        with progress("replaying", output, TextColumn("{task.fields[state]}")) as bar:
            task = bar.add_task("replaying", total=None, state="pending")
            while found["state"] in ("pending", "running"):
                await asyncio.sleep(POLL_S)
                found = await api.get(where)
                bar.update(
                    task, completed=found["written"], total=found["total"], state=found["state"]
                )
        return found

    def then(found: dict[str, Any]) -> None:
        if found["state"] == "failed":
            raise fail(f"replay {found['id']} failed: {found['error']}", EXIT_FAILED)

    return Call(work, text=shown, then=then)


def replay_status(project: Project, name: Name) -> Call:
    """The subscription's latest window replay: state, written of total, the window."""
    return get(_where(project, name), text=shown)


def shown(found: dict[str, Any]) -> str:
    total = found["total"] if found["total"] is not None else "?"
    line = (
        f"replay {found['id']} of {found['subscription']} [{found['since']}, {found['until']}) "
        f"at {found['rate']}/s: {found['state']}, {found['written']} of {total} written "
        f"({found['from_archive']} from the archive, {found['from_storage']} from storage)"
    )
    if found.get("error"):
        line += f"\n  error: {found['error']}"
    return line
