"""Who is calling and what they may do: principals, roles and the one rule that decides.

A principal is the static admin token (the bootstrap credential), a user (logged in to the UI,
or calling with one of their API tokens) or a machine token. Each holds roles: ``admin``
(everything), or per project ``owner`` (its topics, subscriptions, tokens, cutovers) or
``viewer`` (read only, never a secret). Produce tokens (``core.tokens``) are another thing:
they only publish, and never reach the admin API.

Every admin route names what it needs as a :class:`Need` and asks :meth:`Principal.may`::

    if not principal.may(Need.OWNER, "shop"):
        raise Forbidden(...)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType
from typing import NamedTuple


class Role(StrEnum):
    """A role as granted and stored: ``admin`` has no project, the others have one."""

    ADMIN = "admin"
    OWNER = "owner"
    VIEWER = "viewer"


class Need(StrEnum):
    """What a route needs of its caller. ``any`` admits every principal: the route itself
    shows only what the caller may see (the list of projects)."""

    ANY = "any"
    VIEWER = "viewer"
    OWNER = "owner"
    ADMIN = "admin"


class PrincipalKind(StrEnum):
    ADMIN_TOKEN = "admin-token"
    USER = "user"
    TOKEN = "token"  # a machine's API token (a user's token resolves to the user)


@dataclass(frozen=True)
class Grant:
    """One role: ``project`` is None exactly for ``admin``."""

    role: Role
    project: str | None = None

    def __post_init__(self) -> None:
        if (self.role is Role.ADMIN) != (self.project is None):
            raise ValueError("admin is granted without a project; owner and viewer with one")

    def __str__(self) -> str:
        return self.role.value if self.project is None else f"{self.role.value}:{self.project}"


@dataclass(frozen=True)
class Principal:
    """A caller the control plane recognised, with the roles it holds now."""

    kind: PrincipalKind
    name: str
    grants: frozenset[Grant] = frozenset()
    _projects: Mapping[str, Role] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        projects: dict[str, Role] = {}
        for grant in self.grants:
            if grant.project is not None and projects.get(grant.project) is not Role.OWNER:
                projects[grant.project] = grant.role
        object.__setattr__(self, "_projects", MappingProxyType(projects))

    @property
    def is_admin(self) -> bool:
        return self.kind is PrincipalKind.ADMIN_TOKEN or Grant(Role.ADMIN) in self.grants

    def role_in(self, project: str) -> Role | None:
        """The strongest role held in ``project`` (admin counts as owner everywhere)."""
        return Role.OWNER if self.is_admin else self._projects.get(project)

    def projects(self) -> frozenset[str]:
        """The projects this principal holds a role in (an admin: all, not listed here)."""
        return frozenset(self._projects)

    def may(self, need: Need, project: str | None = None) -> bool:
        """The one rule: does this principal hold what ``need`` asks, in ``project``?"""
        if need is Need.ANY or self.is_admin:
            return True
        if need is Need.ADMIN or project is None:
            return False
        held = self._projects.get(project)
        return held is Role.OWNER or (need is Need.VIEWER and held is Role.VIEWER)

    @property
    def label(self) -> str:
        """Who, for logs: ``admin-token``, ``user:alice``, ``token:1a2b…``."""
        if self.kind is PrincipalKind.ADMIN_TOKEN:
            return self.kind.value
        return f"{self.kind.value}:{self.name}"


ADMIN_TOKEN = Principal(PrincipalKind.ADMIN_TOKEN, "admin-token")


def parse_grant(text: str) -> Grant:
    """``admin``, ``owner:shop`` or ``viewer:shop`` as a :class:`Grant` (ValueError else)."""
    role, _, project = text.partition(":")
    try:
        return Grant(Role(role), project or None)
    except ValueError:
        raise ValueError(f"{text!r}: give admin, owner:<project> or viewer:<project>") from None


class SessionClaim(NamedTuple):
    """Who a UI session says it stands for: ``user`` None for the admin token's session;
    ``stamp``, the user's credential stamp when they logged in, which must still be the
    user's for the session to hold (a deleted user, or a changed password, ends it)."""

    user: str | None
    stamp: str = ""
