"""The Kafka cluster id the service script formats storage with."""

from __future__ import annotations

import base64
import uuid
from unittest import mock

from scripts.realservices import servers


def test_a_cluster_id_never_starts_with_a_dash() -> None:
    """``-nULSHk…`` made ``kafka-storage format -t`` fail: the parser took it for an option."""
    dashed = uuid.UUID(bytes=base64.urlsafe_b64decode("-nULSHk-Sfeun3kw1KePHQ=="))
    plain = uuid.UUID(int=1)
    with mock.patch.object(servers.uuid, "uuid4", side_effect=[dashed, dashed, plain]):
        text = servers.kafka_cluster_id()
    assert not text.startswith("-")
    assert base64.urlsafe_b64decode(text + "==") == plain.bytes


def test_a_cluster_id_is_22_url_safe_characters() -> None:
    text = servers.kafka_cluster_id()
    assert len(text) == 22
    assert set(text) <= set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")


def test_200_cluster_ids_none_starting_with_a_dash() -> None:
    """One UUID in 64 encodes with a leading ``-``: 200 draws meet a few on average."""
    assert not [t for t in (servers.kafka_cluster_id() for _ in range(200)) if t.startswith("-")]
