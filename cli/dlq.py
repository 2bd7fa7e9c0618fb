"""``httpbus dlq``: browse a subscription's dead-letter queue, replay (unsideline) or purge it.

Unsideline and purge work in batches: the API answers how many were handled and how many
still match (``remaining``); the command loops until none remain, with a progress bar.
"""

from __future__ import annotations

import base64
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

import typer

from cli.kit import (
    EXIT_USAGE,
    Call,
    Columns,
    Limit,
    Output,
    Project,
    Yes,
    command,
    fail,
    get,
    progress,
    rfc3339,
)
from cli.kit import Subscription as Name
from control_plane.client import AdminClient, path

app = typer.Typer(help="Dead-letter queue: list, unsideline, purge.", no_args_is_help=True)

Batch = Annotated[int, typer.Option(min=1, max=10_000, help="Messages per request.")]


def _messages(project: str, sub: str, *rest: str) -> str:
    return path("v1", "projects", project, "subscriptions", sub, "dlq", "messages", *rest)


def time_option(value: str | None, option: str) -> str | None:
    """An RFC 3339 time as given, or ``now`` as the current UTC time."""
    if value is None:
        return None
    if value == "now":
        return datetime.now(UTC).isoformat().replace("+00:00", "Z")
    return rfc3339(value, option, " (or 'now')")


def preview(message: dict[str, Any], size: int = 60) -> str:
    """The first bytes of a payload as text (undecodable bytes shown as �)."""
    raw = base64.b64decode(message.get("payload_base64") or "")
    text = raw[:size].decode("utf-8", errors="replace").replace("\n", " ")
    return text + ("…" if len(raw) > size else "")


MESSAGES = Columns(
    None,
    ("message", "group", "status", "attempts", "last failed", "error", "payload"),
    lambda m: (
        m["message_id"],
        m.get("group_id") or "",
        m.get("last_status") or "",
        m.get("attempts"),
        m.get("last_failed_at"),
        (m.get("last_error") or "")[:60],
        preview(m),
    ),
)


@command(app, "list")
def list_(
    project: Project,
    name: Name,
    order: Annotated[Literal["newest", "oldest"], typer.Option(help="Order.")] = "newest",
    limit: Limit = 50,
    cursor: Annotated[str | None, typer.Option(help="next_cursor of the previous page.")] = None,
    group: Annotated[str | None, typer.Option(help="Only this group.")] = None,
    status: Annotated[int | None, typer.Option(help="Only this last HTTP status.")] = None,
    failed_after: Annotated[
        str | None, typer.Option(help="Only those that last failed after this RFC 3339 time.")
    ] = None,
    failed_before: Annotated[
        str | None,
        typer.Option(help="Only those that last failed before this RFC 3339 time (or now)."),
    ] = None,
    kind: Annotated[
        Literal["heads", "sidelined"] | None,
        typer.Option(help="Only failed heads (attempted) or sidelined followers (never sent)."),
    ] = None,
) -> Call:
    """List dead-lettered messages with why they failed."""
    params = {
        "kind": kind,
        "order": order,
        "limit": limit,
        "cursor": cursor,
        "group": group,
        "status": status,
        "failed_after": time_option(failed_after, "--failed-after"),
        "failed_before": time_option(failed_before, "--failed-before"),
    }

    def shown(page: dict[str, Any]) -> str | None:
        replace(MESSAGES, title=f"DLQ of {project}/{name}").print(page["messages"])
        return f"more: --cursor {page['next_cursor']}" if page.get("next_cursor") else None

    return get(_messages(project, name), params, text=shown)


def _summarised(found: dict[str, Any]) -> str:
    lines = [
        f"{found['size']} dead-lettered: {found['failed_heads']} failed heads, "
        f"{found['sidelined']} sidelined behind them"
    ]
    for group in found["by_error"]:
        kind = "sidelined" if group["sidelined"] else f"HTTP {group['status'] or '-'}"
        lines.append(f"  {group['count']:>7}  {kind:<10} {(group['error'] or '')[:80]}")
    return "\n".join(lines)


