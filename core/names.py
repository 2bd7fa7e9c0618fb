"""Names of projects, topics and subscriptions, and the storage topic names built from them.

A name is 1 to 64 characters: ASCII letters, digits, ``-`` and ``_``, starting with a letter
or a digit. No dots and no slashes, so a name is safe inside a ZooKeeper path, a Kafka topic
name and a Pulsar topic name, and ``{project}.{topic}`` can never be ambiguous.
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator, WithJsonSchema

MAX_NAME = 64
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_-]*$"  # with MAX_NAME: the rule in OpenAPI
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*")
# The same rule for an HTML ``pattern`` attribute: browsers compile it with the ``v`` flag,
# under which a bare ``-`` at the end of a class is a syntax error (the check is then dropped
# with only a console warning), so it is escaped here.
NAME_INPUT_PATTERN = r"[A-Za-z0-9][A-Za-z0-9_\-]*"
NAME_RULE = (
    f"1 to {MAX_NAME} characters: letters, digits, '-' and '_', starting with a letter or digit"
)


def check_name(value: str) -> str:
    """Return ``value`` if it is a valid name, else raise ``ValueError`` saying what is allowed."""
    if not value or len(value) > MAX_NAME or not _NAME.fullmatch(value):
        raise ValueError(f"invalid name {value!r}: use {NAME_RULE}")
    return value


# The schema states the rule, so clients (and fuzzers) see it; the check words the refusal.
Name = Annotated[
    str,
    AfterValidator(check_name),
    WithJsonSchema(
        {"type": "string", "pattern": NAME_PATTERN, "minLength": 1, "maxLength": MAX_NAME}
    ),
]


def storage_topic_name(project: str, topic: str, segment_id: int, prefix: str = "httpbus") -> str:
    """The storage topic of one segment: never reused, since segment ids only grow."""
    return f"{prefix}.{project}.{topic}.s{segment_id}"
