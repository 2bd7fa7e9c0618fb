"""What every admin command shares: the connection options, ``--output``, exit codes and the
one-line error.

Exit codes (also in ``httpbus --help`` and the README):

====  ==========================================================================
0     done
1     the control plane refused the request (validation 422, 400, 401, 403, …), or you
      answered no to a confirmation
2     bad usage: unknown flag, bad value, missing argument (Click's convention); a delete
      without ``--yes`` when stdin is not a terminal; a password off a terminal without
      ``--password-stdin``
3     not found: the project, topic, subscription, token, user or cutover does not exist
4     conflict: already exists, stale version, a cutover already running or past COMMIT,
      in use (a delete refused while dependents exist) (409)
5     not available: this control plane does not serve that API (yet)
6     the control plane cannot be reached, timed out or failed (5xx)
7     the operation ended unsuccessfully (a cutover aborted or rolled back)
====  ==========================================================================
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Awaitable, Callable, Sequence
from typing import Annotated, Any, Literal, TypeVar

import typer
from rich.console import Console
from rich.table import Table

from control_plane.client import AdminClient, ApiError, NotAvailable, Unreachable

T = TypeVar("T")

EXIT_OK = 0
EXIT_REFUSED = 1
EXIT_USAGE = 2
EXIT_NOT_FOUND = 3
EXIT_CONFLICT = 4
EXIT_NOT_AVAILABLE = 5
EXIT_UNREACHABLE = 6
EXIT_FAILED = 7

EXIT_CODES_HELP = (
    "Exit codes: 0 done, 1 refused by the API or not confirmed, 2 bad usage (a delete off a "
    "terminal needs --yes), 3 not found, 4 conflict or in use, 5 not available on this "
    "control plane, 6 control plane unreachable or failing, 7 operation ended unsuccessfully."
)

Project = Annotated[str, typer.Argument(help="Project name.")]
Topic = Annotated[str, typer.Argument(help="Topic name.")]
Url = Annotated[
    str, typer.Option("--url", envvar="HTTPBUS_URL", help="Control plane URL.", show_default=True)
]
Token = Annotated[
    str,
    typer.Option(
        "--token",
        envvar=["HTTPBUS_ADMIN_TOKEN", "HTTPBUS_TOKEN"],
        help="Admin token, or an API token (hbk.…) acting with its roles.",
        show_default=False,
    ),
]
Output = Annotated[
    Literal["text", "json"],
    typer.Option("--output", "-o", help="text for people, json for scripts."),
]
Yes = Annotated[
    bool,
    typer.Option(
        "--yes", "-y", help="Do not ask for confirmation (required when stdin is not a terminal)."
    ),
]
Offset = Annotated[int, typer.Option(min=0, help="Skip this many.")]
Limit = Annotated[int, typer.Option(min=1, max=500, help="Page size.")]
DEFAULT_URL = "http://127.0.0.1:8700"

console = Console(highlight=False, soft_wrap=True)


def fail(message: str, code: int) -> typer.Exit:
    """Print ``error: message`` on one line of stderr; the exit to raise."""
    one_line = " ".join(message.split())
    typer.echo(f"error: {one_line}", err=True)
    return typer.Exit(code)


def stdin_is_terminal() -> bool:
    """Whether a person can answer a question (scripts and pipes cannot)."""
    return sys.stdin.isatty()


def confirm(question: str, yes: bool) -> None:
    """Ask ``question`` before a destructive step unless ``--yes``; never ask a script.

    Without a terminal on stdin the command does not read an answer from a pipe: it stops
    with a usage error (exit 2) that asks for ``--yes``. An answer of no exits 1. The
    question goes to stderr, so that stdout stays the command's output."""
    if yes:
        return
    if not stdin_is_terminal():
        raise fail(f"not confirmed ({question}): stdin is not a terminal, pass --yes", EXIT_USAGE)
    if not typer.confirm(question, default=False, err=True):  # stdout may be --output json
        raise fail("not confirmed; nothing changed", EXIT_REFUSED)


def changes(before: dict[str, Any], after: dict[str, Any], prefix: str = "") -> list[str]:
    """``field old → new`` for every leaf that differs (nested fields as ``a.b``)."""
    out: list[str] = []
    for key in sorted(set(before) | set(after)):
        old, new = before.get(key), after.get(key)
        if isinstance(old, dict) and isinstance(new, dict):
            out += changes(old, new, f"{prefix}{key}.")
        elif old != new:
            out.append(f"{prefix}{key} {_shown(old)} → {_shown(new)}")
    return out


def _shown(value: Any) -> str:
    return "none" if value is None else json.dumps(value) if isinstance(value, str) else str(value)


def exit_code(error: ApiError) -> int:
    """The exit code an API error means (see the module's table)."""
    if isinstance(error, NotAvailable):
        return EXIT_NOT_AVAILABLE
    if isinstance(error, Unreachable) or error.status >= 500:
        return EXIT_UNREACHABLE
    if error.status == 404:
        return EXIT_NOT_FOUND
    if error.status == 409:
        return EXIT_CONFLICT
    return EXIT_REFUSED


def run(url: str, token: str, work: Callable[[AdminClient], Awaitable[T]]) -> T:
    """Run ``work`` with a client; API errors end the command with one line and their code."""
    if not token:
        raise fail(
            "no admin token: pass --token or set HTTPBUS_ADMIN_TOKEN (or an API token in "
            "HTTPBUS_TOKEN)",
            EXIT_USAGE,
        )

    async def main() -> T:
        async with AdminClient(url, token) as api:
            return await work(api)

    try:
        return asyncio.run(main())
    except NotAvailable as exc:
        raise fail(
            f"not available on this control plane: {exc.message}", EXIT_NOT_AVAILABLE
        ) from None
    except ApiError as exc:
        text = (
            exc.message
            if isinstance(exc, Unreachable)
            else f"{exc.status} {exc.code}: {exc.message}"
        )
        raise fail(text, exit_code(exc)) from None


def emit_json(value: Any) -> None:
    typer.echo(json.dumps(value, indent=2, default=str))


def table(title: str | None, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    """A Rich table on stdout."""
    out = Table(title=title, show_lines=False)
    for column in columns:
        out.add_column(column)
    for row in rows:
        out.add_row(*("" if v is None else str(v) for v in row))
    console.print(out)


def paged_footer(page: dict[str, Any]) -> None:
    shown = len(page.get("items", []))
    start = int(page.get("offset", 0))
    if shown:
        typer.echo(f"{start + 1}–{start + shown} of {page.get('total', shown)}")
    else:
        typer.echo(f"none (total {page.get('total', 0)})")
