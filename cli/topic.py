"""``httpbus topic``: create, list, show the segment timeline, update, delete, migrate (a live
cutover), ``topic cutover status|abort``, ``topic failover status``,
``topic migration start|status|check|abandon`` (a verified migration) and
``topic schema set|get|versions|delete``."""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Annotated, Any

import typer

from cli import (
    cutover,
    failover,
    grant_request,
    migration,
    topic_archive,
    topic_grant,
    topic_schema,
)
from cli.cutover import check_outcome, cutover_path, follow
from cli.kit import (
    EXIT_CONFLICT,
    EXIT_USAGE,
    Call,
    Columns,
    Interval,
    Output,
    Paging,
    Project,
    Timeout,
    Topic,
    Yes,
    command,
    console,
    fail,
    get,
    listing,
    post,
    removal,
    table,
)
from cli.kit import update as updated
from control_plane.client import AdminClient, ApiError, path

app = typer.Typer(
    help="Topics: create, list, show the timeline, update, delete, migrate, cutover.",
    no_args_is_help=True,
)
app.add_typer(cutover.app, name="cutover")
app.add_typer(failover.app, name="failover")
app.add_typer(migration.app, name="migration")
app.add_typer(topic_schema.app, name="schema")
app.add_typer(grant_request.app, name="grant-request")
app.add_typer(topic_grant.app, name="grant")
app.add_typer(topic_archive.app, name="archive")

FailoverClusters = Annotated[
    list[str] | None,
    typer.Option(
        "--failover-cluster",
        help="A standby cluster for automatic failover (repeat, in the order to try).",
    ),
]
FailoverMode = Annotated[
    str | None,
    typer.Option(help="ordered (default: old segment first) or available (new one at once)."),
]


@dataclass(frozen=True)
class Failover:
    """The failover options of ``create`` and ``update`` (an option group of the kit)."""

    failover_cluster: FailoverClusters = None
    failover_mode: FailoverMode = None

    def body(self) -> dict[str, Any] | None:
        """The ``failover`` setting the options name (None: they name none)."""
        clusters, mode = self.failover_cluster, self.failover_mode
        if mode is not None and mode not in ("ordered", "available"):
            raise typer.BadParameter(f"--failover-mode must be ordered or available, not {mode!r}")
        if not clusters:
            if mode is not None:
                raise typer.BadParameter("--failover-mode needs at least one --failover-cluster")
            return None
        return {"clusters": clusters, "mode": mode or "ordered"}


@dataclass(frozen=True)
class Limits:
    """What a topic accepts, options of ``create`` and ``update`` (an option group of the
    kit)."""

    max_message_bytes: Annotated[
        int | None, typer.Option(min=1, help="The largest message accepted.")
    ] = None
    max_qps: Annotated[
        int | None, typer.Option(min=1, help="Messages per second accepted (then 429).")
    ] = None
    max_bytes_per_second: Annotated[
        int | None, typer.Option(min=1024, help="Bytes per second accepted (then 429).")
    ] = None

    def capacity(self) -> dict[str, int]:
        """The ``capacity`` fields the options give (None values left out)."""
        given = {"max_qps": self.max_qps, "max_bytes_per_second": self.max_bytes_per_second}
        return {k: v for k, v in given.items() if v is not None}


def describe_failover(failover: dict[str, Any] | None) -> str:
    if not failover:
        return "none"
    return f"{failover['mode']}: {' → '.join(failover['clusters'])}"


def _topics(project: str, *rest: str) -> str:
    return path("v1", "projects", project, "topics", *rest)


def _active(topic: dict[str, Any]) -> str:
    active = next((s for s in topic["segments"] if s["state"] == "active"), None)
    return f"{active['backend']} ×{active['partitions']}" if active else "-"


CloudEventsGroup = Annotated[
    str | None,
    typer.Option(
        help="Grouped topics: the CloudEvents attribute that is an event's group "
        "(default partitionkey; subject, or any extension).",
    ),
]


