"""One page of a list of named things (projects, a project's topics or subscriptions), by
cursor, with a server-side search; what every list route of the admin API pages with.

The list is its names, read in one call (a ZooKeeper ``children``) and sorted; a page is a
slice of them, and only the page's items are read, concurrently. A cursor names the last
item of a page (``next_cursor``: the names after it) or the first (``prev_cursor``: the
names before it), so a name created or deleted between two pages moves nothing: a name that
existed before the first page is neither repeated nor skipped (an offset would shift).

A search (``q``) keeps the names whose text holds ``q``, case-insensitive: the name itself,
and what ``describe`` gives for it (a description, a topic, an endpoint). Describing means
reading every item, so :class:`SearchTexts` keeps the texts of each list for a short while
(``list_search_cache_s``): the names are always read fresh (a new item is described at once,
a deleted one is gone), while a description changed within that time may still be found by
its old text. A list's texts older than that are answered and read again in the background.
A search with fewer hits than its page must look at every text, so the first page of a
list shown without a search starts reading its texts in the background (a few at a time),
for the search that usually follows (docs/capacity.md has the figures).

    texts = search_texts.of(f"topics/{project}", describe=topic_text)
    window = await page_of(names, ListQuery(q="orders", limit=50), fetch=get_topic, texts=texts)
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import logging
import time
from bisect import bisect_left, bisect_right
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from core.errors import HttpbusError, Malformed, NotFound

log = logging.getLogger(__name__)

T = TypeVar("T")
AFTER = "a:"
BEFORE = "b:"
DESCRIBE_BATCH = 256  # names described at once
WARM_BATCH = 32  # the background warm-up's reads in flight: pages read meanwhile go first
SEARCH_CHUNK = 1_024  # names a search looks at before it asks whether its page is full
BAD_CURSOR = "cursor: not a cursor this API gave; start again without one"


@dataclass(frozen=True)
class ListQuery:
    """What a list request asks: a search text, a cursor or (deprecated) an offset, a size."""

    q: str = ""
    cursor: str | None = None
    offset: int | None = None
    limit: int = 100

    @property
    def needle(self) -> str:
        return self.q.strip().lower()


Texts = Callable[[list[str]], Awaitable[Mapping[str, str]]]
Describe = Callable[[list[str]], Awaitable[Mapping[str, str]]]  # name → text, in bulk


@dataclass(frozen=True)
class Window(Generic[T]):
    """A page: its items, the list's size (before the search), where the page starts in it,
    and the cursors of the pages after and before it (None: there is none)."""

    items: list[T]
    total: int
    offset: int
    next_cursor: str | None
    prev_cursor: str | None


@dataclass(frozen=True)
class Position:
    """Where a cursor points: after ``name``, or before it."""

    name: str
    before: bool


def encode_cursor(name: str, *, before: bool = False) -> str:
    """The opaque cursor of the names after ``name`` (or before it)."""
    text = (BEFORE if before else AFTER) + name
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


def decode_cursor(cursor: str) -> Position:
    """Where ``cursor`` points; 400 ``malformed`` for a cursor this API did not give."""
    try:
        text = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
    except (binascii.Error, UnicodeDecodeError, ValueError):
        raise Malformed(BAD_CURSOR) from None
    kind, name = text[:2], text[2:]
    if kind not in (AFTER, BEFORE) or not name:
        raise Malformed(BAD_CURSOR)
    return Position(name, before=kind == BEFORE)


async def page_of(
    names: Sequence[str],
    query: ListQuery,
    fetch: Callable[[str], Awaitable[T]],
    texts: Texts | None = None,
    fetch_many: Callable[[list[str]], Awaitable[list[T]]] | None = None,
) -> Window[T]:
    """The page ``query`` asks of ``names``; ``fetch`` reads one item (a NotFound: deleted
    since the names were read, left out), ``texts`` the searchable texts of names besides
    the names themselves (None: the search looks at names only); ``fetch_many``, when
    given, reads the page's items in bulk instead (the ones that exist, in order)."""
    if query.cursor is not None and query.offset is not None:
        raise Malformed("offset: give cursor or offset, not both (offset is deprecated)")
    ordered = sorted(names)
    position = decode_cursor(query.cursor) if query.cursor is not None else None
    backwards = position is not None and position.before
    if position is None:
        candidates = ordered[query.offset or 0 :]
    elif position.before:
        candidates = ordered[: bisect_left(ordered, position.name)][::-1]
    else:
        candidates = ordered[bisect_right(ordered, position.name) :]
    chosen, more = await _hits(candidates, query, texts)
    if backwards:
        chosen.reverse()
    items = await (fetch_many(chosen) if fetch_many is not None else _fetch_all(chosen, fetch))
    if not chosen:
        return Window(items, len(ordered), _start(ordered, query, position), None, None)
    first, last = chosen[0], chosen[-1]
    start = bisect_left(ordered, first)
    after = more if not backwards else last < ordered[-1]
    before = more if backwards else start > 0
    return Window(
        items=items,
        total=len(ordered),
        offset=start,
        next_cursor=encode_cursor(last) if after else None,
        prev_cursor=encode_cursor(first, before=True) if before else None,
    )


