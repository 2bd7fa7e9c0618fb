"""The root's commands, imported when they are first looked up, not when ``httpbus`` starts.

Importing every command module pulls in httpx, pydantic models, FastAPI, SQLAlchemy and
Alembic (about 1.5 s) before ``httpbus --version`` could answer. Instead the root group
(:class:`LazyGroup`) knows each command's name and how to load it (a :class:`Lazy`): a
command is imported and built, exactly as ``cli.command()``, ``kit.command(cli)`` or
``cli.add_typer(...)`` would have built it, only when Click asks for it by name (to run it)
or for every one of them (``--help``, an unknown name's suggestions, shell completion). The
help output and the order of the commands stay what eager registration gave.

A command module itself knows nothing of this: it declares its Typer app or function as
before."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Mapping, MutableMapping, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any

import typer
from typer.core import TyperGroup
from typer.main import get_group

__all__ = ["Kind", "Lazy", "LazyGroup", "lazy_group"]


class Kind(Enum):
    """How the root registers what a :class:`Lazy` loads."""

    COMMAND = "command"  # a function: ``cli.command()(function)``
    KIT = "kit"  # a function returning a kit Call: ``kit.command(cli)(function)``
    GROUP = "group"  # a Typer app: ``cli.add_typer(app, name=name)``


@dataclass(frozen=True)
class Lazy:
    """The root's command ``name``: ``load`` imports its module (and does any registration
    it needs first) and returns the function or Typer app to register as ``kind``."""

    name: str
    kind: Kind
    load: Callable[[], Any]

    def build(self) -> Any:
        """The Click command the eager registration would have built (on a root of the same
        default settings, so help and behaviour are the same)."""
        holder = typer.Typer()
        loaded = _loaded(self.load)
        if self.kind is Kind.GROUP:
            holder.add_typer(loaded, name=self.name)
        elif self.kind is Kind.KIT:
            from cli.kit import command

            command(holder)(loaded)
        else:
            holder.command()(loaded)
        return get_group(holder).commands[self.name]


@functools.cache
def _loaded(load: Callable[[], Any]) -> Any:
    """Each module once per process: its registrations (a subcommand added to a sub-app) must
    not be repeated each time a root group is built (every ``CliRunner.invoke``)."""
    return load()


class _LazyCommands(MutableMapping[str, Any]):
    """The root group's ``commands``: every name is known, each command is built on first
    access. Iterating gives the names without loading; reading a value loads it."""

    def __init__(self, eager: Mapping[str, Any], entries: Sequence[Lazy]) -> None:
        self._built: dict[str, Any] = dict(eager)
        self._lazy = {e.name: e for e in entries if e.name not in self._built}
        self._order = [*self._lazy, *self._built]

    def __getitem__(self, name: str) -> Any:
        if name not in self._built:
            self._built[name] = self._lazy[name].build()  # KeyError: no such command
        return self._built[name]

    def __setitem__(self, name: str, command: Any) -> None:
        if name not in self._order:
            self._order.append(name)
        self._built[name] = command

    def __delitem__(self, name: str) -> None:
        self._built.pop(name, None)
        self._lazy.pop(name, None)
        self._order.remove(name)

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._order))

    def __len__(self) -> int:
        return len(self._order)

    def __contains__(self, name: object) -> bool:
        return name in self._order


class LazyGroup(TyperGroup):
    """A Typer group whose commands are :class:`Lazy` entries (``ENTRIES``, set by
    :func:`lazy_group`)."""

    ENTRIES: Sequence[Lazy] = ()

    def __init__(self, **attrs: Any) -> None:
        super().__init__(**attrs)
        self.commands = _LazyCommands(self.commands, self.ENTRIES)


def lazy_group(entries: Sequence[Lazy]) -> type[LazyGroup]:
    """The group class of a root Typer app (``typer.Typer(cls=lazy_group(...))``) that loads
    ``entries`` on demand, listed in their order."""
    return type("LazyRoot", (LazyGroup,), {"ENTRIES": tuple(entries)})
