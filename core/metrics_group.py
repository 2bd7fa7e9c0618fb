"""One scrape for a group of processes (:mod:`core.prefork`): the process that answers
``/metrics`` adds its siblings' series, read from their private sockets, and labels every
series with ``process``, so ``sum by (…)`` in a query gives the service's figures.

A sibling that does not answer within ``PEER_TIMEOUT_S`` (it is restarting) is left out of
that scrape; a counter then drops for one scrape, which Prometheus's ``rate`` treats as a
counter reset, the same as a restarted process.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import httpx
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector

from .prefork import Slot

PEER_TIMEOUT_S = 2.0
LOCAL = "local"  # the query parameter of a sibling's own scrape


async def gather(own: bytes, slot: Slot) -> bytes:
    """``own`` exposition plus every sibling's, each series labelled with its process."""
    texts = await asyncio.gather(*(_peer(slot, i) for i in slot.peers))
    parts = {slot.index: own.decode(), **dict(zip(slot.peers, texts, strict=True))}
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Merged({i: t for i, t in parts.items() if t is not None}))
    return generate_latest(registry)


async def _peer(slot: Slot, index: int) -> str | None:
    transport = httpx.AsyncHTTPTransport(uds=str(slot.socket_path(index)))
    try:
        async with httpx.AsyncClient(transport=transport, timeout=PEER_TIMEOUT_S) as client:
            response = await client.get(f"http://process/metrics?{LOCAL}=1")
    except httpx.HTTPError:
        return None
    return response.text if response.status_code == 200 else None


class _Merged(Collector):
    def __init__(self, texts: dict[int, str]) -> None:
        self._texts = texts

    def collect(self) -> Iterator[Metric]:
        families: dict[str, Metric] = {}
        for index, text in sorted(self._texts.items()):
            for family in text_string_to_metric_families(text):
                merged = families.setdefault(
                    family.name, Metric(family.name, family.documentation, family.type)
                )
                merged.samples += [
                    s._replace(labels={**s.labels, "process": str(index)}) for s in family.samples
                ]
        yield from families.values()
