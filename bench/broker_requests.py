"""The requests a Kafka broker completed, read from its request log (``kafka.request.logger`` at
DEBUG: one JSON line per request, ``scripts/realservices/hermes.py``'s ``request_log``).

A broker's CPU follows the requests it serves more than the records in them: the same records
in four produce requests (one per partition) cost it more than in one request holding four
partitions. ``bench/peers.py --requests`` prints, per run, each client's requests by API per
1,000 messages published, the partitions and bytes a produce request carried, and the broker's
own time on them (``localTimeMs``: handling, excluding the queues). The logging itself costs the
broker CPU, so a run with it on is for these counts, not for its CPU figures.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

PREFIX = "Completed request:"


@dataclass
class ApiCount:
    """One client's requests of one API."""

    requests: int = 0
    partitions: int = 0  # produce only: partitions across its requests
    record_bytes: int = 0  # produce only
    local_ms: float = 0.0

    def add(self, line: dict[str, object]) -> None:
        self.requests += 1
        self.local_ms += float(line.get("localTimeMs", 0.0))  # type: ignore[arg-type]
        request = line.get("request")
        if isinstance(request, dict):
            for topic in request.get("topicData", ()):
                for part in topic.get("partitionData", ()):
                    self.partitions += 1
                    self.record_bytes += int(part.get("recordsSizeInBytes", 0))


@dataclass
class Requests:
    """Counts by (client, API) of the lines read since a mark."""

    by_client: dict[str, dict[str, ApiCount]] = field(
        default_factory=lambda: defaultdict(lambda: defaultdict(ApiCount))
    )

    def lines(self, messages: int) -> list[str]:
        """Per client, its APIs by requests per 1,000 ``messages``, most first."""
        per = 1000 / max(messages, 1)
        out = []
        for client, apis in sorted(self.by_client.items()):
            total = sum(c.requests for c in apis.values())
            local = sum(c.local_ms for c in apis.values())
            parts = []
            for api, c in sorted(apis.items(), key=lambda kv: -kv[1].requests):
                part = f"{api} {c.requests * per:,.1f}"
                if c.partitions:
                    part += (
                        f" ({c.partitions / c.requests:.2f} partitions,"
                        f" {c.record_bytes / c.requests / 1024:.1f} KiB each)"
                    )
                parts.append(part)
            out.append(
                f"{client}: {total * per:,.1f} requests per 1,000 msgs, broker handling"
                f" {local * per:,.1f} ms per 1,000 msgs: " + ", ".join(parts)
            )
        return out


def client_of(line: dict[str, object]) -> str:
    header = line.get("requestHeader")
    info = line.get("clientInformation")
    client_id = header.get("clientId", "?") if isinstance(header, dict) else "?"
    software = info.get("softwareName", "?") if isinstance(info, dict) else "?"
    return f"{software} ({client_id})"


class RequestLog:
    """A broker's request log, read from a mark (its size when marked) on."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0

    def mark(self) -> None:
        self.offset = self.path.stat().st_size if self.path.exists() else 0

    def since_mark(self) -> Requests:
        found = Requests()
        if not self.path.exists():
            return found
        with self.path.open("rb") as log:
            log.seek(self.offset)
            for raw in log:
                text = raw.decode("utf-8", "replace")
                if not text.startswith(PREFIX):
                    continue
                try:
                    line = json.loads(text[len(PREFIX) :])
                except ValueError:
                    continue  # a line being written as we read
                header = line.get("requestHeader") or {}
                api = str(header.get("requestApiKeyName", header.get("requestApiKey", "?")))
                found.by_client[client_of(line)][api].add(line)
        return found
