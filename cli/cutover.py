"""``httpbus topic cutover``: a topic's latest cutover — its phases with their times and each
producer's acknowledgements, followed live with ``--watch`` — and its abort. ``httpbus topic
migrate`` starts one and follows it with the same progress line."""

from __future__ import annotations

import asyncio
import time
from datetime import datetime
from typing import Annotated, Any

import typer

from cli.kit import (
    EXIT_FAILED,
    Call,
    Interval,
    Output,
    Project,
    Timeout,
    Topic,
    command,
    fail,
    table,
)
from control_plane.client import AdminClient, path

app = typer.Typer(
    help="A topic's cutover: status (--watch to follow), abort.", no_args_is_help=True
)

PHASES = ("PREPARE", "SWITCH", "COMMIT", "COMPLETE")
UNSUCCESSFUL = ("ABORTED", "ROLLED_BACK")
FINAL = {"COMPLETE", *UNSUCCESSFUL}
ACKS = (("prepared", "prepared_at"), ("switched", "switched_at"), ("committed", "committed_at"))


def cutover_path(project: str, topic: str) -> str:
    return path("v1", "projects", project, "topics", topic, "cutover")


def _acks(cutover: dict[str, Any]) -> str:
    producers = cutover.get("producers") or {}
    if not producers:  # the coordinator lists the live producers as it prepares them
        return "none joined yet"
    counts = []
    for phase, key in ACKS:
        done = sum(1 for p in producers.values() if p.get(key))
        counts.append(f"{phase} {done}/{len(producers)}")
    return ", ".join(counts)


def progress_line(cutover: dict[str, Any]) -> str:
    """``■■□□ SWITCH      producers: prepared 2/2, switched 1/2, committed 0/2``."""
    phase = cutover["phase"]
    step = PHASES.index(phase) + 1 if phase in PHASES else 0
    bar = "".join("■" if i < step else "□" for i in range(len(PHASES)))
    error = f"  error: {cutover['error']}" if cutover.get("error") else ""
    return f"{bar} {phase:<11} producers: {_acks(cutover)}{error}"


async def follow(
    api: AdminClient,
    where: str,
    current: dict[str, Any],
    *,
    interval: float,
    timeout: float,
    show: bool,
) -> dict[str, Any]:
    """Poll the cutover at ``where`` until a terminal phase or ``timeout`` seconds; with
    ``show``, a progress line each time it changes. The last state read."""
    last = ""
    deadline = time.monotonic() + timeout
    while True:
        line = progress_line(current)
        if show and line != last:
            typer.echo(line)
            last = line
        if current["phase"] in FINAL or time.monotonic() > deadline:
            return current
        await asyncio.sleep(interval)
        current = await api.get(where)


def check_outcome(final: dict[str, Any], timeout: float) -> None:
    """Exit 7 unless the followed cutover ended COMPLETE."""
    if final["phase"] in UNSUCCESSFUL:
        reason = final.get("error") or "no reason given"
        raise fail(f"cutover {final['phase']}: {reason}", EXIT_FAILED)
    if final["phase"] != "COMPLETE":
        raise fail(f"cutover still in {final['phase']} after {timeout:g} s", EXIT_FAILED)


def _at(value: str | None) -> str:
    if not value:
        return "-"
    return datetime.fromisoformat(value.replace("Z", "+00:00")).strftime("%Y-%m-%d %H:%M:%S.%f")[
        :-3
    ]


def _after(start: str, value: str | None) -> str:
    if not value:
        return "-"
    seconds = (
        datetime.fromisoformat(value.replace("Z", "+00:00"))
        - datetime.fromisoformat(start.replace("Z", "+00:00"))
    ).total_seconds()
    return f"+{seconds:.3f} s"


def print_cutover(project: str, topic: str, cutover: dict[str, Any]) -> None:
    """A cutover as a header, its phases with their times, and each producer's acks."""
    target = f"{cutover['cluster']}, {cutover['partitions']} partition(s)"
    typer.echo(
        f"cutover {cutover['id']} of {project}/{topic}: segment {cutover['from_segment']} → "
        f"{cutover['to_segment']} ({target})"
    )
    typer.echo(
        f"phase {cutover['phase']}  started {_at(cutover['started_at'])}  "
        f"updated {_at(cutover['updated_at'])}"
    )
    start = cutover["started_at"]
    times = cutover.get("phase_times") or {}
    steps = {f"  {step}": at for step, at in (cutover.get("step_times") or {}).items()}
    ordered = sorted({**times, **steps}.items(), key=lambda item: str(item[1]))
    rows = [(phase, _at(at), _after(start, at)) for phase, at in ordered]
    table("phases", ("phase", "at", "after start"), rows)
    producers = cutover.get("producers") or {}
    if producers:
        acks = [
            (member, *(_after(start, p.get(key)) for _, key in ACKS))
            for member, p in sorted(producers.items())
        ]
        table(
            "producers' acknowledgements (after start)", ("producer", *(n for n, _ in ACKS)), acks
        )
    else:
        typer.echo("producers: none joined yet")
    if cutover.get("error"):
        typer.echo(f"error: {cutover['error']}")


@command(app)
def status(
    project: Project,
    topic: Topic,
    watch: Annotated[
        bool,
        typer.Option("--watch", "-w", help="Follow it until it ends (exit 7 unless it completes)."),
    ] = False,
    timeout: Timeout = 300,
    interval: Interval = 0.5,
    output: Output = "text",
) -> Call:
    """The topic's latest cutover: phase, the time of each phase, the producers' acks.

    With --watch, a progress line each time it changes until it ends: exit 0 on COMPLETE,
    7 if it was aborted or rolled back or is still running at --timeout."""
    where = cutover_path(project, topic)

    async def work(api: AdminClient) -> Any:
        current = await api.get(where)
        if not watch:
            return current
        show = output == "text"
        return await follow(api, where, current, interval=interval, timeout=timeout, show=show)

    return Call(
        work,
        text=lambda found: print_cutover(project, topic, found),
        then=(lambda found: check_outcome(found, timeout)) if watch else None,
    )


@command(app)
def abort(project: Project, topic: Topic) -> Call:
    """Abort the running cutover before COMMIT (exit 4 after it).

    Producers stay on the old segment and the new one's storage is deleted."""
    return Call(
        lambda api: api.delete(cutover_path(project, topic)),
        text=lambda stopped: (
            f"cutover {stopped['id']} of {project}/{topic}: {stopped['phase']}; "
            f"the topic stays on segment {stopped['from_segment']}"
        ),
    )
