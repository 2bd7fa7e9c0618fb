"""``httpbus project notify`` against a control plane on the embedded backends: which
operational events a project wants and their bounds, set and shown; the URL set and
removed; bad values are usage errors or the API's 422."""

from __future__ import annotations

from pathlib import Path

from tests.support.cli import as_json, httpbus, ok, one_line_error, shop_control_plane_url


def test_project_notify(tmp_path: Path) -> None:
    with shop_control_plane_url(tmp_path) as url:
        shown = as_json(httpbus(url, "project", "notify", "shop", "-o", "json"))
        assert shown["notifications"] == {
            "events": ["subscription.disabled"],
            "failing_after_s": 300,
            "interval_s": 300,
        }
        said = ok(
            httpbus(
                url,
                "project",
                "notify",
                "shop",
                "--event",
                "failing,circuit_opened",
                "--event",
                "subscription.dead_lettered",
                "--failing-after",
                "2m",
                "--interval",
                "30s",
            )  # fmt: skip
        )
        assert "failing_after_s 300 → 120" in said and "interval_s 300 → 30" in said
        project = as_json(httpbus(url, "project", "notify", "shop", "-o", "json"))
        assert project["notifications"]["events"] == [
            "subscription.circuit_opened",
            "subscription.dead_lettered",
            "subscription.failing",
        ]
        every = as_json(httpbus(url, "project", "notify", "shop", "--event", "all", "-o", "json"))
        assert len(every["notifications"]["events"]) == 7
        one_line_error(httpbus(url, "project", "notify", "shop", "--event", "nope"), 2, "nope")
        r = httpbus(url, "project", "notify", "shop", "--interval", "soon")
        assert r.exit_code == 2 and "soon" in r.stderr
        one_line_error(httpbus(url, "project", "notify", "shop", "--interval", "1s"), 1, "interval")
        said = ok(
            httpbus(url, "project", "notify", "shop", "--notification-url", "http://n.test/h")
        )
        assert 'notification_url none → "http://n.test/h"' in said
        r = httpbus(
            url,
            "project",
            "notify",
            "shop",
            "--notification-url",
            "https://x.example",
            "--no-notification-url",
        )
        assert r.exit_code == 2
        said = ok(httpbus(url, "project", "notify", "shop", "--no-notification-url"))
        assert 'notification_url "http://n.test/h" → none' in said
