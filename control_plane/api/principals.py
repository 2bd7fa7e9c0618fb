"""``/v1/users``, ``/v1/tokens`` and ``/v1/me``: the principals of the admin API.

Users log in to the UI by name and password and act in the CLI with their API tokens; a
machine's API token carries roles of its own. Roles read ``admin``, ``owner:<project>`` or
``viewer:<project>``. Only an admin manages principals; anyone may ask who they are. A
password or a token is never read back: a token is shown once, in the answer that makes it.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query, Request, status
from pydantic import AfterValidator, BaseModel, ConfigDict, Field
from starlette.concurrency import run_in_threadpool

from control_plane.api.auth import ADMIN, ANY, PrincipalDep
from control_plane.api.deps import AdminDep, ListQueryIfAskedDep, page_or_all
from control_plane.api.schemas import Page
from core.errors import ValidationFailed
from core.names import MAX_NAME, NAME_PATTERN, Name
from core.principals import Grant, Principal, parse_grant
from reports.principals import PrincipalStore, TokenInfo, UserInfo, user_key

router = APIRouter(tags=["principals"])

ROLE_PATTERN = r"^(admin|(owner|viewer):[A-Za-z0-9][A-Za-z0-9_-]{0,63})$"
UserName = Annotated[str, Path(pattern=NAME_PATTERN, max_length=MAX_NAME)]
RoleText = Annotated[str, Field(pattern=ROLE_PATTERN, max_length=80)]
RoleInPath = Annotated[
    str, Path(pattern=ROLE_PATTERN, max_length=80, description="admin, owner:<p> or viewer:<p>")
]
Password = Annotated[str, Field(min_length=8, max_length=1024)]


def _roles_unique(roles: list[str]) -> list[str]:
    return sorted(set(roles))


Roles = Annotated[list[RoleText], AfterValidator(_roles_unique), Field(max_length=1000)]


class UserCreate(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    name: Name
    password: Password
    roles: Roles = Field(default_factory=list, description="admin, owner:<p>, viewer:<p>")


class PasswordSet(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    password: Password


class UserView(BaseModel):
    name: str
    roles: list[str]
    created_at_ms: int


class ApiTokenCreate(BaseModel):
    """A token for ``user`` (it acts as them, with their roles) or, without ``user``, for a
    machine with ``roles`` of its own."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    user: Name | None = None
    roles: Roles = Field(default_factory=list, description="a machine token's roles")
    description: str = Field(default="", max_length=1_000)


class ApiTokenView(BaseModel):
    id: str
    user: str | None
    roles: list[str]
    description: str
    created_at_ms: int


class ApiTokenCreated(ApiTokenView):
    token: str = Field(description="the bearer token; shown only now, store it safely")


class Me(BaseModel):
    kind: str
    name: str
    roles: list[str]


def principal_store(request: Request) -> PrincipalStore:
    store: PrincipalStore = request.app.state.authenticator.principals
    return store


def _user(info: UserInfo) -> UserView:
    return UserView(
        name=info.name, roles=[str(g) for g in info.grants], created_at_ms=info.created_at_ms
    )


def _token(info: TokenInfo) -> ApiTokenView:
    return ApiTokenView(
        id=info.id,
        user=info.user,
        roles=[str(g) for g in info.grants],
        description=info.description,
        created_at_ms=info.created_at_ms,
    )


async def _grants(admin: AdminDep, roles: list[str], field: str) -> tuple[Grant, ...]:
    """``roles`` as grants, every project named existing (else 422 naming ``field``)."""
    grants = tuple(parse_grant(r) for r in roles)
    known = set(await admin.catalog.list_projects())
    for grant in grants:
        if grant.project is not None and grant.project not in known:
            raise ValidationFailed(
                f"{field}: project {grant.project} does not exist",
                details={"fields": [{"field": field, "problem": "unknown project"}]},
            )
    return grants


# ------------------------------------------------------------------ users


@router.post("/v1/users", status_code=status.HTTP_201_CREATED, **ADMIN)
async def create_user(body: UserCreate, admin: AdminDep, request: Request) -> UserView:
    grants = await _grants(admin, body.roles, "roles")
    store = principal_store(request)
    return _user(await run_in_threadpool(store.create_user, body.name, body.password, grants))


@router.get("/v1/users", **ADMIN)
async def list_users(
    request: Request, query: ListQueryIfAskedDep
) -> list[UserView] | Page[UserView]:
    """The users and their roles. With any of ``q``, ``cursor``, ``limit``: a page by name
    (``q`` searches names and roles; ``next_cursor``, null on the last page, and
    ``prev_cursor`` ask for the pages around); without them the whole list, as before
    paging (deprecated)."""
    users = [_user(u) for u in await run_in_threadpool(principal_store(request).users)]
    return await page_or_all(users, query, lambda u: u.name, lambda u: " ".join(u.roles))


