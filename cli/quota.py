"""``httpbus project quota``: read a project's quota with its usage, or change it (admin)."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from cli.kit import EXIT_USAGE, Call, Project, command, fail, get, table, update
from control_plane.client import path

app = typer.Typer(
    help="A project's quota: rates over all producers, topic and subscription counts.",
    no_args_is_help=True,
)
FIELDS = ("messages_per_second", "bytes_per_second", "max_topics", "max_subscriptions")


def _shown(usage: dict[str, Any]) -> str:
    quota = usage["quota"]

    def limit(field: str) -> str:
        return "unlimited" if quota[field] is None else f"{quota[field]:g}"

    rows = [
        ("messages/s", f"{usage['messages_per_second']:.1f}", limit("messages_per_second")),
        ("bytes/s", f"{usage['bytes_per_second']:.0f}", limit("bytes_per_second")),
        ("topics", usage["topics"], limit("max_topics")),
        ("subscriptions", usage["subscriptions"], limit("max_subscriptions")),
    ]
    table(None, ("quota", "used", "limit"), rows)
    return f"rates as reported by {usage['producers']} producer(s), about a second old"


@command(app, "get")
def get_(name: Project) -> Call:
    """Show the project's quota and its usage against it."""
    return get(path("v1", "projects", name, "quota"), text=_shown)


@command(app, "set")
def set_(
    name: Project,
    messages_per_second: Annotated[
        float | None, typer.Option(min=0.001, help="Messages per second, all producers.")
    ] = None,
    bytes_per_second: Annotated[
        float | None, typer.Option(min=1024, help="Bytes per second, all producers.")
    ] = None,
    max_topics: Annotated[int | None, typer.Option(min=0, help="Topics at most.")] = None,
    max_subscriptions: Annotated[
        int | None, typer.Option(min=0, help="Subscriptions at most.")
    ] = None,
    unlimited: Annotated[
        list[str] | None,
        typer.Option(help=f"Remove a limit (repeatable): one of {', '.join(FIELDS)}."),
    ] = None,
) -> Call:
    """Change the limits given; the others stay as they are (admin only)."""
    given = {
        "messages_per_second": messages_per_second,
        "bytes_per_second": bytes_per_second,
        "max_topics": max_topics,
        "max_subscriptions": max_subscriptions,
    }
    given = {k: v for k, v in given.items() if v is not None}
    removed = [f.replace("-", "_") for f in unlimited or []]
    if unknown := [f for f in removed if f not in FIELDS]:
        raise fail(
            f"--unlimited: unknown limit {unknown[0]!r}; one of {', '.join(FIELDS)}", EXIT_USAGE
        )
    if not given and not removed:
        raise fail("nothing to change: give a limit or --unlimited (see --help)", EXIT_USAGE)
    return update(
        path("v1", "projects", name, "quota"),
        lambda current: {**current["quota"], **given, **dict.fromkeys(removed)},
        fields=lambda usage: dict(usage["quota"]),
        said=f"quota of project {name}",
    )
