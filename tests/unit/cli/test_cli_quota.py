"""``httpbus project quota get|set`` against a control plane on the embedded backends."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from tests.support.cli import embedded_control_plane_url, httpbus, one_line_error


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with embedded_control_plane_url(tmp_path_factory.mktemp("cp")) as base:
        yield base


def test_set_changes_only_the_limits_given_and_get_shows_usage(url: str) -> None:
    assert httpbus(url, "project", "create", "q").exit_code == 0
    r = httpbus(url, "project", "quota", "set", "q", "--messages-per-second", "100")
    assert r.exit_code == 0, r.stderr
    assert "messages_per_second none → 100.0" in r.stdout
    r = httpbus(url, "project", "quota", "set", "q", "--max-topics", "0", "-o", "json")
    assert r.exit_code == 0, r.stderr
    quota = json.loads(r.stdout)["quota"]
    assert (quota["messages_per_second"], quota["max_topics"]) == (100, 0)
    r = httpbus(url, "project", "quota", "get", "q")
    assert r.exit_code == 0 and "unlimited" in r.stdout and "topics" in r.stdout, r.stdout
    one_line_error(httpbus(url, "topic", "create", "q", "t"), 4, "409 quota_exceeded", "max_topics")
    r = httpbus(url, "project", "quota", "set", "q", "--unlimited", "max_topics", "-o", "json")
    assert json.loads(r.stdout)["quota"]["max_topics"] is None


def test_quota_errors_have_their_exit_codes(url: str) -> None:
    one_line_error(httpbus(url, "project", "quota", "set", "q"), 2, "nothing to change")
    one_line_error(httpbus(url, "project", "quota", "set", "q", "--unlimited", "x"), 2, "'x'")
    one_line_error(httpbus(url, "project", "quota", "get", "ghost"), 3, "404")
    r = httpbus(url, "project", "quota", "set", "ghost", "--max-topics", "1")
    one_line_error(r, 3, "404")
