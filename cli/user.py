"""``httpbus user``: the users of the admin API and the UI — create, list, grant, revoke,
delete, set a password — and their API tokens (``httpbus user token create|list|revoke``).

Roles read ``admin``, ``owner:<project>`` or ``viewer:<project>``. A password is never an
argument (it would stay in the shell's history): it is asked on a terminal, or read from the
first line of stdin with ``--password-stdin``.
"""

from __future__ import annotations

import sys
from typing import Annotated, Any

import typer

from cli.common import (
    DEFAULT_URL,
    EXIT_USAGE,
    Output,
    Token,
    Url,
    Yes,
    confirm,
    emit_json,
    fail,
    run,
    stdin_is_terminal,
    table,
)
from control_plane.client import AdminClient, path

app = typer.Typer(help="Users and their roles and API tokens.", no_args_is_help=True)
tokens = typer.Typer(help="API tokens of users: create, list, revoke.", no_args_is_help=True)
app.add_typer(tokens, name="token")

UserName = Annotated[str, typer.Argument(help="User name.")]
Role = Annotated[str, typer.Argument(help="admin, owner:<project> or viewer:<project>.")]
Roles = Annotated[
    list[str] | None,
    typer.Option("--role", help="A role to hold (repeat): admin, owner:<p>, viewer:<p>."),
]
PasswordStdin = Annotated[
    bool, typer.Option("--password-stdin", help="Read the password from stdin's first line.")
]


def _password(from_stdin: bool) -> str:
    if from_stdin:
        return sys.stdin.readline().rstrip("\r\n")
    if not stdin_is_terminal():
        raise fail("no password: pass --password-stdin, or run on a terminal", EXIT_USAGE)
    value: str = typer.prompt("password", hide_input=True, confirmation_prompt=True, err=True)
    return value


def _users(*rest: str) -> str:
    return path("v1", "users", *rest)


def _show(user: dict[str, Any], output: str, verb: str) -> None:
    if output == "json":
        emit_json(user)
    else:
        typer.echo(f"{verb} user {user['name']}: {', '.join(user['roles']) or 'no roles'}")


@app.command()
def create(
    name: UserName,
    roles: Roles = None,
    password_stdin: PasswordStdin = False,
    url: Url = DEFAULT_URL,
    token: Token = "",
    output: Output = "text",
) -> None:
    """Make a user who logs in to the UI by name and password (only its hash is kept)."""
    body = {"name": name, "password": _password(password_stdin), "roles": roles or []}

    async def work(api: AdminClient) -> Any:
        return await api.post(_users(), body)

    _show(run(url, token, work), output, "created")


@app.command("list")
def list_(url: Url = DEFAULT_URL, token: Token = "", output: Output = "text") -> None:
    """List the users and their roles (never a password)."""

    async def work(api: AdminClient) -> Any:
        return await api.get(_users())

    found = run(url, token, work)
    if output == "json":
        emit_json(found)
        return
    table("users", ("name", "roles"), [(u["name"], ", ".join(u["roles"])) for u in found])
    typer.echo(f"{len(found)} user(s)")


@app.command()
def grant(
    name: UserName, role: Role, url: Url = DEFAULT_URL, token: Token = "", output: Output = "text"
) -> None:
    """Give a user a role (idempotent)."""

    async def work(api: AdminClient) -> Any:
        return await api.put(_users(name, "roles", role), None)

    _show(run(url, token, work), output, "granted; now")


@app.command()
def revoke(
    name: UserName, role: Role, url: Url = DEFAULT_URL, token: Token = "", output: Output = "text"
) -> None:
    """Take a role away from a user (idempotent); it ends at their next request."""

    async def work(api: AdminClient) -> Any:
        return await api.delete(_users(name, "roles", role))

    _show(run(url, token, work), output, "revoked; now")


@app.command()
def delete(
    name: UserName,
    yes: Yes = False,
    url: Url = DEFAULT_URL,
    token: Token = "",
    output: Output = "text",
) -> None:
    """Delete a user with their roles and API tokens (asks first unless --yes)."""
    confirm(f"delete user {name} and their API tokens?", yes)

    async def work(api: AdminClient) -> None:
        await api.delete(_users(name))

    run(url, token, work)
    if output == "json":
        emit_json({"deleted": name})
    else:
        typer.echo(f"deleted user {name}")


@app.command()
def password(
    name: UserName,
    password_stdin: PasswordStdin = False,
    url: Url = DEFAULT_URL,
    token: Token = "",
    output: Output = "text",
) -> None:
    """Set a user's password."""
    body = {"password": _password(password_stdin)}

    async def work(api: AdminClient) -> None:
        await api.put(_users(name, "password"), body)

    run(url, token, work)
    if output == "json":
        emit_json({"user": name, "password": "set"})
    else:
        typer.echo(f"set the password of {name}")


# ------------------------------------------------------------------ API tokens


@tokens.command("create")
def token_create(
    name: UserName,
    description: Annotated[str, typer.Option(help="Where it is used.")] = "",
    url: Url = DEFAULT_URL,
    token: Token = "",
    output: Output = "text",
) -> None:
    """Make an API token that acts as the user, with the user's roles (--token for the CLI).

    The token is printed this once: only its hash is kept."""
    body = {"user": name, "description": description}

    async def work(api: AdminClient) -> Any:
        return await api.post(path("v1", "tokens"), body)

    created = run(url, token, work)
    if output == "json":
        emit_json(created)
        return
    typer.echo(f"created API token {created['id']} of {name}")
    typer.echo(f"token (shown this once): {created['token']}")


@tokens.command("list")
def token_list(
    name: Annotated[str | None, typer.Argument(help="Only this user's.")] = None,
    url: Url = DEFAULT_URL,
    token: Token = "",
    output: Output = "text",
) -> None:
    """List API tokens (never the tokens themselves)."""

    async def work(api: AdminClient) -> Any:
        return await api.get(path("v1", "tokens"), params={"user": name} if name else None)

    found = run(url, token, work)
    if output == "json":
        emit_json(found)
        return
    rows = [
        (t["id"], t["user"] or "(machine)", ", ".join(t["roles"]), t["description"]) for t in found
    ]
    table("API tokens", ("id", "user", "roles", "description"), rows)
    typer.echo(f"{len(found)} token(s)")


@tokens.command("revoke")
def token_revoke(
    token_id: Annotated[str, typer.Argument(help="The token's id (12 hex digits, from list).")],
    yes: Yes = False,
    url: Url = DEFAULT_URL,
    token: Token = "",
    output: Output = "text",
) -> None:
    """Revoke an API token (asks first unless --yes): its next request gets 401."""
    confirm(f"revoke API token {token_id}?", yes)

    async def work(api: AdminClient) -> None:
        await api.delete(path("v1", "tokens", token_id))

    run(url, token, work)
    if output == "json":
        emit_json({"revoked": token_id})
    else:
        typer.echo(f"revoked API token {token_id}")
