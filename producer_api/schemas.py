"""The producer's side of topic schemas: compiled validators, one per version, kept fresh.

:class:`TopicSchemas` rides along with :class:`~producer_api.metadata.TopicCache`: the
cache reloads a topic's schema with the topic (the same watches, plus one on the schema
node), and a version is compiled once, however often the topic reloads. :func:`stamp`
checks one payload and adds the ``x-schema-version`` header it was checked against.
"""

from __future__ import annotations

from core.envelope import SCHEMA_VERSION
from core.errors import SchemaViolation
from core.schemas import CompiledSchema
from metastore.catalog import Catalog

from .headers import Parsed

Key = tuple[str, str]


class TopicSchemas:
    """The schema in force of each loaded topic (None: no validation), compiled per version."""

    def __init__(self, catalog: Catalog) -> None:
        self.catalog = catalog
        self.compilations = 0  # versions compiled so far (a test and a metric read it)
        self._current: dict[Key, CompiledSchema | None] = {}

    def get(self, key: Key) -> CompiledSchema | None:
        return self._current.get(key)

    async def reload(self, key: Key) -> None:
        """Read the topic's schema state; compile its latest version if it is new here."""
        found = await self.catalog.get_schema_state(*key)
        if found is None or not found[0].active:
            self._current[key] = None
            return
        latest = found[0].latest
        current = self._current.get(key)
        if current is not None and current.version == latest:
            return
        stored = await self.catalog.get_schema_version(*key, latest)
        self._current[key] = CompiledSchema.compile(latest, stored.schema_)
        self.compilations += 1

    def forget(self, key: Key) -> None:
        self._current.pop(key, None)


def stamp(schema: CompiledSchema, payload: bytes, parsed: Parsed) -> Parsed | SchemaViolation:
    """``parsed`` with the schema version header if ``payload`` is valid, else why not.
    The header is httpbus's own: it does not count in the client's header bytes."""
    problem = schema.problem(payload)
    if problem is not None:
        return problem
    return parsed._replace(headers=(*parsed.headers, (SCHEMA_VERSION, schema.header)))
