"""The command kit: what every ``httpbus`` command shares, so a resource's commands are
declarations.

An API command is a function that takes its own arguments and options and returns a
:class:`Call` — the request to make and how to show its answer. :func:`command` registers it
on a Typer app, adds the connection options (``--url``, ``--token``) and ``--output``, asks
the confirmation a :class:`Call` names, runs the request through
:class:`control_plane.client.AdminClient`, maps an API error to one line and its exit code,
and prints the answer as text or JSON::

    @command(app)
    def status(project: Project, name: Subscription) -> Call:
        \"\"\"Lag, in-flight, rates, totals and circuit state of a subscription.\"\"\"
        return get(subs(project, name, "status"), text=print_status)

The constructors name the usual shapes: :func:`get`, :func:`post`, :func:`put`,
:func:`listing` (a table a page at a time, or all at once), :func:`update` (read, change,
compare-and-set, print what changed) and :func:`removal` (ask, delete, say so).

Every command registered here is an API client that
``tests/unit/cli/test_cli_walks_api.py`` runs against a recording client: give a new command
(or a flag that sends a new field) a line in its ``EXAMPLES``, and the test proves that the
CLI still reaches every operation of the API and every field they take (docs/cli.md).

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
5     not available: this control plane does not serve that API (yet), or this
      installation lacks what the command needs (Spark: the ``httpbus[spark]`` extra)
6     the control plane cannot be reached, timed out or failed (5xx)
7     the operation ended unsuccessfully (a cutover aborted or rolled back)
====  ==========================================================================
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import importlib
import inspect
import json
import re
import shlex
import sys
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar, get_type_hints

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, ProgressColumn, TextColumn
from rich.table import Table

from control_plane.client import JSON, AdminClient, ApiError, NotAvailable, Unreachable

T = TypeVar("T")

EXIT_OK = 0
EXIT_REFUSED = 1
EXIT_USAGE = 2
EXIT_NOT_FOUND = 3
EXIT_CONFLICT = 4
EXIT_NOT_AVAILABLE = 5
EXIT_UNREACHABLE = 6
EXIT_FAILED = 7


# ------------------------------------------------------------------ arguments and options

Project = Annotated[str, typer.Argument(help="Project name.")]
Topic = Annotated[str, typer.Argument(help="Topic name.")]
Subscription = Annotated[str, typer.Argument(help="Subscription name.")]
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
Offset = Annotated[
    int | None,
    typer.Option(min=0, help="Deprecated (use --cursor): skip this many.", hidden=True),
]
Limit = Annotated[int, typer.Option(min=1, max=500, help="Page size.")]
Search = Annotated[
    str,
    typer.Option("--search", "-s", help="Only those whose name or description holds this text."),
]
Cursor = Annotated[
    str | None, typer.Option(help="Start at this page (the cursor printed under a page).")
]
Every = Annotated[
    bool, typer.Option("--all", help="Every page, one after the other (--limit: page size).")
]
Timeout = Annotated[float, typer.Option(min=1, help="Seconds to follow before giving up.")]
Interval = Annotated[float, typer.Option(min=0.05, help="Seconds between polls.")]


def config_file(help: str) -> Any:
    """The ``--config`` option (also ``HTTPBUS_CONFIG``): an existing file, described by
    ``help``. Optional as :data:`ConfigOption`; required as
    ``Annotated[Path, config_file("The deployment file …")]``."""
    return typer.Option("--config", envvar="HTTPBUS_CONFIG", help=help, exists=True, dir_okay=False)


ConfigOption = Annotated[Path | None, config_file("YAML or TOML settings file.")]
Master = Annotated[str | None, typer.Option(help="Spark master (default: settings).")]
DEFAULT_URL = "http://127.0.0.1:8700"

console = Console(highlight=False, soft_wrap=True)

# ------------------------------------------------------------------ errors and questions


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


def require_spark() -> None:
    """Stop with exit 5 and how to get Spark unless pyspark can be imported (it is the
    optional ``httpbus[spark]`` extra). The Spark commands call it before any work."""
    try:
        importlib.import_module("pyspark")
    except ImportError:
        message = "this command runs Spark: pip install 'httpbus[spark]'"
        raise fail(message, EXIT_NOT_AVAILABLE) from None


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


# ------------------------------------------------------------------ output


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


def paged_footer(page: dict[str, Any], again: str = "", search: str = "") -> str:
    """``1–20 of 57`` under a page of a list (``N matching`` with a search), and the
    command of the next page when there is one."""
    shown = len(page.get("items", []))
    start = int(page.get("offset", 0))
    total = page.get("total", shown)
    if search:
        said = f"{shown} matching {search!r} on this page ({total} in all)"
    elif shown:
        said = f"{start + 1}–{start + shown} of {total}"
    else:
        said = f"none (total {total})"
    cursor = page.get("next_cursor")
    if cursor and again:
        more = f" --search {shlex.quote(search)}" if search else ""
        limit = page.get("limit")
        size = f" --limit {limit}" if limit and limit != 100 else ""
        said += f"\nnext page: {again}{more}{size} --cursor {cursor}"
    return said


def progress(label: str, output: str, *more: ProgressColumn) -> Progress:
    """A progress bar on stderr (stdout stays the command's output): ``label``, the bar,
    done of total, then ``more`` columns. Shown only on a terminal and never with
    ``--output json``; the long operations (``--all`` pages, batches, resends, replays)
    show it while they work."""
    err = Console(stderr=True)
    return Progress(
        TextColumn(label),
        BarColumn(),
        MofNCompleteColumn(),
        *more,
        console=err,
        disable=output == "json" or not err.is_terminal,
    )


def shown_once(what: str, created: dict[str, Any]) -> str:
    """``created …`` and the token, which the API shows this once (only its hash is kept)."""
    return f"created {what}\ntoken (shown this once): {created['token']}"


def rfc3339(value: str, option: str, also: str = "") -> str:
    """``value`` as given if it is an RFC 3339 time; else a usage error naming ``option``."""
    try:
        datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise fail(f"{option} {value!r} is not an RFC 3339 time{also}", EXIT_USAGE) from None
    return value


_UNITS = {"ms": 1, "s": 1_000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def duration_ms(text: str) -> int:
    """``90s``, ``15m``, ``2h``, ``1d``, ``500ms`` or plain seconds."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*", text)
    if match is None:
        raise typer.BadParameter(f"{text!r}: a duration such as 90s, 15m, 2h or 1d")
    return int(float(match[1]) * _UNITS[match[2] or "s"])


