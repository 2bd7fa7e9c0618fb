"""What a service process tells its group when it joins (the ephemeral member's data): where
it listens, its process, version and start time. Example::

    await meta.join(PRODUCERS, settings.member_id, member_data(settings.host, settings.port))
"""

from __future__ import annotations

import json
import os
import time

from .version import VERSION


def member_data(host: str, port: int) -> bytes:
    return json.dumps(
        {
            "host": host,
            "port": port,
            "pid": os.getpid(),
            "version": VERSION,
            "started_ms": int(time.time() * 1000),
        }
    ).encode()
