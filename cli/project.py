"""``httpbus project``: create, list, update and delete projects; ``project notify`` (where
and which operational events go); ``project quota``."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from cli import quota
from cli.kit import (
    EXIT_USAGE,
    Call,
    Columns,
    Limit,
    Offset,
    Project,
    Yes,
    command,
    duration_ms,
    fail,
    listing,
    post,
    removal,
)
from cli.kit import update as updated
from control_plane.client import path

app = typer.Typer(
    help="Projects: create, list, update, delete; notifications; quotas.", no_args_is_help=True
)
KINDS = (
    "failing",
    "recovered",
    "dead_lettered",
    "circuit_opened",
    "circuit_closed",
    "disabled",
    "enabled",
)
app.add_typer(quota.app, name="quota")
Description = Annotated[str, typer.Option(help="What the project is for.")]
PROJECTS = Columns(
    "projects",
    ("name", "description", "created"),
    lambda p: (p["name"], p.get("description", ""), p.get("created_at", "")),
)


@command(app)
def create(name: Project, description: Description = "") -> Call:
    """Create a project."""
    body = {"name": name, "description": description}
    return post(path("v1", "projects"), body, text=lambda p: f"created project {p['name']}")


@command(app, "list")
def list_(offset: Offset = 0, limit: Limit = 100) -> Call:
    """List projects (a page at a time)."""
    return listing(path("v1", "projects"), PROJECTS, page=(offset, limit))


@command(app)
def update(name: Project, description: Description) -> Call:
    """Change a project's description.

    A compare-and-set on the version just read (exit 4 if it changed meanwhile)."""
    return updated(
        path("v1", "projects", name),
        lambda current: {"description": description, "version": current["version"]},
        fields=lambda p: {"description": p["description"]},
        said=f"updated project {name}",
    )


@command(app)
def notify(
    name: Project,
    notification_url: Annotated[
        str | None,
        typer.Option(help="Where the events go (a signed JSON POST each)."),
    ] = None,
    no_url: Annotated[
        bool, typer.Option("--no-notification-url", help="Remove the notification URL.")
    ] = False,
    events: Annotated[
        list[str] | None,
        typer.Option(
            "--event",
            help=f"An event to send (repeatable; replaces the list): {', '.join(KINDS)}, or all.",
        ),
    ] = None,
    failing_after: Annotated[
        str | None, typer.Option(help="`failing` after every attempt failed this long (5m).")
    ] = None,
    interval: Annotated[
        str | None,
        typer.Option(help="Least time between two dead_lettered / circuit_opened notices (5m)."),
    ] = None,
) -> Call:
    """Where a project's operational events go and which (docs/operations.md).

    With no option, shows the settings unchanged. A compare-and-set (exit 4 if the project
    changed meanwhile)."""
    if notification_url is not None and no_url:
        raise fail("give --notification-url or --no-notification-url, not both", EXIT_USAGE)
    wanted = _kinds(events) if events is not None else None
    failing_s = duration_ms(failing_after) // 1000 if failing_after is not None else None
    interval_s = duration_ms(interval) // 1000 if interval is not None else None

    def body(current: dict[str, Any]) -> dict[str, Any]:
        settings = dict(current.get("notifications") or {})
        if wanted is not None:
            settings["events"] = wanted
        if failing_s is not None:
            settings["failing_after_s"] = failing_s
        if interval_s is not None:
            settings["interval_s"] = interval_s
        out = {
            "description": current.get("description", ""),
            "notifications": settings,
            "version": current["version"],
        }
        if notification_url is not None or no_url:
            out["notification_url"] = None if no_url else notification_url
        return out

    return updated(
        path("v1", "projects", name),
        body,
        fields=lambda p: {
            "notification_url": p.get("notification_url"),
            "events": ",".join(p["notifications"]["events"]),
            "failing_after_s": p["notifications"]["failing_after_s"],
            "interval_s": p["notifications"]["interval_s"],
        },
        said=f"notifications of {name}",
    )


def _kinds(given: list[str]) -> list[str]:
    """``--event`` values as the API's kinds (``failing`` → ``subscription.failing``)."""
    out: list[str] = []
    for item in (part.strip() for value in given for part in value.split(",")):
        short = item.removeprefix("subscription.")
        if short == "all":
            out += [f"subscription.{k}" for k in KINDS]
        elif short in KINDS:
            out.append(f"subscription.{short}")
        elif item:
            raise fail(f"--event {item!r}: one of {', '.join(KINDS)}, or all", EXIT_USAGE)
    return sorted(set(out))


@command(app)
def delete(name: Project, yes: Yes = False) -> Call:
    """Delete an empty project (asks first unless --yes).

    Refused (exit 4) while it has topics or subscriptions."""
    return removal(
        path("v1", "projects", name),
        ask=f"delete project {name}?",
        yes=yes,
        said=f"deleted project {name}",
        record={"deleted": "project", "project": name},
    )
