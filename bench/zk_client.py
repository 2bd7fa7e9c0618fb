"""kazoo's answers a second beside a busy thread: the wait on its socket and the GIL's switch
interval (metastore/zk_handler.py, core/gil.py).

    .venv/bin/python bench/zk_client.py [--requests 2000] [--in-flight 250]
        [--services-file /tmp/httpbus-services/state.json]

A worker's event loop shares the interpreter with kazoo's threads; when the loop is busy, each
system call of kazoo's connection thread hands the GIL over and waits to get it back. Each run
sends ``--requests`` reads of one node (``--in-flight`` at a time) from a kazoo client on the
shared ZooKeeper while another thread of the process keeps the GIL busy, and prints answers a
second, the process's CPU per answer (the busy thread's left out) and the ratio to kazoo as
shipped (its ``selector_select`` wait, CPython's 5 ms switch interval) in the same sitting.
"""

from __future__ import annotations

import argparse
import resource
import sys
import threading
import time
from pathlib import Path

import _support as s
from kazoo.client import KazooClient
from kazoo.handlers.threading import SequentialThreadingHandler

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from metastore.zk_handler import PollHandler

NODE = "/bench-zk-client"
RUNS = [  # (name, handler class, switch interval s)
    ("kazoo as shipped, 5 ms", SequentialThreadingHandler, 0.005),
    ("poll wait, 5 ms", PollHandler, 0.005),
    ("kazoo as shipped, 1 ms", SequentialThreadingHandler, 0.001),
    ("poll wait, 1 ms (httpbus)", PollHandler, 0.001),
]


def _cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def one(
    hosts: str, handler: type[SequentialThreadingHandler], args: argparse.Namespace
) -> tuple[float, float]:
    """(answers a second, CPU-seconds a thousand answers, the busy thread's left out)."""
    client = KazooClient(hosts=hosts, handler=handler())
    client.start(timeout=15)
    client.ensure_path(NODE)
    stop = threading.Event()
    spun: list[float] = []

    def busy() -> None:  # a loop that never waits, as a busy event loop does not
        while not stop.is_set():
            sum(range(1_000))
        spun.append(time.thread_time())  # its own CPU, left out of the answers' cost

    spinner = threading.Thread(target=busy, daemon=True)
    spinner.start()
    try:
        cpu0, t0 = _cpu_s(), time.monotonic()
        for _ in range(0, args.requests, args.in_flight):
            for answer in [client.get_async(NODE) for _ in range(args.in_flight)]:
                answer.get(timeout=60)
        wall, cpu = time.monotonic() - t0, _cpu_s() - cpu0
    finally:
        stop.set()
        spinner.join()
        client.stop()
        client.close()
    sent = args.requests // args.in_flight * args.in_flight
    return sent / wall, (cpu - spun[0]) / sent * 1_000


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--requests", type=int, default=2_000, help="reads per run (bounded)")
    p.add_argument("--in-flight", type=int, default=250, help="reads on the wire at once")
    p.add_argument("--services-file", type=Path, default=Path("/tmp/httpbus-services/state.json"))
    args = p.parse_args(argv)
    hosts = s.Endpoints.read(args.services_file).zookeeper
    print(f"load average {s.load_average():.2f}; {args.requests} reads, {args.in_flight} in flight")
    base: float | None = None
    for name, handler, interval in RUNS:
        sys.setswitchinterval(interval)
        rate, cpu = one(hosts, handler, args)
        base = base or rate
        print(f"  {name:28s} {rate:8.0f} answers/s  {cpu:6.2f} CPU-s/1000  ×{rate / base:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