def instant_ms(text: str, now_ms: int) -> int:
    """An RFC 3339 time, or a duration meaning that long ago."""
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return now_ms - duration_ms(text)
    if moment.tzinfo is None:
        raise typer.BadParameter(f"{text!r}: give a time zone (Z or +hh:mm)")
    return int(moment.timestamp() * 1000)


# ------------------------------------------------------------------ calls


def _same(value: Any) -> Any:
    return value


Work = Callable[[AdminClient], Awaitable[Any]]
Text = Callable[[Any], str | None]


@dataclass(frozen=True)
class Call:
    """What an API command does once its arguments are checked.

    ``work`` runs with the client; its answer is printed by ``text`` for people (a line it
    returns is echoed; it may print itself and return None) or as ``json(answer)`` with
    ``--output json`` (None: nothing). ``ask`` is asked first unless ``yes``; ``then``
    looks at the answer after it is printed (e.g. exit 7 when a followed cutover failed);
    with ``until_interrupted`` Ctrl-C ends the command with exit 0."""

    work: Work
    text: Text | None = None
    json: Callable[[Any], Any] | None = _same
    ask: str | None = None
    yes: bool = False
    then: Callable[[Any], None] | None = None
    until_interrupted: bool = False

    def perform(self, url: str, token: str, output: str) -> None:
        if self.ask is not None:
            confirm(self.ask, self.yes)
        try:
            answer = run(url, token, self.work)
        except KeyboardInterrupt:
            if self.until_interrupted:
                raise typer.Exit(EXIT_OK) from None
            raise
        if output == "json":
            if self.json is not None:
                emit_json(self.json(answer))
        elif self.text is not None and (line := self.text(answer)) is not None:
            typer.echo(line)
        if self.then is not None:
            self.then(answer)


def get(where: str, params: dict[str, Any] | None = None, *, text: Text | None = None) -> Call:
    """GET ``where``; the answer shown by ``text`` (or as JSON)."""
    return Call(lambda api: api.get(where, params), text)


def post(where: str, body: JSON = None, *, text: Text | None = None) -> Call:
    return Call(lambda api: api.post(where, body), text)


def put(where: str, body: JSON, *, text: Text | None = None) -> Call:
    return Call(lambda api: api.put(where, body), text)