@router.get("/v1/users/{user}", **ADMIN)
async def get_user(user: UserName, request: Request) -> UserView:
    return _user(await run_in_threadpool(principal_store(request).user, user))


@router.delete("/v1/users/{user}", status_code=status.HTTP_204_NO_CONTENT, **ADMIN)
async def delete_user(user: UserName, request: Request) -> None:
    """The user, their roles and their API tokens (their UI sessions fail at once)."""
    await run_in_threadpool(principal_store(request).delete_user, user)


@router.put("/v1/users/{user}/password", status_code=status.HTTP_204_NO_CONTENT, **ADMIN)
async def set_password(user: UserName, body: PasswordSet, request: Request) -> None:
    await run_in_threadpool(principal_store(request).set_password, user, body.password)


@router.put("/v1/users/{user}/roles/{role}", **ADMIN)
async def grant_role(
    user: UserName, role: RoleInPath, admin: AdminDep, request: Request
) -> UserView:
    """Give the user a role (idempotent)."""
    (grant,) = await _grants(admin, [role], "role")
    store = principal_store(request)
    await run_in_threadpool(store.grant, user_key(user), grant)
    return _user(await run_in_threadpool(store.user, user))


@router.delete("/v1/users/{user}/roles/{role}", **ADMIN)
async def revoke_role(user: UserName, role: RoleInPath, request: Request) -> UserView:
    """Take a role away (idempotent); it ends at the user's next request."""
    store = principal_store(request)
    await run_in_threadpool(store.revoke, user_key(user), parse_grant(role))
    return _user(await run_in_threadpool(store.user, user))


# ------------------------------------------------------------------ API tokens


@router.post("/v1/tokens", status_code=status.HTTP_201_CREATED, **ADMIN)
async def create_api_token(
    body: ApiTokenCreate, admin: AdminDep, request: Request
) -> ApiTokenCreated:
    if body.user is not None and body.roles:
        raise ValidationFailed(
            "roles: a user's token acts with the user's roles; grant them to the user",
            details={"fields": [{"field": "roles", "problem": "not with user"}]},
        )
    if body.user is None and not body.roles:
        raise ValidationFailed(
            "roles: a machine token needs at least one role (or give user)",
            details={"fields": [{"field": "roles", "problem": "missing"}]},
        )
    grants = await _grants(admin, body.roles, "roles")
    store = principal_store(request)
    info, plaintext = await run_in_threadpool(
        store.create_token, body.user, grants, body.description
    )
    return ApiTokenCreated(**_token(info).model_dump(), token=plaintext)


@router.get("/v1/tokens", **ADMIN)
async def list_api_tokens(
    request: Request,
    query: ListQueryIfAskedDep,
    user: Annotated[str | None, Query(pattern=NAME_PATTERN, max_length=MAX_NAME)] = None,
) -> list[ApiTokenView] | Page[ApiTokenView]:
    """Every API token, or a user's (never the tokens themselves). With any of ``q``,
    ``cursor``, ``limit``: a page by token id (``q`` searches ids, users, roles and
    descriptions; ``next_cursor``, null on the last page, and ``prev_cursor`` ask for the
    pages around); without them the whole list, as before paging (deprecated)."""
    found = [_token(t) for t in await run_in_threadpool(principal_store(request).tokens, user)]
    return await page_or_all(found, query, lambda t: t.id, _token_text)


def _token_text(token: ApiTokenView) -> str:
    return " ".join([token.user or "", *token.roles, token.description])


@router.delete("/v1/tokens/{token_id}", status_code=status.HTTP_204_NO_CONTENT, **ADMIN)
async def revoke_api_token(
    request: Request, token_id: Annotated[str, Path(pattern=r"^[a-f0-9]{12}$")]
) -> None:
    """Revoke an API token: the next request with it gets 401."""
    await run_in_threadpool(principal_store(request).revoke_token, token_id)


# ------------------------------------------------------------------ me


@router.get("/v1/me", **ANY)
async def me(principal: PrincipalDep) -> Me:
    """Who the credential of this request stands for, and its roles now."""
    return Me(kind=principal.kind.value, name=principal.name, roles=roles_of(principal))


def roles_of(principal: Principal) -> list[str]:
    if principal.is_admin:
        return ["admin"]
    return sorted(str(g) for g in principal.grants)
