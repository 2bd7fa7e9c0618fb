"""The Debezium connector's properties for a relay: PostgreSQL through ``pgoutput``, a file
offset store, and the outbox event router (docs/outbox.md, "The connector")."""

from __future__ import annotations

from .settings import RelaySettings

POSTGRES_CONNECTOR = "io.debezium.connector.postgresql.PostgresConnector"
FILE_OFFSETS = "org.apache.kafka.connect.storage.FileOffsetBackingStore"
EVENT_ROUTER = "io.debezium.transforms.outbox.EventRouter"
# The outbox columns the router copies beside the payload (Debezium's default column names).
PLACED = ("id", "type", "aggregateid", "aggregatetype")


def properties(settings: RelaySettings) -> dict[str, str]:
    """Every property the embedded engine starts with, ``settings.debezium`` last."""
    db = settings.database
    props = {
        "name": settings.name,
        "connector.class": POSTGRES_CONNECTOR,
        "offset.storage": FILE_OFFSETS,
        "offset.storage.file.filename": str(settings.offsets_file),
        "offset.flush.interval.ms": str(int(settings.offset_flush_s * 1000)),
        "database.hostname": db.host,
        "database.port": str(db.port),
        "database.user": db.user,
        "database.password": db.password.get_secret_value() if db.password else "",
        "database.dbname": db.dbname,
        "topic.prefix": settings.name,
        "plugin.name": "pgoutput",
        "slot.name": db.slot,
        "publication.name": db.publication,
        "publication.autocreate.mode": "filtered",
        "table.include.list": db.table,
        "snapshot.mode": settings.snapshot_mode,
        "max.batch.size": str(settings.max_batch_size),
        "poll.interval.ms": str(int(settings.poll_interval_s * 1000)),
        "transforms": "outbox",
        "transforms.outbox.type": EVENT_ROUTER,
        # The payload as the column holds it (a JSON text for jsonb), posted byte for byte.
        "transforms.outbox.table.expand.json.payload": "false",
        "transforms.outbox.table.fields.additional.placement": ",".join(
            f"{c}:envelope:{c}" for c in PLACED
        ),
        "key.converter.schemas.enable": "false",
        "value.converter.schemas.enable": "false",
    }
    return props | settings.debezium
