"""``httpbus topic``: create, list, show the segment timeline, migrate (a live cutover)."""

from __future__ import annotations

import asyncio
import time
from typing import Annotated, Any

import typer

from ..client import AdminClient, path
from .common import (
    DEFAULT_URL,
    EXIT_FAILED,
    Limit,
    Offset,
    Output,
    Token,
    Url,
    console,
    emit_json,
    fail,
    paged_footer,
    run,
    table,
)

app = typer.Typer(help="Topics: create, list, show the timeline, migrate.", no_args_is_help=True)

Project = Annotated[str, typer.Argument(help="Project name.")]
Topic = Annotated[str, typer.Argument(help="Topic name.")]
PHASES = ("PREPARE", "SWITCH", "COMMIT", "COMPLETE")
FINAL = {"COMPLETE", "ABORTED", "ROLLED_BACK"}


@app.command()
def create(
    project: Project,
    name: Topic,
    partitions: Annotated[int, typer.Option(min=1, max=512, help="Partitions.")] = 1,
    cluster: Annotated[str | None, typer.Option(help="Storage cluster (default: config).")] = None,
    grouped: Annotated[bool, typer.Option(help="Messages carry a group id.")] = False,
    retention_hours: Annotated[int | None, typer.Option(min=1, help="Retention.")] = None,
    url: Url = DEFAULT_URL,
    token: Token = "",
    output: Output = "text",
) -> None:
    """Create a topic and its first segment."""
    body: dict[str, Any] = {"name": name, "partitions": partitions, "grouped": grouped}
    if cluster:
        body["cluster"] = cluster
    if retention_hours:
        body["retention_hours"] = retention_hours

    async def work(api: AdminClient) -> Any:
        return await api.post(path("v1", "projects", project, "topics"), body)

    created = run(url, token, work)
    if output == "json":
        emit_json(created)
    else:
        seg = created["segments"][0]
        typer.echo(
            f"created topic {project}/{name} on {seg['cluster']} ({seg['backend']}), "
            f"{seg['partitions']} partition(s)"
        )


@app.command("list")
def list_(
    project: Project,
    offset: Offset = 0,
    limit: Limit = 100,
    url: Url = DEFAULT_URL,
    token: Token = "",
    output: Output = "text",
) -> None:
    """List the topics of a project (a page at a time)."""

    async def work(api: AdminClient) -> Any:
        topics = path("v1", "projects", project, "topics")
        return await api.get(topics, {"offset": offset, "limit": limit})

    page = run(url, token, work)
    if output == "json":
        emit_json(page)
        return
    rows = []
    for t in page["items"]:
        active = next((s for s in t["segments"] if s["state"] == "active"), None)
        where = f"{active['backend']} ×{active['partitions']}" if active else "-"
        rows.append((t["name"], len(t["segments"]), where, "yes" if t["grouped"] else "no"))
    table(f"topics of {project}", ("name", "segments", "active segment", "grouped"), rows)
    paged_footer(page)


@app.command()
def show(
    project: Project,
    name: Topic,
    url: Url = DEFAULT_URL,
    token: Token = "",
    output: Output = "text",
) -> None:
    """Show a topic's segment timeline, oldest first."""

    async def work(api: AdminClient) -> Any:
        return await api.get(path("v1", "projects", project, "topics", name, "segments"))

    timeline = run(url, token, work)
    if output == "json":
        emit_json(timeline)
        return
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
        )
        for s in timeline["segments"]
    ]
    cols = ("segment", "backend", "cluster", "partitions", "state", "created", "sealed")
    table(f"{project}/{name} timeline", cols, rows)
    console.print(
        " → ".join(f"[{s['id']} {s['backend']}×{s['partitions']}]" for s in timeline["segments"])
    )


def _acks(cutover: dict[str, Any]) -> str:
    producers = cutover.get("producers") or {}
    if not producers:  # the coordinator lists the live producers as it prepares them
        return "none joined yet"
    counts = []
    for phase, key in (
        ("prepared", "prepared_at"),
        ("switched", "switched_at"),
        ("committed", "committed_at"),
    ):
        done = sum(1 for p in producers.values() if p.get(key))
        counts.append(f"{phase} {done}/{len(producers)}")
    return ", ".join(counts)


def _line(cutover: dict[str, Any]) -> str:
    phase = cutover["phase"]
    step = PHASES.index(phase) + 1 if phase in PHASES else 0
    bar = "".join("■" if i < step else "□" for i in range(len(PHASES)))
    error = f"  error: {cutover['error']}" if cutover.get("error") else ""
    return f"{bar} {phase:<11} producers: {_acks(cutover)}{error}"


@app.command()
def migrate(
    project: Project,
    name: Topic,
    cluster: Annotated[str, typer.Option(help="Target storage cluster.")],
    partitions: Annotated[int, typer.Option(min=1, max=512, help="Partitions of the new segment.")],
    wait: Annotated[bool, typer.Option(help="Follow the phases until the cutover ends.")] = True,
    timeout: Annotated[
        float, typer.Option(min=1, help="Seconds to follow before giving up.")
    ] = 300,
    interval: Annotated[float, typer.Option(min=0.05, help="Seconds between polls.")] = 0.5,
    url: Url = DEFAULT_URL,
    token: Token = "",
    output: Output = "text",
) -> None:
    """Move a topic to a new segment (a coordinated cutover), showing each phase live."""
    cutover_path = path("v1", "projects", project, "topics", name, "cutover")

    async def work(api: AdminClient) -> Any:
        current = await api.post(cutover_path, {"cluster": cluster, "partitions": partitions})
        if output == "text":
            move = f"segment {current['from_segment']} → {current['to_segment']}"
            typer.echo(f"cutover {current['id']}: {move}")
        last = ""
        deadline = time.monotonic() + timeout
        while wait:
            line = _line(current)
            if output == "text" and line != last:
                typer.echo(line)
                last = line
            if current["phase"] in FINAL or time.monotonic() > deadline:
                break
            await asyncio.sleep(interval)
            current = await api.get(cutover_path)
        return current

    final = run(url, token, work)
    if output == "json":
        emit_json(final)
    if not wait:
        return
    if final["phase"] in ("ABORTED", "ROLLED_BACK"):
        raise fail(
            f"cutover {final['phase']}: {final.get('error') or 'no reason given'}", EXIT_FAILED
        )
    if final["phase"] != "COMPLETE":
        raise fail(f"cutover still in {final['phase']} after {timeout:g} s", EXIT_FAILED)