@dataclass(frozen=True)
class Columns:
    """How a list prints as a table: a title, the column names, a row of each item."""

    title: str | None
    names: Sequence[str]
    row: Callable[[dict[str, Any]], Sequence[Any]]

    def print(self, items: list[dict[str, Any]]) -> None:
        table(self.title, self.names, [self.row(item) for item in items])


@dataclass(frozen=True)
class Paging:
    """What a list command asks: a search, the page size, where to start, every page.

    An option group (see :func:`command`): a list command that declares ``page: Paging``
    takes ``--search``, ``--limit``, ``--cursor``, ``--all`` (and the hidden, deprecated
    ``--offset``) in its place."""

    search: Search = ""
    limit: Limit = 100
    cursor: Cursor = None
    every: Every = False
    offset: Offset = None

    @property
    def params(self) -> dict[str, Any]:
        return {"q": self.search, "cursor": self.cursor, "offset": self.offset, "limit": self.limit}


def listing(
    where: str,
    columns: Columns,
    *,
    page: Paging | None = None,
    params: dict[str, Any] | None = None,
    counted: str = "",
    again: str = "",
    output: str = "text",
) -> Call:
    """A list as a table. With ``page``: one page of ``items`` and under it the range and
    the command of the next page (``again`` and its ``--cursor``), or with ``page.every``
    every page walked by cursor, a progress bar on stderr, and ``N {counted}(s)`` under
    the whole table. Without ``page``: the whole list (the route is not paged)."""
    if page is not None and page.every:
        return _every_page(where, columns, page, counted, output, params)
    if page is not None:

        def paged(found: dict[str, Any] | list[dict[str, Any]]) -> str:
            if isinstance(found, list):  # a control plane from before this route paged
                columns.print(found)
                return f"{len(found)} {counted}(s)"
            columns.print(found["items"])
            return paged_footer(found, again, page.search)

        return get(where, {**(params or {}), **page.params}, text=paged)

    def whole(found: list[dict[str, Any]]) -> str:
        columns.print(found)
        return f"{len(found)} {counted}(s)"

    return get(where, params, text=whole)


def _every_page(
    where: str,
    columns: Columns,
    page: Paging,
    counted: str,
    output: str,
    params: dict[str, Any] | None = None,
) -> Call:

    async def work(api: AdminClient) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = []
        with progress(f"listing {counted}s", output) as bar:
            task = bar.add_task("listing", total=None)
            async for found in api.pages(where, {**(params or {}), **page.params}):
                items.extend(found["items"])
                total = None if page.search else int(found.get("total", 0))
                bar.update(task, completed=len(items), total=total)
        return items

    def whole(items: list[dict[str, Any]]) -> str:
        columns.print(items)
        return f"{len(items)} {counted}(s)"

    return Call(work, text=whole)


def update(
    where: str,
    body: Callable[[dict[str, Any]], dict[str, Any]],
    *,
    fields: Callable[[dict[str, Any]], dict[str, Any]],
    said: str,
) -> Call:
    """Read ``where``, PUT ``body(current)`` (which carries the version just read: a
    compare-and-set, exit 4 if it changed meanwhile), and say ``said: field old → new, …``
    over ``fields`` of before and after. JSON: the resource after."""

    async def work(api: AdminClient) -> tuple[Any, Any]:
        current = await api.get(where)
        return current, await api.put(where, body(current))

    def text(both: tuple[Any, Any]) -> str:
        done = changes(fields(both[0]), fields(both[1]))
        return f"{said}: {', '.join(done) or 'no change'}"

    return Call(work, text, json=lambda both: both[1])


def removal(
    where: str,
    *,
    ask: str,
    yes: bool,
    said: str,
    record: dict[str, Any] | None = None,
    params: Any = None,
) -> Call:
    """Ask ``ask`` (unless ``--yes``), DELETE ``where``, say ``said`` (JSON: ``record``)."""
    return Call(
        lambda api: api.delete(where, params),
        text=lambda _: said,
        json=None if record is None else lambda _: record,
        ask=ask,
        yes=yes,
    )


# ------------------------------------------------------------------ registering commands

KIT_MARK = "httpbus_kit_command"


def is_kit_command(callback: Any) -> bool:
    """Whether a Click command's ``callback`` was registered by :func:`command`: a client of
    the control plane's API, whose requests all go through :func:`run`'s
    :class:`AdminClient` (``tests/unit/cli/test_cli_walks_api.py`` records them)."""
    return bool(getattr(callback, KIT_MARK, False))


_CONNECTION = {
    "url": (Url, DEFAULT_URL),
    "token": (Token, ""),
    "output": (Output, "text"),
}


