"""``httpbus project|topic|sub`` against a real control plane on the embedded backends,
served over HTTP in this process: what they print, ``--output json``, and for bad input a
non-zero exit code that says what went wrong and an error on one line."""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import pytest
from typer.testing import CliRunner

from cli import cli
from tests.support.cli import TOKEN, embedded_control_plane_url, httpbus, one_line_error


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with embedded_control_plane_url(tmp_path_factory.mktemp("cp")) as base:
        yield base


def test_project_create_list_and_a_duplicate(url: str) -> None:
    r = httpbus(url, "project", "create", "shop", "--description", "the shop")
    assert r.exit_code == 0 and "created project shop" in r.stdout
    r = httpbus(url, "project", "list", "--output", "json")
    assert r.exit_code == 0 and "shop" in [p["name"] for p in json.loads(r.stdout)["items"]]
    assert "shop" in httpbus(url, "project", "list").stdout
    one_line_error(httpbus(url, "project", "create", "shop"), 4, "409 already_exists")
    one_line_error(httpbus(url, "project", "create", "bad name!"), 1, "422", "name")


def test_topic_create_list_show(url: str) -> None:
    httpbus(url, "project", "create", "t1")
    r = httpbus(url, "topic", "create", "t1", "orders", "--partitions", "3", "--grouped")
    assert (
        r.exit_code == 0
        and "created topic t1/orders on embedded (embedded), 3 partition(s)" in r.stdout
    )
    r = httpbus(url, "topic", "list", "t1", "-o", "json")
    [topic] = json.loads(r.stdout)["items"]
    assert topic["name"] == "orders" and topic["grouped"] is True
    listed = httpbus(url, "topic", "list", "t1").stdout
    assert "orders" in listed and "embedded ×3" in listed and "1–1 of 1" in listed
    shown = httpbus(url, "topic", "show", "t1", "orders")
    assert (
        shown.exit_code == 0
        and "active ◀ produce" in shown.stdout
        and "[1 embedded×3]" in shown.stdout
    )
    timeline = json.loads(httpbus(url, "topic", "show", "t1", "orders", "-o", "json").stdout)
    assert [s["id"] for s in timeline["segments"]] == [1]


def test_topic_bad_input(url: str) -> None:
    httpbus(url, "project", "create", "t2")
    one_line_error(httpbus(url, "topic", "show", "t2", "nope"), 3, "404 not_found")
    one_line_error(httpbus(url, "topic", "list", "nope"), 3, "404")
    one_line_error(
        httpbus(url, "topic", "create", "t2", "x", "--cluster", "mars"),
        1,
        "unknown storage cluster",
    )
    bad_flag = httpbus(url, "topic", "create", "t2", "x", "--bogus")
    assert bad_flag.exit_code == 2 and "No such option" in bad_flag.stderr
    bad_value = httpbus(url, "topic", "create", "t2", "x", "--partitions", "0")
    assert bad_value.exit_code == 2 and "--partitions" in bad_value.stderr
    assert json.loads(httpbus(url, "topic", "list", "t2", "-o", "json").stdout)["items"] == []


def test_sub_create_list_pause_resume(url: str) -> None:
    httpbus(url, "project", "create", "s")
    httpbus(url, "topic", "create", "s", "orders")
    r = httpbus(
        url,
        "sub",
        "create",
        "s",
        "s1",
        "--topic",
        "orders",
        "--endpoint",
        "http://127.0.0.1:9/hook",
        "--filter",
        'headers["x-region"] == "eu"',
        "--max-attempts",
        "4",
        "--backoff",
        "fixed",
        "--max-in-flight",
        "5",
    )
    assert r.exit_code == 0, r.stderr
    headers = {"Authorization": f"Bearer {TOKEN}"}
    sub = httpx.get(f"{url}/v1/projects/s/subscriptions/s1", headers=headers).json()
    assert (sub["retry"]["max_attempts"], sub["retry"]["backoff"], sub["max_in_flight"]) == (
        4,
        "fixed",
        5,
    )
    listed = httpbus(url, "sub", "list", "s")
    assert "s1" in listed.stdout and "s/orders" in listed.stdout
    assert httpbus(url, "sub", "pause", "s", "s1").stdout.strip() == "s/s1 paused"
    assert (
        httpx.get(f"{url}/v1/projects/s/subscriptions/s1", headers=headers).json()["paused"] is True
    )
    assert httpbus(url, "sub", "resume", "s", "s1").stdout.strip() == "s/s1 running"
    assert (
        httpx.get(f"{url}/v1/projects/s/subscriptions/s1", headers=headers).json()["paused"]
        is False
    )


def test_sub_bad_input(url: str) -> None:
    httpbus(url, "project", "create", "b")
    httpbus(url, "topic", "create", "b", "orders")
    base = ["sub", "create", "b", "s1", "--endpoint", "http://127.0.0.1:9/hook"]
    one_line_error(httpbus(url, *base, "--topic", "nope"), 1, "422", "topic: b/nope does not exist")
    one_line_error(
        httpbus(url, *base, "--topic", "orders", "--filter", 'headers["x"] =='),
        1,
        "filter",
        "column 16",
    )
    one_line_error(httpbus(url, *base[:-1], "ftp://x", "--topic", "orders"), 1, "endpoint")
    one_line_error(httpbus(url, "sub", "pause", "b", "nope"), 3, "404")
    assert httpbus(url, *base, "--topic", "orders", "--backoff", "random").exit_code == 2
    one_line_error(httpbus(url, "sub", "seek", "b", "s1"), 2, "exactly one")
    one_line_error(
        httpbus(url, "sub", "seek", "b", "s1", "--timestamp", "yesterday"), 2, "RFC 3339"
    )
    assert json.loads(httpbus(url, "sub", "list", "b", "-o", "json").stdout)["items"] == []


def test_connection_and_token_problems(url: str) -> None:
    one_line_error(httpbus(url, "project", "list", token=""), 2, "no admin token")
    one_line_error(httpbus(url, "project", "list", token="wrong-token"), 1, "401")
    one_line_error(httpbus("http://127.0.0.1:9", "project", "list"), 6, "cannot reach")


def test_produce_bad_input_exits_2_or_1_with_one_line() -> None:
    env = {"HTTPBUS_TOKEN": "", "HTTPBUS_PRODUCER_URL": "http://127.0.0.1:9"}
    runner = CliRunner()
    r = runner.invoke(cli, ["produce", "shop", "orders", "--count", "1"], env=env)
    one_line_error(r, 2, "no token")
    r = runner.invoke(cli, ["produce", "shop", "orders", "--token", "t"], env=env)
    one_line_error(r, 2, "--file")
    r = runner.invoke(cli, ["produce", "shop", "orders", "--token", "t", "--count", "1"], env=env)
    one_line_error(r, 1, "cannot reach the producer")
    r = runner.invoke(cli, ["produce", "shop", "orders", "--nope"], env=env)
    assert r.exit_code == 2
