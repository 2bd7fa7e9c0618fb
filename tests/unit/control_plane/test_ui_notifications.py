"""The project's operational events in the web UI (the topics page of a project): what is
sent now, and the form that changes it through ``PUT /v1/projects/{p}``; a value the API
refuses comes back as the API's message, never a 500."""

from __future__ import annotations

from pathlib import Path

from tests.support.control_plane import AUTH, create_shop, embedded_control_plane
from tests.support.ui_pages import csrf, hidden, login

PAGE = "/ui/projects/shop/topics"


async def test_the_notifications_form(tmp_path: Path) -> None:
    async with embedded_control_plane(tmp_path, admin=False, base_url="http://testserver") as cp:
        ui = cp.client
        await create_shop(ui, headers=AUTH)
        await login(ui)
        page = await ui.get(PAGE)
        assert page.status_code == 200
        assert (
            "no URL yet</p>" not in page.text
            and "no URL yet: disabled · failing after 300 s" in page.text
        )
        token = await csrf(ui, PAGE)
        form = {
            "csrf": token,
            "version": hidden(page.text, "version"),
            "notification_url": "https://hooks.example/ops",
            "events": ["subscription.failing", "subscription.circuit_opened", "bogus"],
            "failing_after_s": "120",
            "interval_s": "60",
        }
        r = await ui.post(
            f"{PAGE.rsplit('/', 1)[0]}/notifications", data=form, follow_redirects=True
        )
        assert r.status_code == 200 and "notifications saved: circuit_opened, failing" in r.text
        project = (await ui.get("/v1/projects/shop", headers=AUTH)).json()
        assert project["notification_url"] == "https://hooks.example/ops"
        assert project["notifications"] == {
            "events": ["subscription.circuit_opened", "subscription.failing"],
            "failing_after_s": 120,
            "interval_s": 60,
        }
        assert "failing after 120 s" in r.text and 'value="subscription.failing" checked' in r.text
        version = hidden(r.text, "version")
        refused = {**form, "interval_s": "5", "version": version}  # below the least, 10 s
        r = await ui.post("/ui/projects/shop/notifications", data=refused, follow_redirects=True)
        assert r.status_code == 200 and "notifications not saved" in r.text and "interval" in r.text
