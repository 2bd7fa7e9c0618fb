"""The worker's :class:`~.sender.EndpointSender`, as chosen in its settings (``sender``)."""

from __future__ import annotations

from .aiohttp_sender import AiohttpSender
from .fast_sender import FastSender
from .sender import HttpxSender
from .settings import WorkerSettings


def make_sender(settings: WorkerSettings) -> FastSender | AiohttpSender | HttpxSender:
    """A new, unstarted sender of the kind ``settings.sender`` names, with its pool limit."""
    limit = settings.max_connections
    if settings.sender == "aiohttp":
        return AiohttpSender(max_connections=limit)
    if settings.sender == "httpx":
        return HttpxSender(max_connections=limit)
    return FastSender(max_connections=limit)
