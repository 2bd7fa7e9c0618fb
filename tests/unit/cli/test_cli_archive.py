"""``httpbus topic create|update --archive-to``, ``topic archive list``, ``sub replay`` and
``sub replay-status`` against a real control plane on the embedded backends: the archive the
leader writes is listed, a window is replayed to the end, and refusals are one clear line."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from core.archive import HOUR_MS, iso
from core.envelope import GROUP_ID, MESSAGE_ID, PRODUCED_AT
from segments.config import EmbeddedClusterConfig
from segments.embedded import create_store
from segments.protocol import Record
from tests.support.cli import as_json, embedded_control_plane_url, httpbus, ok, one_line_error
from tests.support.until import until_sync


async def _write_past(data: Path, name: str, at: int, n: int) -> None:
    """``n`` messages accepted at ``at`` (in the past), written to storage as a producer would,
    in one transaction: the archiver (every 0.2 s) closes their window, long past, as soon as it
    sees one, and under load it once archived the first of three alone."""
    records = []
    for i in range(n):
        headers = ((MESSAGE_ID, f"m{i}".encode()), (PRODUCED_AT, str(at + i).encode()))
        records.append(
            Record(b"x", key=b"g", headers=(*headers, (GROUP_ID, b"g")), timestamp_ms=at)
        )
    async with create_store(EmbeddedClusterConfig(path=str(data / "segments.db"))) as store:
        stored = await store.produce_many(name, records)
    assert not [r for r in stored if isinstance(r, Exception)], stored


def test_archive_and_replay_from_the_command_line(tmp_path: Path) -> None:
    root = tmp_path / "root"
    settings = {"archive": {"local_root": str(root), "interval_s": 0.2}}
    with embedded_control_plane_url(tmp_path, **settings) as url:
        ok(httpbus(url, "project", "create", "shop"))
        refused = httpbus(url, "topic", "create", "shop", "orders", "--archive-to", "file:///etc/x")
        one_line_error(refused, 1, "archive.to", "archive.local_root")
        created = httpbus(
            url, "topic", "create", "shop", "orders", "--archive-to",
            f"file://{root}/orders", "--archive-keep-days", "30", "--output", "json",
        )  # fmt: skip
        topic = as_json(created)
        assert topic["archive"] == {"to": f"file://{root}/orders", "every": "1h", "keep_days": 30}
        assert "nothing archived yet" in ok(
            httpbus(url, "topic", "archive", "list", "shop", "orders")
        )

        now = int(time.time() * 1000)
        past = now - now % HOUR_MS - 2 * HOUR_MS
        asyncio.run(_write_past(tmp_path, topic["segments"][0]["storage_topic"], past, 3))

        def listed() -> str | None:
            out = ok(httpbus(url, "topic", "archive", "list", "shop", "orders"))
            return out if "archived until" in out else None

        out = until_sync(listed, 20, "the archiver's window listed")
        assert f"part-{past}.parquet" in out and "every 1h, kept 30 days" in out

        sub = (
            "sub",
            "create",
            "shop",
            "s1",
            "--topic",
            "orders",
            "--endpoint",
            "http://127.0.0.1:9/h",
        )
        ok(httpbus(url, *sub))
        missing = httpbus(url, "sub", "replay-status", "shop", "s1")
        one_line_error(missing, 3, "never replayed")
        window = ("--since", iso(past), "--until", iso(past + HOUR_MS), "--rate", "100")
        done = ok(httpbus(url, "sub", "replay", "shop", "s1", *window))
        assert "done, 3 of 3 written (3 from the archive, 0 from storage)" in done
        status = as_json(httpbus(url, "sub", "replay-status", "shop", "s1", "--output", "json"))
        assert status["state"] == "done" and status["subscription"] == "shop/s1"
        backwards = ("--since", iso(past + HOUR_MS), "--until", iso(past))
        one_line_error(httpbus(url, "sub", "replay", "shop", "s1", *backwards), 1, "since must be")
        ok(httpbus(url, "topic", "update", "shop", "orders", "--no-archive"))
        gone = httpbus(url, "topic", "archive", "list", "shop", "orders")
        one_line_error(gone, 3, "has no archive")
