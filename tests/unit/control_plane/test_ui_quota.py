"""The project page shows a usage bar per quota that is set."""

from __future__ import annotations

from pathlib import Path

from tests.support.control_plane import create_shop, embedded_control_plane
from tests.support.ui_pages import TOKEN, login

API = {"Authorization": f"Bearer {TOKEN}"}


async def test_the_project_page_shows_usage_against_each_quota(tmp_path: Path) -> None:
    async with embedded_control_plane(tmp_path, admin=False, base_url="http://testserver") as cp:
        browser = cp.client
        await create_shop(browser, headers=API)
        quota = {"max_topics": 4, "messages_per_second": 200}
        assert (await browser.put("/v1/projects/shop/quota", json=quota, headers=API)).is_success
        await login(browser)
        page = (await browser.get("/ui/projects/shop/topics")).text
        assert 'id="quota"' in page
        assert '<meter min="0" max="4" high="3.6" value="1"' in page  # topics: 1 of 4
        assert '<meter min="0" max="200.0"' in page  # messages/s
        assert page.count("<meter") == 2 and page.count("unlimited") == 2
