"""The migration page: the state, the windows as a stacked bar chart (matched / late /
missing per window, the missing ids in its tooltip and table) and the abandon button."""

from __future__ import annotations

from pathlib import Path

from core.migration import MigrationWindow
from core.model import SegmentState
from metastore.catalog import Catalog
from metastore.migrations import MigrationRecords
from tests.support.control_plane import create_shop, embedded_control_plane
from tests.support.migration_docs import migration, window
from tests.support.ui_pages import TOKEN, csrf, login
from tests.support.world import segment

API = {"Authorization": f"Bearer {TOKEN}"}
PAGE = "/ui/projects/shop/topics/orders/migration"


def _window(i: int, *, missing: list[str], late: int = 0, closed: bool = True) -> MigrationWindow:
    return window(1_000 * i, 1_000, matched=10, missing=missing, late=late, closed=closed)


async def test_the_page_draws_the_windows_and_abandons(tmp_path: Path) -> None:
    async with embedded_control_plane(tmp_path, admin=False, base_url="http://testserver") as cp:
        browser = cp.client
        await create_shop(browser, headers=API)
        await login(browser)
        empty = (await browser.get(PAGE)).text
        assert empty.count("has had no migration") == 1  # said once, not twice
        # The document as the API would have made it (the page does not care that this
        # topic's first segment is not external), with three checked windows.
        topic = await Catalog(cp.meta).get_topic("shop", "orders")
        shadow = segment(
            "embedded", 2, SegmentState.PENDING, storage="never-created", partitions=1
        ).model_copy(update={"dual_write": True})
        windows = (
            _window(0, missing=["lost-1", "lost-2"]),
            _window(1, missing=[], late=2),
            _window(2, missing=[], closed=False),
        )
        doc = migration(
            windows, cluster="embedded", partitions=1, clean_windows=3, legacy_start={0: 0}
        )
        await MigrationRecords(cp.meta).create(doc, shadow, topic)
        page = (await browser.get(PAGE)).text
        assert 'data-state="dual_write"' in page and ">0/3<" in page
        assert page.count('class="window dirty"') == 2 and page.count('class="window open"') == 1
        assert 'data-matched="10" data-late="0" data-missing="2"' in page
        assert 'data-matched="8" data-late="2" data-missing="0"' in page  # late ones apart
        assert "lost-1, lost-2" in page  # named in the tooltip and the table
        assert 'id="skipped"' not in page  # not switched
        records = MigrationRecords(cp.meta)
        await records.change("shop", "orders", {"switch_skipped": 3, "switch_duplicates": 0})
        page = (await browser.get(PAGE)).text
        assert "passes over 3 ids the legacy side delivered" in page
        assert 'id="duplicates"' not in page  # none delivered twice
        assert 'id="migration-link"' in (await browser.get("/ui/projects/shop/topics/orders")).text
        token = await csrf(browser, PAGE)
        assert 'id="abandon"' in page and "data-confirm=" in page and "onsubmit" not in page
        # Without the browser's question (no script), the server asks first.
        r = await browser.post(f"{PAGE}/abandon", data={"csrf": token})
        assert r.status_code == 200 and "Yes, abandon" in r.text
        assert 'data-state="dual_write"' in (await browser.get(PAGE)).text
        r = await browser.post(f"{PAGE}/abandon", data={"csrf": token, "confirm": "yes"})
        assert r.status_code == 303, r.text
        page = (await browser.get(PAGE)).text
        assert 'data-state="abandoned"' in page and "Abandon</button>" not in page