@command(app)
def create(
    project: Project,
    name: Topic,
    *,
    partitions: Annotated[int, typer.Option(min=1, max=512, help="Partitions.")] = 1,
    cluster: Annotated[str | None, typer.Option(help="Storage cluster (default: config).")] = None,
    grouped: Annotated[bool, typer.Option(help="Messages carry a group id.")] = False,
    retention_hours: Annotated[int | None, typer.Option(min=1, help="Retention.")] = None,
    dedupe_window: Annotated[
        str | None,
        typer.Option(help="Idempotent publish: answer a repeated X-Message-Id within 10m, 1h, 1d."),
    ] = None,
    standby: Failover,
    archiving: topic_archive.Archiving,
    cloudevents_group_attribute: CloudEventsGroup = None,
    description: Annotated[str | None, typer.Option(help="What the topic carries.")] = None,
    limits: Limits,
    external_topic: Annotated[
        str | None,
        typer.Option(
            help="Adopt this existing Kafka topic of a read_only --cluster as the first "
            "segment; --partitions must be its partition count (docs/migrating.md)."
        ),
    ] = None,
) -> Call:
    """Create a topic and its first segment."""
    body: dict[str, Any] = {"name": name, "partitions": partitions, "grouped": grouped}
    optional = {
        "cluster": cluster,
        "failover": standby.body(),
        "archive": archiving.body(),
        "retention_hours": retention_hours,
        "dedupe_window": dedupe_window,
        "cloudevents_group_attribute": cloudevents_group_attribute,
        "description": description,
        "max_message_bytes": limits.max_message_bytes,
        "capacity": limits.capacity(),
        "external_topic": external_topic,
    }
    body.update({k: v for k, v in optional.items() if v})

    def created(topic: dict[str, Any]) -> str:
        seg = topic["segments"][0]
        return (
            f"created topic {project}/{name} on {seg['cluster']} ({seg['backend']}), "
            f"{seg['partitions']} partition(s); failover {describe_failover(topic['failover'])}"
        )

    return post(_topics(project), body, text=created)


@command(app, "list")
def list_(project: Project, page: Paging, output: Output = "text") -> Call:
    """List the topics of a project: a page (the next page's command is printed under
    it), or every page with --all; --search finds them by name or description."""
    columns = Columns(
        f"topics of {project}",
        ("name", "segments", "active segment", "grouped"),
        lambda t: (t["name"], len(t["segments"]), _active(t), "yes" if t["grouped"] else "no"),
    )
    again = f"httpbus topic list {project}"
    where = _topics(project)
    return listing(where, columns, page=page, counted="topic", again=again, output=output)


@command(app)
def show(project: Project, name: Topic) -> Call:
    """Show a topic's segment timeline, oldest first."""
    return get(_topics(project, name, "segments"), text=lambda t: _timeline(project, name, t))


def _timeline(project: str, name: str, timeline: dict[str, Any]) -> str:
    pointer = (timeline.get("produce_pointer") or {}).get("segment_id")
    rows = [
        (
            s["id"],
            s["backend"],
            s["cluster"],
            s["partitions"],
            s["state"] + (" ◀ produce" if s["id"] == pointer else ""),
            s.get("created_at", ""),
            s.get("sealed_at") or "",
            _failover_note(s),
        )
        for s in timeline["segments"]
    ]
    cols = ("segment", "backend", "cluster", "partitions", "state", "created", "sealed", "failover")
    table(f"{project}/{name} timeline", cols, rows)
    console.print(f"failover: {describe_failover(timeline.get('failover'))}")
    return " → ".join(f"[{s['id']} {s['backend']}×{s['partitions']}]" for s in timeline["segments"])


@command(app)
def migrate(
    project: Project,
    name: Topic,
    cluster: Annotated[str, typer.Option(help="Target storage cluster.")],
    partitions: Annotated[int, typer.Option(min=1, max=512, help="Partitions of the new segment.")],
    wait: Annotated[bool, typer.Option(help="Follow the phases until the cutover ends.")] = True,
    timeout: Timeout = 300,
    interval: Interval = 0.5,
    output: Output = "text",
) -> Call:
    """Move a topic to a new segment (a coordinated cutover), showing each phase live."""
    where = cutover_path(project, name)

    async def work(api: AdminClient) -> Any:
        current = await api.post(where, {"cluster": cluster, "partitions": partitions})
        if output == "text":
            move = f"segment {current['from_segment']} → {current['to_segment']}"
            typer.echo(f"cutover {current['id']}: {move}")
        if not wait:
            return current
        show = output == "text"
        return await follow(api, where, current, interval=interval, timeout=timeout, show=show)

    return Call(work, then=(lambda final: check_outcome(final, timeout)) if wait else None)


def _failover_note(segment: dict[str, Any]) -> str:
    """Why a failover opened this segment, or when it left it unsealed."""
    notes = []
    if segment.get("opened_by"):
        notes.append(f"opened: {segment['opened_by']}")
    if segment.get("unsealed_at"):
        notes.append(f"left unsealed {segment['unsealed_at']}")
    return "; ".join(notes)