@command(app)
def summary(project: Project, name: Name) -> Call:
    """What the DLQ holds, read from storage: its size, the failed heads and the followers
    sidelined behind them, grouped by error (failed heads first)."""
    return get(_messages(project, name, "summary"), text=_summarised)


@dataclass(frozen=True)
class Selection:
    """Which dead-lettered messages ``unsideline`` and ``purge`` act on (an option group of
    the kit): by ids, by groups, or all that failed before a time."""

    ids: Annotated[list[str] | None, typer.Option("--id", help="Message id (repeatable).")] = None
    groups: Annotated[list[str] | None, typer.Option("--group", help="Group id (repeatable).")] = (
        None
    )
    before: Annotated[
        str | None,
        typer.Option("--before", help="Everything failed before this RFC 3339 time (or 'now')."),
    ] = None

    def chosen(self, everything: bool = False) -> tuple[str, str | None]:
        """Which selector was given (exactly one; ``everything`` is purge's ``--all``), and
        the ``--before`` time resolved."""
        chosen = [bool(self.ids), bool(self.groups), self.before is not None, everything]
        if sum(chosen) != 1:
            raise fail(
                "choose exactly one of --id, --group, --before (or --all to purge)", EXIT_USAGE
            )
        kind = ("ids", "groups", "before", "all")[chosen.index(True)]
        return kind, time_option(self.before, "--before")


Step = Callable[[AdminClient], Awaitable[dict[str, Any]]]


def batches(
    doing: str, done: str, step: Step, output: str, *, ask: str | None = None, yes: bool = False
) -> Call:
    """Call ``step`` until nothing remains (its answer counts ``done`` and ``remaining``); a
    bar shows the progress. Shown as ``{done} N`` (JSON ``{done: N}``)."""

    async def work(api: AdminClient) -> int:
        total = 0
        with progress(doing, output) as bar:
            task = bar.add_task(doing, total=None)
            while True:
                result = await step(api)
                handled, remaining = int(result[done]), int(result["remaining"])
                total += handled
                bar.update(task, completed=total, total=total + remaining)
                if remaining <= 0 or handled <= 0:  # 0 handled: nothing movable left (no spin)
                    return total

    return Call(
        work,
        text=lambda count: f"{done} {count}",
        json=lambda count: {done: count},
        ask=ask,
        yes=yes,
    )


@command(app)
def unsideline(
    project: Project,
    name: Name,
    selection: Selection,
    batch: Batch = 1000,
    output: Output = "text",
) -> Call:
    """Replay dead-lettered messages: by ids, by groups, or all that failed before a time."""
    kind, before = selection.chosen()
    body: dict[str, Any]
    if kind == "ids":
        body = {"message_ids": selection.ids}
    elif kind == "groups":
        body = {"group_ids": selection.groups}
    else:
        body = {"failed_before": before}
    body["limit"] = batch
    where = _messages(project, name, "unsideline")
    return batches("unsidelining", "unsidelined", lambda api: api.post(where, body), output)


@command(app)
def purge(
    project: Project,
    name: Name,
    selection: Selection,
    everything: Annotated[bool, typer.Option("--all", help="Purge the whole DLQ.")] = False,
    yes: Yes = False,
    batch: Batch = 1000,
    output: Output = "text",
) -> Call:
    """Delete dead-lettered messages for good (asks first unless --yes)."""
    kind, before = selection.chosen(everything)
    ids, groups = selection.ids, selection.groups
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
    where = _messages(project, name)
    ask = f"purge {what} of {project}/{name} for good?"
    return batches(
        "purging", "purged", lambda api: api.delete(where, params), output, ask=ask, yes=yes
    )


def dlq_line(dlq: dict[str, Any] | None) -> str:
    """What a DLQ holds, as the API counts it: ``961 (6 failed, 955 sidelined)``."""
    if not dlq:
        return "-"
    line = f"{dlq['size']} ({dlq['failed_heads']} failed, {dlq['sidelined']} sidelined)"
    return line if dlq.get("live", True) else f"{line}, last count"