def _start(ordered: list[str], query: ListQuery, position: Position | None) -> int:
    if position is None:
        return min(query.offset or 0, len(ordered))
    if position.before:
        return 0
    return bisect_right(ordered, position.name)


async def _hits(
    candidates: list[str], query: ListQuery, texts: Texts | None
) -> tuple[list[str], bool]:
    """The first ``limit`` candidates that match the search (all of them without one), and
    whether more follow."""
    needle, limit = query.needle, query.limit
    if not needle:
        return candidates[:limit], len(candidates) > limit
    if texts is None:
        hits = [n for n in candidates if needle in n.lower()]
        return hits[:limit], len(hits) > limit
    # A chunk at a time: texts not kept yet are read only as far as the page needs.
    hits = []
    for at in range(0, len(candidates), SEARCH_CHUNK):
        chunk = candidates[at : at + SEARCH_CHUNK]
        known = await texts([n for n in chunk if needle not in n.lower()])
        hits += [n for n in chunk if needle in n.lower() or needle in known.get(n, "")]
        if len(hits) > limit:
            break
    return hits[:limit], len(hits) > limit


async def _fetch_all(chosen: list[str], fetch: Callable[[str], Awaitable[T]]) -> list[T]:
    async def one(name: str) -> T | None:
        try:
            return await fetch(name)
        except NotFound:  # deleted since the names were read
            return None

    found = await asyncio.gather(*(one(n) for n in chosen))
    return [item for item in found if item is not None]


@dataclass
class _Kept:
    texts: dict[str, str] = field(default_factory=dict)
    read_at: float = 0.0
    refresh: asyncio.Task[None] | None = None


@dataclass(frozen=True)
class ListTexts:
    """The searchable texts of one list: what :func:`page_of` asks for, and the warm-up
    that the list's route starts when it shows a page without a search."""

    kept: SearchTexts
    key: str
    describe: Describe

    async def __call__(self, names: list[str]) -> Mapping[str, str]:
        return await self.kept.texts(self.key, names, describe=self.describe)

    def warm(self, names: list[str]) -> None:
        self.kept.warm(self.key, names, describe=self.describe)


class SearchTexts:
    """The searchable texts of the lists (lowercase), by list, kept ``ttl_s`` seconds and
    then read again in the background while the kept ones answer; ``ttl_s`` 0 reads them
    for every search. One per control plane process (``app.state.search_texts``)."""

    def __init__(self, ttl_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.ttl_s = ttl_s
        self._clock = clock
        self._lists: dict[str, _Kept] = {}

    async def texts(self, key: str, names: list[str], *, describe: Describe) -> Mapping[str, str]:
        """The texts of ``names`` in the list ``key``; a name not kept yet is described now."""
        if self.ttl_s <= 0:
            return await _describe_all(names, describe)
        kept = self._lists.setdefault(key, _Kept())
        missing = [n for n in names if n not in kept.texts]
        if missing:
            kept.texts.update(await _describe_all(missing, describe))
            if not kept.read_at:
                kept.read_at = self._clock()
        stale = self._clock() - kept.read_at > self.ttl_s
        if stale and (kept.refresh is None or kept.refresh.done()):
            kept.refresh = asyncio.create_task(self._refresh(kept, list(kept.texts), describe))
        return kept.texts

    def of(self, key: str, describe: Describe) -> ListTexts:
        """The texts of the list ``key``, whose items ``describe`` reads."""
        return ListTexts(self, key, describe)

    def warm(self, key: str, names: list[str], *, describe: Describe) -> None:
        """Start reading, in the background and a few at a time, the texts of a list none
        of whose texts are kept: a list just shown is likely searched next, and a search
        with fewer hits than its page reads every text it has not kept."""
        if self.ttl_s <= 0:
            return
        kept = self._lists.setdefault(key, _Kept())
        if kept.texts or (kept.refresh is not None and not kept.refresh.done()):
            return
        refresh = self._refresh(kept, list(names), describe, WARM_BATCH)
        kept.refresh = asyncio.create_task(refresh)

    def forget(self, key: str, name: str) -> None:
        """Drop one kept text (its item changed here): it is described at its next search."""
        kept = self._lists.get(key)
        if kept is not None:
            kept.texts.pop(name, None)

    async def _refresh(
        self, kept: _Kept, names: list[str], describe: Describe, batch: int = DESCRIBE_BATCH
    ) -> None:
        started = self._clock()
        try:
            fresh = await _describe_all(names, describe, batch)
        except HttpbusError as exc:  # the metastore away: the kept texts serve on, retried
            log.warning("list search texts not read again: %s", exc)
            return
        kept.texts = {**kept.texts, **fresh}
        for gone in set(names) - set(fresh):
            kept.texts.pop(gone, None)
        kept.read_at = started

    async def aclose(self) -> None:
        """Stop the refreshes under way (at the app's shutdown)."""
        tasks = [k.refresh for k in self._lists.values() if k.refresh is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def _describe_all(
    names: list[str], describe: Describe, size: int = DESCRIBE_BATCH
) -> dict[str, str]:
    """``name`` → its text, lowercase, ``size`` names a read; a name deleted meanwhile is
    left out."""
    found: dict[str, str] = {}
    for at in range(0, len(names), size):
        texts = await describe(names[at : at + size])
        found.update((n, t.lower()) for n, t in texts.items())
    return found