SETTINGS = (
    "max_message_bytes",
    "retention_hours",
    "capacity",
    "description",
    "dedupe_window",
    "failover",
    "archive",
    "cloudevents_group_attribute",
)
_DURATION = re.compile(r"^\s*(\d+)\s*([hdw]?)\s*$")
_HOURS = {"": 1, "h": 1, "d": 24, "w": 24 * 7}


def retention_hours(text: str) -> int:
    """``36h``, ``7d``, ``2w`` or a number of hours, as hours (retention is whole hours)."""
    match = _DURATION.match(text.lower())
    if not match:
        raise typer.BadParameter(f"{text!r} is not a duration such as 36h, 7d or 2w")
    return int(match[1]) * _HOURS[match[2]]


@command(app)
def update(
    project: Project,
    name: Topic,
    *,
    retention: Annotated[
        int | None,
        typer.Option(parser=retention_hours, help="How long messages are kept: 36h, 7d, 2w."),
    ] = None,
    limits: Limits,
    description: Annotated[str | None, typer.Option(help="What the topic carries.")] = None,
    dedupe_window: Annotated[
        str | None,
        typer.Option(help="Idempotent publish window (10m, 1h, 1d), or off."),
    ] = None,
    standby: Failover,
    no_failover: Annotated[
        bool, typer.Option("--no-failover", help="Name no standby cluster any more.")
    ] = False,
    archiving: topic_archive.Archiving,
    no_archive: Annotated[
        bool, typer.Option("--no-archive", help="Archive no more (the files stay).")
    ] = False,
    cloudevents_group_attribute: CloudEventsGroup = None,
) -> Call:
    """Change a topic's settings; the others stay as they are.

    A compare-and-set on the version just read (exit 4 if it changed meanwhile). Partitions
    and storage change by a cutover: topic migrate."""
    wanted: dict[str, Any] = {
        k: v
        for k, v in {
            "retention_hours": retention,
            "max_message_bytes": limits.max_message_bytes,
            "description": description,
            "cloudevents_group_attribute": cloudevents_group_attribute,
        }.items()
        if v is not None
    }
    if dedupe_window is not None:
        wanted["dedupe_window"] = None if dedupe_window.lower() == "off" else dedupe_window
    capacity = limits.capacity()
    failover = standby.body()
    if failover is not None or no_failover:
        wanted["failover"] = failover
    archive = archiving.body()
    if archive is not None or no_archive:
        wanted["archive"] = archive
    if not wanted and not capacity:
        raise fail(
            "nothing to change: give --retention, --max-message-bytes, --max-qps, "
            "--max-bytes-per-second, --description, --dedupe-window, --failover-cluster, "
            "--no-failover, --archive-to, --no-archive or --cloudevents-group-attribute",
            EXIT_USAGE,
        )

    def body(current: dict[str, Any]) -> dict[str, Any]:
        changed = {k: current[k] for k in SETTINGS if k in current}
        changed.update(wanted)
        if capacity:
            changed["capacity"] = {**(current.get("capacity") or {}), **capacity}
        return {**changed, "version": current["version"]}

    return updated(
        _topics(project, name),
        body,
        fields=lambda topic: {k: topic.get(k) for k in SETTINGS},
        said=f"updated topic {project}/{name}",
    )


@command(app)
def delete(
    project: Project,
    name: Topic,
    force: Annotated[bool, typer.Option("--force", help="Delete its subscriptions too.")] = False,
    yes: Yes = False,
) -> Call:
    """Delete a topic and its stored messages (asks first unless --yes).

    Refused (exit 4) while subscriptions read it, unless --force, which deletes them too."""
    also = " and every subscription to it" if force else ""
    plain = removal(
        _topics(project, name),
        ask=f"delete topic {project}/{name}{also}, with its messages?",
        yes=yes,
        said=f"deleted topic {project}/{name}{also}",
        record={"deleted": "topic", "project": project, "topic": name, "force": force},
        params={"force": "true"} if force else None,
    )

    async def work(api: AdminClient) -> Any:
        try:
            return await plain.work(api)
        except ApiError as exc:
            if exc.code != "in_use":
                raise
            subs = ", ".join(exc.details.get("subscriptions", [])) or "subscriptions"
            raise fail(
                f"409 in_use: topic {project}/{name} is read by {subs}; delete them first, "
                "or pass --force to delete them too",
                EXIT_CONFLICT,
            ) from None

    return replace(plain, work=work)
