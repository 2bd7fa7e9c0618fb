"""``httpbus dlq``: browse a subscription's dead-letter queue, replay (unsideline) or purge it.

Unsideline and purge work in batches: the API answers how many were handled and how many
still match (``remaining``); the command loops until none remain, with a progress bar.
"""

from __future__ import annotations

import base64
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

from cli.common import (
    DEFAULT_URL,
    EXIT_USAGE,
    Limit,
    Output,
    Project,
    Token,
    Url,
    Yes,
    confirm,
    emit_json,
    fail,
    run,
    table,
)
from control_plane.client import AdminClient, path

app = typer.Typer(help="Dead-letter queue: list, unsideline, purge.", no_args_is_help=True)

Name = Annotated[str, typer.Argument(help="Subscription name.")]
Ids = Annotated[list[str] | None, typer.Option("--id", help="Message id (repeatable).")]
Groups = Annotated[list[str] | None, typer.Option("--group", help="Group id (repeatable).")]
Before = Annotated[
    str | None,
    typer.Option("--before", help="Everything failed before this RFC 3339 time (or 'now')."),
]
Batch = Annotated[int, typer.Option(min=1, max=10_000, help="Messages per request.")]


def _messages(project: str, sub: str, *rest: str) -> str:
    return path("v1", "projects", project, "subscriptions", sub, "dlq", "messages", *rest)


def _time(value: str | None, option: str) -> str | None:
    """An RFC 3339 time as given, or ``now`` as the current UTC time."""
    if value is None:
        return None
    if value == "now":
        return datetime.now(UTC).isoformat().replace("+00:00", "Z")
    try:
        datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise fail(f"{option} {value!r} is not an RFC 3339 time (or 'now')", EXIT_USAGE) from None
    return value


def preview(message: dict[str, Any], size: int = 60) -> str:
    """The first bytes of a payload as text (undecodable bytes shown as �)."""
    raw = base64.b64decode(message.get("payload_base64") or "")
    text = raw[:size].decode("utf-8", errors="replace").replace("\n", " ")
    return text + ("…" if len(raw) > size else "")


@app.command("list")
def list_(
    project: Project,
    name: Name,
    order: Annotated[Literal["newest", "oldest"], typer.Option(help="Order.")] = "newest",
    limit: Limit = 50,
    cursor: Annotated[str | None, typer.Option(help="next_cursor of the previous page.")] = None,
    group: Annotated[str | None, typer.Option(help="Only this group.")] = None,
    status: Annotated[int | None, typer.Option(help="Only this last HTTP status.")] = None,
    url: Url = DEFAULT_URL,
    token: Token = "",
    output: Output = "text",
) -> None:
    """List dead-lettered messages with why they failed."""
    params = {"order": order, "limit": limit, "cursor": cursor, "group": group, "status": status}

    async def work(api: AdminClient) -> Any:
        return await api.get(_messages(project, name), params)

    page = run(url, token, work)
    if output == "json":
        emit_json(page)
        return
    rows = [
        (
            m["message_id"],
            m.get("group_id") or "",
            m.get("last_status") or "",
            m.get("attempts"),
            m.get("last_failed_at"),
            (m.get("last_error") or "")[:60],
            preview(m),
        )
        for m in page["messages"]
    ]
    cols = ("message", "group", "status", "attempts", "last failed", "error", "payload")
    table(f"DLQ of {project}/{name}", cols, rows)
    if page.get("next_cursor"):
        typer.echo(f"more: --cursor {page['next_cursor']}")


def _selector(
    ids: list[str], groups: list[str], before: str | None, everything: bool
) -> tuple[str, str | None]:
    """Which selector was chosen (exactly one), and the ``--before`` time resolved."""
    chosen = [bool(ids), bool(groups), before is not None, everything]
    if sum(chosen) != 1:
        raise fail("choose exactly one of --id, --group, --before (or --all to purge)", EXIT_USAGE)
    return ("ids", "groups", "before", "all")[chosen.index(True)], _time(before, "--before")


Step = Callable[[AdminClient], Awaitable[tuple[int, int]]]


def _loop(url: str, token: str, verb: str, step: Step, output: str) -> int:
    """Call ``step`` until nothing remains; a bar shows the progress. Returns the count."""
    err = Console(stderr=True)

    async def work(api: AdminClient) -> int:
        total = 0
        with Progress(
            TextColumn(verb),
            BarColumn(),
            MofNCompleteColumn(),
            console=err,
            disable=output == "json" or not err.is_terminal,
        ) as progress:
            task = progress.add_task(verb, total=None)
            while True:
                done, remaining = await step(api)
                total += done
                progress.update(task, completed=total, total=total + remaining)
                if remaining <= 0 or done <= 0:  # done 0: nothing movable left (avoid a spin)
                    return total

    return run(url, token, work)


@app.command()
def unsideline(
    project: Project,
    name: Name,
    ids: Ids = None,
    groups: Groups = None,
    before: Before = None,
    batch: Batch = 1000,
    url: Url = DEFAULT_URL,
    token: Token = "",
    output: Output = "text",
) -> None:
    """Replay dead-lettered messages: by ids, by groups, or all that failed before a time."""
    kind, before = _selector(ids or [], groups or [], before, False)
    body: dict[str, Any]
    if kind == "ids":
        body = {"message_ids": ids}
    elif kind == "groups":
        body = {"group_ids": groups}
    else:
        body = {"failed_before": before}
    body["limit"] = batch

    async def step(api: AdminClient) -> tuple[int, int]:
        result = await api.post(_messages(project, name, "unsideline"), body)
        return int(result["unsidelined"]), int(result["remaining"])

    count = _loop(url, token, "unsidelining", step, output)
    emit_json({"unsidelined": count}) if output == "json" else typer.echo(f"unsidelined {count}")


@app.command()
def purge(
    project: Project,
    name: Name,
    ids: Ids = None,
    groups: Groups = None,
    before: Before = None,
    everything: Annotated[bool, typer.Option("--all", help="Purge the whole DLQ.")] = False,
    yes: Yes = False,
    batch: Batch = 1000,
    url: Url = DEFAULT_URL,
    token: Token = "",
    output: Output = "text",
) -> None:
    """Delete dead-lettered messages for good (asks first unless --yes)."""
    kind, before = _selector(ids or [], groups or [], before, everything)
    params: list[tuple[str, Any]]
    if kind == "ids":
        params, what = [("message_id", i) for i in ids or []], f"{len(ids or [])} message(s)"
    elif kind == "groups":
        params, what = [("group_id", g) for g in groups or []], f"the groups {groups}"
    elif kind == "before":
        params, what = [("failed_before", before)], f"everything failed before {before}"
    else:
        params, what = [("all", "true")], "the whole DLQ"
    params.append(("limit", batch))
    confirm(f"purge {what} of {project}/{name} for good?", yes)

    async def step(api: AdminClient) -> tuple[int, int]:
        result = await api.delete(_messages(project, name), params)
        return int(result["purged"]), int(result["remaining"])

    count = _loop(url, token, "purging", step, output)
    emit_json({"purged": count}) if output == "json" else typer.echo(f"purged {count}")
