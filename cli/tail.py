"""``httpbus tail``: follow the deliveries of a subscription.

It polls the subscription's status and prints one line per change of its totals (delivered,
failed, filtered, dead-lettered), with the lag, in-flight count and circuit state. We chose the
status over following the DLQ because it shows every outcome, not only failures, and costs
one small request per interval whatever the message rate.
"""

from __future__ import annotations

import asyncio
import json
from datetime import datetime
from typing import Annotated, Any

import typer

from cli.kit import Call, Output, Project, Subscription
from control_plane.client import AdminClient, path

COUNTED = ("delivered", "failed", "filtered", "dead_lettered")


def _line(status: dict[str, Any], before: dict[str, int]) -> str:
    totals = status.get("totals") or {}
    parts = []
    for key in COUNTED:
        now = int(totals.get(key, 0))
        parts.append(f"{key} {now} (+{now - before.get(key, 0)})")
    circuit = (status.get("circuit") or {}).get("state", "-")
    clock = datetime.now().strftime("%H:%M:%S")
    return (
        f"{clock} {status['state']:<10} {'  '.join(parts)}  lag {status['lag']}  "
        f"in flight {status['in_flight']}  circuit {circuit}"
    )


def tail(
    project: Project,
    name: Subscription,
    interval: Annotated[float, typer.Option(min=0.05, help="Seconds between polls.")] = 2.0,
    count: Annotated[int, typer.Option(min=0, help="Stop after N polls (0: until Ctrl-C).")] = 0,
    output: Output = "text",
) -> Call:
    """Follow a subscription's deliveries: a line each time its counts change."""
    status_path = path("v1", "projects", project, "subscriptions", name, "status")

    async def work(api: AdminClient) -> None:
        before: dict[str, int] | None = None
        polls = 0
        while count == 0 or polls < count:
            status = await api.get(status_path)
            polls += 1
            totals = {k: int((status.get("totals") or {}).get(k, 0)) for k in COUNTED}
            if totals != before:
                if output == "json":
                    typer.echo(json.dumps(status))
                else:
                    typer.echo(_line(status, before or totals))
                before = totals
            if count == 0 or polls < count:
                await asyncio.sleep(interval)

    return Call(work, json=None, until_interrupted=True)
