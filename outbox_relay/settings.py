"""Settings of the outbox relay (read once in ``main()``; docs/outbox.md lists them)."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from pydantic import BaseModel, ConfigDict, Field, SecretStr

from core.names import Name
from core.settings import SettingsBase, seconds

# A replication slot or publication name: PostgreSQL allows lower-case letters, digits and _.
SLOT_NAME = r"^[a-z0-9_]{1,63}$"
TABLE_NAME = r"^[A-Za-z_][A-Za-z0-9_$]*\.[A-Za-z_][A-Za-z0-9_$]*$"


class OutboxDatabase(BaseModel):
    """The PostgreSQL database that holds the outbox table (``wal_level=logical``; the user
    needs the REPLICATION attribute, and ownership of the table for the publication)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    host: str = Field(default="127.0.0.1", description="PostgreSQL's host")
    port: int = Field(default=5432, ge=1, le=65535, description="PostgreSQL's port")
    user: str = Field(default="postgres", description="a user with the REPLICATION attribute")
    password: SecretStr | None = Field(default=None, description="its password")
    dbname: str = Field(min_length=1, description="the database of the outbox table")
    table: str = Field(
        default="public.outbox", pattern=TABLE_NAME, description="schema.table of the outbox"
    )
    slot: str = Field(
        default="httpbus_outbox",
        pattern=SLOT_NAME,
        description="the logical replication slot (one per relay; drop it when the relay is "
        "retired: a slot nobody reads keeps the WAL forever)",
    )
    publication: str = Field(
        default="httpbus_outbox", pattern=SLOT_NAME, description="created for the table if absent"
    )


class RelaySettings(SettingsBase):
    """One relay: one outbox table to one httpbus topic."""

    section: ClassVar[str] = "outbox"
    name: str = Field(
        default="httpbus-outbox",
        pattern=r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$",
        description="the Debezium connector's name (and topic prefix) of this relay",
    )
    producer_url: str = Field(
        default="http://127.0.0.1:8701", description="the producer service's base URL"
    )
    produce_token: SecretStr | None = Field(
        default=None, description="a produce token for the topic (HTTPBUS_PRODUCE_TOKEN)"
    )
    project: Name = Field(description="the project of the topic the events go to")
    topic: Name = Field(description="that topic: grouped, with a dedupe_window")
    source: str = Field(
        default="/outbox", min_length=1, description="the CloudEvents source of every event"
    )
    group_attribute: str = Field(
        default="partitionkey",
        pattern=r"^[a-z0-9]{1,64}$",
        description="the attribute that carries the aggregate id: the topic's "
        "cloudevents_group_attribute",
    )
    content_type: str = Field(
        default="application/json", description="the content type of the payload column"
    )
    database: OutboxDatabase = Field(description="where the outbox table is")
    offsets_file: Path = Field(
        description="where Debezium keeps the position it has acknowledged (a restart resumes "
        "there); keep it on a durable disk"
    )
    offset_flush_s: float = seconds(
        5.0, 600, "how often acknowledged positions are written to the offsets file and the slot"
    )
    snapshot_mode: str = Field(
        default="no_data",
        pattern=r"^(no_data|initial|when_needed)$",
        description="no_data: ship what is committed after the slot exists; initial: also "
        "the rows already in the table at the first start",
    )
    max_batch_size: int = Field(default=512, ge=1, le=20_000, description="events per batch")
    poll_interval_s: float = seconds(0.1, 10, "how long Debezium waits to fill a batch")
    concurrency: int = Field(
        default=32, ge=1, le=1_000, description="aggregates posted at once (each in order)"
    )
    post_timeout_s: float = seconds(10.0, 300, "one POST to the producer service")
    retry_max_s: float = seconds(5.0, 300, "the longest wait between two tries of one event")
    metrics_host: str = Field(default="127.0.0.1", description="where metrics_port listens")
    metrics_port: int | None = Field(
        default=None, ge=1, le=65535, description="serve Prometheus metrics here; none: not served"
    )
    jvm_max_heap_mb: int = Field(
        default=512, ge=128, le=65_536, description="the Debezium JVM's heap (-Xmx)"
    )
    debezium: dict[str, str] = Field(
        default_factory=dict,
        description="further Debezium connector properties, set as given (they win)",
    )
