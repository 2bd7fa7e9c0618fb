"""Running the ``httpbus`` CLI in the test process (typer's runner) against a control plane's
URL, and checking what it printed."""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from typer.testing import CliRunner, Result

from cli import cli
from control_plane.app import create_app
from control_plane.settings import ControlPlaneSettings
from metastore.config import EmbeddedMetaStoreConfig
from segments.config import EmbeddedClusterConfig
from tests.support.contract_api import served

TOKEN = "test-admin-token-0123456789"


@contextmanager
def embedded_control_plane_url(data: Path, **more: Any) -> Iterator[str]:
    """A control plane on the embedded backends in ``data``, served over HTTP: its URL.
    ``more`` are further settings of it (``database_url=…`` for users, grants, reports)."""
    settings = ControlPlaneSettings(
        admin_token=TOKEN,
        metastore=EmbeddedMetaStoreConfig(path=str(data / "meta.db")),
        clusters={"embedded": EmbeddedClusterConfig(path=str(data / "segments.db"))},
        **more,
    )
    with served(create_app(settings)) as base:
        yield base


@contextmanager
def shop_control_plane_url(data: Path, **more: Any) -> Iterator[str]:
    """:func:`embedded_control_plane_url` once project ``shop`` and its topic ``orders`` exist."""
    with embedded_control_plane_url(data, **more) as url:
        ok(httpbus(url, "project", "create", "shop"))
        ok(httpbus(url, "topic", "create", "shop", "orders"))
        yield url


def httpbus(url: str, *args: str, token: str = TOKEN, input: str | None = None) -> Result:
    """``httpbus *args`` against the control plane at ``url``, as an admin with ``token``."""
    env = {"HTTPBUS_URL": url, "HTTPBUS_ADMIN_TOKEN": token, "HTTPBUS_TOKEN": "", "COLUMNS": "200"}
    return CliRunner().invoke(cli, list(args), env=env, input=input)


def ok(result: Result) -> str:
    """The output of a command that must succeed."""
    assert result.exit_code == 0, (result.exit_code, result.stdout, result.stderr)
    return result.stdout


def next_command(text: str) -> list[str]:
    """The arguments of the ``next page:`` line under a page."""
    found = re.search(r"^next page: httpbus (.+)$", text, re.MULTILINE)
    assert found, text
    return shlex.split(found.group(1))


def pages(url: str, *args: str) -> list[str]:
    """Every page a list command prints, following each page's ``next page:`` command."""
    found = [ok(httpbus(url, *args))]
    while "next page:" in found[-1]:
        found.append(ok(httpbus(url, *next_command(found[-1]))))
    return found


def as_json(result: Result) -> Any:
    return json.loads(ok(result))


def one_line_error(result: Result, code: int, *words: str) -> str:
    """A command that fails with exit ``code`` and an error on one line naming ``words``."""
    assert result.exit_code == code, (result.exit_code, result.stdout, result.stderr)
    text = result.stderr.strip()
    assert text.startswith("error: ") and "\n" not in text, text
    for word in words:
        assert word in text, text
    return text


def declined(result: Result, question: str) -> None:
    """A command that asked ``question`` on stderr, was answered no, and exited 1 having
    printed nothing on stdout."""
    assert result.exit_code == 1, (result.exit_code, result.stdout, result.stderr)
    assert question in result.stderr, result.stderr
    assert result.stderr.endswith("error: not confirmed; nothing changed\n"), result.stderr
    assert answered(result) == "", result.stdout


def answered(result: Result) -> str:
    """The stdout of a command that asked a question, without the runner's echo of the
    answer (a terminal echoes it to the screen; typer's runner writes it to stdout)."""
    first, _, rest = result.stdout.partition("\n")
    assert first.strip() in ("", "y", "n"), result.stdout
    return rest
