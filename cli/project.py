"""``httpbus project``: create, list, show, update and delete projects; ``project notify``
(where and which operational events go); ``project quota``.

A project may name a ``--notification-url`` that receives a signed JSON notice of the events
it chose (by default when one of its subscriptions is disabled); the secret those notices are
signed with is printed once, when the first URL is set."""

from __future__ import annotations

from dataclasses import replace
from typing import Annotated, Any

import typer

from cli import quota
from cli.kit import (
    EXIT_USAGE,
    Call,
    Columns,
    Output,
    Paging,
    Project,
    Yes,
    command,
    duration_ms,
    fail,
    get,
    listing,
    post,
    removal,
)
from cli.kit import update as updated
from control_plane.client import path

app = typer.Typer(
    help="Projects: create, list, show, update, delete; notifications; quotas.",
    no_args_is_help=True,
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
NotificationUrl = Annotated[
    str | None,
    typer.Option(help="Receives a signed notice when a subscription of the project is disabled."),
]
PROJECTS = Columns(
    "projects",
    ("name", "description", "created"),
    lambda p: (p["name"], p.get("description", ""), p.get("created_at", "")),
)


def _made(said: str) -> Any:
    """``said`` and, the one time the API shows it, the notification secret."""

    def text(project: dict[str, Any]) -> str:
        secret = project.get("notification_secret")
        note = f"\nnotification secret (shown this once): {secret}" if secret else ""
        return said.format(**project) + note

    return text


@command(app)
def create(
    name: Project, description: Description = "", notification_url: NotificationUrl = None
) -> Call:
    """Create a project."""
    body = {"name": name, "description": description}
    if notification_url is not None:
        body["notification_url"] = notification_url
    return post(path("v1", "projects"), body, text=_made("created project {name}"))


@command(app, "list")
def list_(page: Paging, output: Output = "text") -> Call:
    """List projects: a page (the next page's command is printed under it), or every page
    with --all; --search finds them by name or description."""
    where = path("v1", "projects")
    again = "httpbus project list"
    return listing(where, PROJECTS, page=page, counted="project", again=again, output=output)


def _shown(project: dict[str, Any]) -> str:
    secret = "set" if project.get("notification_secret_set") else "none"
    return (
        f"{project['name']}: {project.get('description') or '(no description)'}\n"
        f"notification url {project.get('notification_url') or '-'} (secret {secret})\n"
        f"created {project.get('created_at')}, version {project.get('version')}"
    )


@command(app)
def show(name: Project) -> Call:
    """A project: its description, notification URL, when it was made."""
    return get(path("v1", "projects", name), text=_shown)


@command(app)
def update(
    name: Project,
    description: Annotated[str | None, typer.Option(help="What the project is for.")] = None,
    notification_url: NotificationUrl = None,
    no_notification_url: Annotated[
        bool, typer.Option("--no-notification-url", help="Send no notices any more.")
    ] = False,
) -> Call:
    """Change a project's description or notification URL; the other stays as it is.

    A compare-and-set on the version just read (exit 4 if it changed meanwhile). The first
    notification URL of a project makes its notification secret, printed this once."""
    if notification_url is not None and no_notification_url:
        raise fail("give --notification-url or --no-notification-url, not both", EXIT_USAGE)
    if description is None and notification_url is None and not no_notification_url:
        raise fail("nothing to change: give at least one setting (see --help)", EXIT_USAGE)
    changes: dict[str, Any] = {} if description is None else {"description": description}
    if notification_url is not None or no_notification_url:
        changes["notification_url"] = notification_url

    def body(current: dict[str, Any]) -> dict[str, Any]:
        return {"description": current["description"], **changes, "version": current["version"]}

    call = updated(
        path("v1", "projects", name),
        body,
        fields=lambda p: {k: p.get(k) for k in ("description", "notification_url")},
        said=f"updated project {name}",
    )
    said = call.text

    def text(both: tuple[Any, Any]) -> str | None:
        secret = both[1].get("notification_secret")
        line = said(both) if said is not None else None
        return f"{line}\nnotification secret (shown this once): {secret}" if secret else line

    return replace(call, text=text)


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
