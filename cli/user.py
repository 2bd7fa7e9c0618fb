"""``httpbus user``: the users of the admin API and the UI — create, list, show, grant,
revoke, delete, set a password — and their API tokens (``httpbus user token
create|list|revoke``); ``httpbus whoami``: who a token stands for.

Roles read ``admin``, ``owner:<project>`` or ``viewer:<project>``. A password is never an
argument (it would stay in the shell's history): it is asked on a terminal, or read from the
first line of stdin with ``--password-stdin``.
"""

from __future__ import annotations

import sys
from typing import Annotated, Any

import typer

from cli.kit import (
    EXIT_USAGE,
    Call,
    Columns,
    Output,
    Paging,
    Yes,
    command,
    fail,
    get,
    listing,
    post,
    put,
    removal,
    shown_once,
    stdin_is_terminal,
)
from control_plane.client import path

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
USERS = Columns("users", ("name", "roles"), lambda u: (u["name"], ", ".join(u["roles"])))
API_TOKENS = Columns(
    "API tokens",
    ("id", "user", "roles", "description"),
    lambda t: (t["id"], t["user"] or "(machine)", ", ".join(t["roles"]), t["description"]),
)


def _password(from_stdin: bool) -> str:
    if from_stdin:
        return sys.stdin.readline().rstrip("\r\n")
    if not stdin_is_terminal():
        raise fail("no password: pass --password-stdin, or run on a terminal", EXIT_USAGE)
    value: str = typer.prompt("password", hide_input=True, confirmation_prompt=True, err=True)
    return value


def _users(*rest: str) -> str:
    return path("v1", "users", *rest)


def _said(verb: str) -> Any:
    return lambda user: f"{verb} user {user['name']}: {', '.join(user['roles']) or 'no roles'}"


@command(app)
def create(name: UserName, roles: Roles = None, password_stdin: PasswordStdin = False) -> Call:
    """Make a user who logs in to the UI by name and password (only its hash is kept)."""
    body = {"name": name, "password": _password(password_stdin), "roles": roles or []}
    return post(_users(), body, text=_said("created"))


@command(app, "list")
def list_(page: Paging, output: Output = "text") -> Call:
    """List the users and their roles (never a password): a page (the next page's command
    is printed under it), or every page with --all; --search finds them by name or role."""
    again = "httpbus user list"
    return listing(_users(), USERS, page=page, counted="user", again=again, output=output)


@command(app)
def show(name: UserName) -> Call:
    """Show a user and their roles (never a password)."""
    return get(_users(name), text=_roles)


def _roles(principal: dict[str, Any]) -> str:
    return f"{principal['name']}: {', '.join(principal['roles']) or 'no roles'}"


def whoami() -> Call:
    """Who the token stands for (an admin token, a user's or a machine's API token) and its
    roles now: ``httpbus whoami``."""

    def said(me: dict[str, Any]) -> str:  # "user ann: …", "token ci: …", "admin-token: admin"
        return _roles(me) if me["kind"] == me["name"] else f"{me['kind']} {_roles(me)}"

    return get(path("v1", "me"), text=said)


@command(app)
def grant(name: UserName, role: Role) -> Call:
    """Give a user a role (idempotent)."""
    return put(_users(name, "roles", role), None, text=_said("granted; now"))


@command(app)
def revoke(name: UserName, role: Role) -> Call:
    """Take a role away from a user (idempotent); it ends at their next request."""
    return Call(lambda api: api.delete(_users(name, "roles", role)), _said("revoked; now"))


@command(app)
def delete(name: UserName, yes: Yes = False) -> Call:
    """Delete a user with their roles and API tokens (asks first unless --yes)."""
    return removal(
        _users(name),
        ask=f"delete user {name} and their API tokens?",
        yes=yes,
        said=f"deleted user {name}",
        record={"deleted": name},
    )


@command(app)
def password(name: UserName, password_stdin: PasswordStdin = False) -> Call:
    """Set a user's password."""
    body = {"password": _password(password_stdin)}
    return Call(
        lambda api: api.put(_users(name, "password"), body),
        text=lambda _: f"set the password of {name}",
        json=lambda _: {"user": name, "password": "set"},
    )


# ------------------------------------------------------------------ API tokens


@command(tokens, "create")
def token_create(
    name: Annotated[
        str | None, typer.Argument(help="The user it acts as; omit for a machine's token.")
    ] = None,
    roles: Annotated[
        list[str] | None,
        typer.Option(
            "--role", help="A machine token's role (repeat): admin, owner:<p>, viewer:<p>."
        ),
    ] = None,
    description: Annotated[str, typer.Option(help="Where it is used.")] = "",
) -> Call:
    """Make an API token (--token for the CLI): one that acts as the user NAME, with the
    user's roles, or, with --role and no NAME, a machine's token with roles of its own.

    The token is printed this once: only its hash is kept."""
    if (name is None) == (not roles):
        raise fail("give a user NAME, or --role for a machine's token (not both)", EXIT_USAGE)
    body: dict[str, Any] = {"description": description}
    body.update({"user": name} if name is not None else {"roles": roles})
    whose = f"of {name}" if name is not None else f"for {', '.join(roles or [])}"
    return post(
        path("v1", "tokens"), body, text=lambda t: shown_once(f"API token {t['id']} {whose}", t)
    )


@command(tokens, "list")
def token_list(
    name: Annotated[str | None, typer.Argument(help="Only this user's.")] = None,
    *,
    page: Paging,
    output: Output = "text",
) -> Call:
    """List API tokens (never the tokens themselves): a page by id (the next page's command
    is printed under it), or every page with --all; --search finds them by id, user, role
    or description."""
    again = "httpbus user token list" + (f" {name}" if name else "")
    return listing(
        path("v1", "tokens"),
        API_TOKENS,
        page=page,
        params={"user": name} if name else None,
        counted="token",
        again=again,
        output=output,
    )


@command(tokens, "revoke")
def token_revoke(
    token_id: Annotated[str, typer.Argument(help="The token's id (12 hex digits, from list).")],
    yes: Yes = False,
) -> Call:
    """Revoke an API token (asks first unless --yes): its next request gets 401."""
    return removal(
        path("v1", "tokens", token_id),
        ask=f"revoke API token {token_id}?",
        yes=yes,
        said=f"revoked API token {token_id}",
        record={"revoked": token_id},
    )
