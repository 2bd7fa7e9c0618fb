"""``httpbus catalog``: the topics you may subscribe to or ask a grant for, across projects
(docs/catalog.md); ``--search`` finds them by name, description or owner; ``catalog show
P/T`` prints one topic's card with its schema and example."""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer

from cli.kit import Call, Columns, command, default_command, get
from control_plane.client import path

app = typer.Typer(
    help="The topic catalog: find topics across projects, then ask for a grant "
    "(`httpbus topic grant-request create`).",
)

TopicRef = Annotated[
    str, typer.Argument(help="The topic as PROJECT/TOPIC.", metavar="PROJECT/TOPIC")
]


def _who_may(entry: dict[str, Any]) -> str:
    if entry["subscribe_as"]:
        return "subscribe as " + ", ".join(entry["subscribe_as"])
    if entry["pending_requests"]:
        return "requested by " + ", ".join(entry["pending_requests"])
    if entry["request_as"]:
        return "may ask as " + ", ".join(entry["request_as"])
    return str(entry["access"])


def _schema_line(schema: dict[str, Any] | None) -> str:
    return f"v{schema['version']} {schema['link']}" if schema else "none"


def _schema(entry: dict[str, Any]) -> str:
    schema = entry.get("schema")
    return f"v{schema['version']}" if schema else "-"


def _short(text: str, width: int = 48) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


COLUMNS = Columns(
    "topic catalog",
    ("topic", "access", "owners", "subscribers", "schema", "you", "description"),
    lambda e: (
        f"{e['project']}/{e['topic']}",
        e["access"],
        ", ".join(e["owners"]) or "-",
        e["subscribers"],
        _schema(e),
        _who_may(e),
        _short(e["description"]),
    ),
)


@default_command(app)
def catalog(
    search: Annotated[
        str, typer.Option("--search", "-s", help="Text in the name, description or owners.")
    ] = "",
    limit: Annotated[int, typer.Option(min=1, max=200, help="Topics a page.")] = 50,
    cursor: Annotated[str | None, typer.Option(help="Continue after this page.")] = None,
) -> Call:
    """List the topics of the catalog (a page; the next page's command is printed under)."""
    params: dict[str, Any] = {"limit": limit}
    if search:
        params["q"] = search
    if cursor:
        params["cursor"] = cursor

    def text(page: dict[str, Any]) -> str:
        COLUMNS.print(page["items"])
        shown = f"{len(page['items'])} topic(s)"
        if page["next_cursor"]:
            more = f" --search {json.dumps(search)}" if search else ""
            return f"{shown}; more: httpbus catalog{more} --cursor {page['next_cursor']}"
        return shown

    return get(path("v1", "catalog"), params, text=text)


def split_ref(ref: str) -> tuple[str, str]:
    project, slash, topic = ref.partition("/")
    if not slash or not project or not topic or "/" in topic:
        raise typer.BadParameter(f"{ref!r}: give the topic as PROJECT/TOPIC")
    return project, topic


@command(app)
def show(ref: TopicRef) -> Call:
    """One topic's card: owners, description, schema, example, subscribers, your access."""
    project, topic = split_ref(ref)

    def text(e: dict[str, Any]) -> str:
        schema = e.get("schema")
        lines = [
            f"{e['project']}/{e['topic']}",
            f"  description   {e['description'] or '-'}",
            f"  owners        {', '.join(e['owners']) or '-'}",
            f"  access        {e['access']} ({_who_may(e)})",
            f"  grouped       {'yes' if e['grouped'] else 'no'}",
            f"  subscribers   {e['subscribers']}",
            f"  schema        {_schema_line(schema)}",
        ]
        for r in e.get("your_requests", []):
            note = f": {r['note']}" if r["note"] else ""
            by = f" by {r['decided_by']}" if r.get("decided_by") else ""
            lines.append(f"  your request  as {r['grantee']}: {r['state']}{by}{note}")
        if e.get("example") is not None:
            lines.append(f"  example       {json.dumps(e['example'])}")
        if schema and schema.get("document") is not None:
            lines.append("  schema document:")
            lines += [
                "    " + line for line in json.dumps(schema["document"], indent=2).split("\n")
            ]
        if e["request_as"]:
            lines.append(
                f"ask for it: httpbus topic grant-request create {project} {topic} "
                f"--project {e['request_as'][0]}"
            )
        return "\n".join(lines)

    return get(path("v1", "catalog", project, topic), text=text)
