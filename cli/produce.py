"""``httpbus produce``: publish a file, standard input, or N generated messages."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import httpx
import typer
from rich.progress import Progress

from cli.kit import EXIT_REFUSED, EXIT_USAGE, fail

Url = Annotated[str, typer.Option(envvar="HTTPBUS_PRODUCER_URL", help="Producer service URL.")]
Token = Annotated[str, typer.Option(envvar="HTTPBUS_TOKEN", help="Produce or admin token.")]


def _headers(
    token: str, group: str | None, pairs: list[str], content_type: str | None
) -> dict[str, str]:
    headers = {"Authorization": f"Bearer {token}"}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name.lower().startswith("x-"):
            raise fail(f"--header takes X-Name=value, not {pair!r}", EXIT_USAGE)
        headers[name] = value
    if group:
        headers["X-Group-Id"] = group
    if content_type:
        headers["Content-Type"] = content_type
    return headers


def _check(response: httpx.Response) -> dict[str, object]:
    if response.status_code >= 400:
        try:
            body = response.json()
            message = f"{body['code']}: {body['message']}"
        except (ValueError, KeyError):
            message = response.text[:200]
        raise fail(f"{response.status_code} {message}", EXIT_REFUSED)
    result: dict[str, object] = response.json()
    return result


def produce(
    project: Annotated[str, typer.Argument(help="Project name.")],
    topic: Annotated[str, typer.Argument(help="Topic name.")],
    file: Annotated[
        str | None, typer.Option("--file", "-f", help="Payload file, or - for standard input.")
    ] = None,
    count: Annotated[
        int, typer.Option(min=0, max=10_000_000, help="Publish N generated messages instead.")
    ] = 0,
    size: Annotated[
        int, typer.Option(min=1, max=10 * 1024 * 1024, help="Bytes per generated message.")
    ] = 100,
    batch: Annotated[
        int, typer.Option(min=1, max=1000, help="Generated messages per request.")
    ] = 100,
    group: Annotated[str | None, typer.Option(help="X-Group-Id of the messages.")] = None,
    header: Annotated[list[str] | None, typer.Option(help="X-Name=value, repeatable.")] = None,
    content_type: Annotated[str | None, typer.Option(help="Content type.")] = None,
    url: Url = "http://127.0.0.1:8701",
    token: Token = "",
    output: Annotated[str, typer.Option(help="text or json")] = "text",
) -> None:
    """Publish a message (from --file or stdin) or --count generated ones."""
    if (file is None) == (count == 0):
        raise fail("give --file PATH (or --file - for stdin) or --count N", EXIT_USAGE)
    if not token:
        raise fail("no token: pass --token or set HTTPBUS_TOKEN", EXIT_USAGE)
    headers = _headers(token, group, header or [], content_type)
    path = f"/v1/projects/{project}/topics/{topic}/produce"
    try:
        with httpx.Client(base_url=url, timeout=30) as client:
            if file is not None:
                data = sys.stdin.buffer.read() if file == "-" else Path(file).read_bytes()
                result = _check(client.post(path, content=data, headers=headers))
                typer.echo(json.dumps(result) if output == "json" else result["message_id"])
                return
            _generated(client, path, headers, count, size, batch, output)
    except httpx.HTTPError as exc:
        raise fail(f"cannot reach the producer at {url}: {exc}", EXIT_REFUSED) from None
    except OSError as exc:
        raise fail(str(exc), EXIT_REFUSED) from None


def _generated(
    client: httpx.Client,
    path: str,
    headers: dict[str, str],
    count: int,
    size: int,
    batch: int,
    output: str,
) -> None:
    carried = {k: v for k, v in headers.items() if k.lower().startswith("x-")}
    auth = {k: v for k, v in headers.items() if not k.lower().startswith("x-")}
    accepted = 0
    with Progress(disable=output == "json" or not sys.stderr.isatty()) as progress:
        task = progress.add_task("publishing", total=count)
        for start in range(0, count, batch):
            n = min(batch, count - start)
            messages = [
                {"payload": f"message {start + i} ".ljust(size, ".")[:size], "headers": carried}
                for i in range(n)
            ]
            result = _check(client.post(f"{path}/batch", json={"messages": messages}, headers=auth))
            accepted += int(str(result["accepted"]))
            if result["failed"]:
                failed = f"{result['failed']} of a batch failed: {json.dumps(result)[:300]}"
                raise fail(failed, EXIT_REFUSED)
            progress.advance(task, n)
    summary = {"accepted": accepted}
    typer.echo(json.dumps(summary) if output == "json" else f"published {accepted} messages")
