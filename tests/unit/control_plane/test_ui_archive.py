"""The topic page's archive section: none set, nothing archived yet, then the archiver's
windows (hours, files, sizes, keep_days), and an unreadable listing that leaves the rest of
the page standing. On the embedded store and a local archive folder, with the real archiver
leader writing the files."""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

from control_plane.ui.archive_listing import SHOWN, summed
from core.archive import HOUR_MS
from tests.support.control_plane import AUTH, create_shop, embedded_control_plane
from tests.support.ui_pages import login
from tests.support.until import until
from tests.support.world import record

PAGE = "/ui/projects/shop/topics/orders"
ROW = r'<tr><td>(.*?)</td><td>(\d+)</td><td>(\d+)</td>\s*<td data-bytes="(\d+)"'


def _section(html: str) -> str:
    found = re.search(r'<div id="archive">(.*?)</div>\s*<h2>', html, re.S)
    assert found, "no archive section on the topic page"
    return found.group(1)


async def test_the_topic_page_lists_the_archived_windows(tmp_path: Path) -> None:
    root = tmp_path / "root"
    settings = {"archive": {"local_root": str(root), "interval_s": 0.1, "grace_s": 0}}
    async with embedded_control_plane(
        tmp_path, admin=False, base_url="http://testserver", **settings
    ) as cp:
        ui = cp.client
        to = f"file://{root}/orders"
        await create_shop(ui, headers=AUTH, archive={"to": to, "keep_days": 30})
        r = await ui.post("/v1/projects/shop/topics", json={"name": "plain"}, headers=AUTH)
        assert r.is_success, r.text
        await login(ui)
        plain = _section((await ui.get("/ui/projects/shop/topics/plain")).text)
        assert "No archive: messages are kept for the topic" in plain
        assert "--archive-to" in plain

        empty = _section((await ui.get(PAGE)).text)
        assert f"<code>{to}</code>" in empty
        assert '<strong class="archive-keep">30 days</strong>' in empty
        assert '<strong class="archive-every">1h</strong>' in empty
        assert "Nothing archived yet" in empty
        forever = {"name": "kept", "archive": {"to": f"file://{root}/kept"}}
        r = await ui.post("/v1/projects/shop/topics", json=forever, headers=AUTH)
        assert r.is_success, r.text
        kept = _section((await ui.get("/ui/projects/shop/topics/kept")).text)
        assert '<strong class="archive-keep">kept for ever</strong>' in kept

        # Three messages in an hour three hours ago, two in the next: two closed hours.
        now = int(time.time() * 1000)
        first = now - now % HOUR_MS - 3 * HOUR_MS
        topic = (await ui.get("/v1/projects/shop/topics/orders", headers=AUTH)).json()
        storage = topic["segments"][0]["storage_topic"]
        times = [first + 1, first + 2, first + 3, first + HOUR_MS + 1, first + HOUR_MS + 2]
        # In one write: the archiver, running every 0.1 s, must not close an hour between two.
        stored = await cp.store.produce_many(
            storage, [record(f"m{i}", "g", at=at, value=b"x" * 100) for i, at in enumerate(times)]
        )
        assert not any(isinstance(x, Exception) for x in stored), stored

        async def listed() -> list[dict[str, Any]] | None:
            r = await ui.get("/v1/projects/shop/topics/orders/archive", headers=AUTH)
            windows: list[dict[str, Any]] = r.json()["windows"]
            return windows if len(windows) >= 2 else None

        windows = await until(listed, 20, "the archiver's two windows")
        assert len(windows) == 2
        section = _section((await ui.get(PAGE)).text)
        assert "Nothing archived yet" not in section
        total = sum(int(w["bytes"]) for w in windows)
        totals = re.search(r'<p class="archive-totals">(.*?)</p>', section, re.S)
        assert totals, section
        assert "<strong>2</strong> files · 5 messages" in totals.group(1)
        assert f"{total / 1024:.1f} KiB" in totals.group(1) or f"{total} Bytes" in totals.group(1)
        rows = re.findall(ROW, section)
        # newest first: the hour with two messages, then the one with three
        start = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(first / 1000))
        second = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime((first + HOUR_MS) / 1000))
        assert [(r[0].split(" – ")[0], r[1], r[3]) for r in rows] == [
            (second, "2", str(windows[1]["bytes"])),
            (start, "3", str(windows[0]["bytes"])),
        ]
        for w in windows:
            assert f"<code>{w['key']}</code>" in section

        # An unreadable listing (its state file is not JSON) names the problem; the page stands.
        (root / "orders" / "_httpbus_archive.json").write_text("not json")
        page = await ui.get(PAGE)
        assert page.status_code == 200 and 'id="timeline"' in page.text
        broken = _section(page.text)
        assert "the listing could not be read" in broken and 'class="archive-problem"' in broken
        assert "_httpbus_archive.json is not an archive state" in broken


def test_the_page_sums_every_window_and_lists_the_newest_first() -> None:
    """A year of hourly files is too long a table: the page sums them all and lists the newest
    SHOWN, newest first."""
    windows = [
        {
            "start": f"2026-01-{1 + i // 24:02d}T{i % 24:02d}:00:00Z",
            "end": "",
            "key": f"k{i}",
            "messages": i,
            "duplicates": i % 2,
            "bytes": 1000 + i,
            "archived_at": "",
        }
        for i in range(SHOWN + 6)
    ]
    listing = {"to": "s3://lake/x", "every": "1h", "keep_days": None, "archived_until": "z"}
    view = summed({**listing, "windows": windows})
    assert (view.files, view.messages, view.duplicates) == (SHOWN + 6, sum(range(SHOWN + 6)), 15)
    assert view.bytes == sum(1000 + i for i in range(SHOWN + 6))
    assert view.first == "2026-01-01T00:00:00Z"
    assert [w["key"] for w in view.latest] == [f"k{i}" for i in reversed(range(6, SHOWN + 6))]
    assert summed({**listing, "windows": []}).first is None