def command(
    app: typer.Typer, name: str | None = None, *, output: bool = True
) -> Callable[[Callable[..., Call]], Callable[..., Call]]:
    """Register a function that returns a :class:`Call` as the command ``name`` of ``app``.

    The command takes the function's own parameters, then ``--url``, ``--token`` and (unless
    ``output=False``) ``--output``; a function that declares ``output`` itself receives it
    (to print while it works, as ``topic migrate`` does).

    A parameter annotated with a dataclass is an *option group*: the command takes the
    dataclass's fields in its place (each an ``Annotated`` Typer option, with its default)
    and the function receives them as one value. :class:`Paging` is the list commands'
    group::

        @command(app, "list")
        def list_(project: Project, page: Paging, output: Output = "text") -> Call: ..."""

    def register(declare: Callable[..., Call]) -> Callable[..., Call]:
        app.command(name)(_cli_command(declare, output))
        return declare

    return register


def default_command(app: typer.Typer) -> Callable[[Callable[..., Call]], Callable[..., Call]]:
    """Register a function that returns a :class:`Call` as what the group ``app`` does when
    no subcommand is named (``httpbus catalog`` lists, ``httpbus catalog show`` is a
    subcommand); its options come before a subcommand's name."""

    def register(declare: Callable[..., Call]) -> Callable[..., Call]:
        run_it = _cli_command(declare, True)
        signature = inspect.signature(run_it)
        ctx = inspect.Parameter("ctx", inspect.Parameter.POSITIONAL_OR_KEYWORD)

        @functools.wraps(run_it)
        def callback(ctx: typer.Context, **given: Any) -> None:
            if ctx.invoked_subcommand is None:
                run_it(**given)

        params = [ctx.replace(annotation=typer.Context), *signature.parameters.values()]
        callback.__signature__ = signature.replace(parameters=params)  # type: ignore[attr-defined]
        callback.__annotations__ = {p.name: p.annotation for p in params}
        app.callback(invoke_without_command=True)(callback)
        return declare

    return register


def _option_group(parameter: inspect.Parameter) -> type | None:
    """The dataclass a parameter is annotated with (an option group), or None."""
    kind = parameter.annotation
    return kind if isinstance(kind, type) and dataclasses.is_dataclass(kind) else None


def _group_options(group: type) -> list[inspect.Parameter]:
    """An option group's fields as the command's parameters, in their order: each field's
    annotation (an ``Annotated`` Typer argument or option) and default."""
    hints = get_type_hints(group, include_extras=True)
    return [
        inspect.Parameter(
            field.name,
            inspect.Parameter.KEYWORD_ONLY,
            default=inspect.Parameter.empty
            if field.default is dataclasses.MISSING
            else field.default,
            annotation=hints[field.name],
        )
        for field in dataclasses.fields(group)
    ]


def _cli_command(declare: Callable[..., Call], output: bool) -> Callable[..., None]:
    """``declare`` as a Typer command function: its own parameters (an option group
    expanded into its options), then the connection options, running the :class:`Call` it
    returns."""
    signature = inspect.signature(declare, eval_str=True)
    own = signature.parameters
    keyword = inspect.Parameter.KEYWORD_ONLY
    connection = [
        own[key].replace(kind=keyword)
        if key in own
        else inspect.Parameter(key, keyword, default=default, annotation=kind)
        for key, (kind, default) in _CONNECTION.items()
        if key in own or output or key != "output"
    ]
    groups = {p.name: group for p in own.values() if (group := _option_group(p)) is not None}
    parameters = [
        option
        for p in own.values()
        if p.name not in _CONNECTION
        for option in (_group_options(groups[p.name]) if p.name in groups else [p])
    ]
    parameters = [p.replace(kind=keyword) for p in parameters] + connection

    @functools.wraps(declare)
    def cli_command(**given: Any) -> None:
        url, token = given.pop("url"), given.pop("token")
        shown = given["output"] if "output" in own else given.pop("output", "text")
        for name, group in groups.items():
            fields = [field.name for field in dataclasses.fields(group)]
            given[name] = group(**{field: given.pop(field) for field in fields})
        declare(**given).perform(url, token, shown)

    cli_command.__signature__ = signature.replace(  # type: ignore[attr-defined]
        parameters=parameters, return_annotation=None
    )
    cli_command.__annotations__ = {p.name: p.annotation for p in parameters}
    setattr(cli_command, KIT_MARK, True)  # copied onto Typer's wrapper (update_wrapper)
    return cli_command
