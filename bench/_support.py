"""Helpers shared by the benchmarks: servers, load generators, CPU use, percentiles, tables.

Every process started here runs in its own session (a Ctrl-C in the terminal reaches only the
benchmark, which then stops its children in order) and is stopped by its pid on exit.

Run as a script, this module serves a *bare handler*: an endpoint that reads the body and
answers 201 with a tiny JSON, on uvicorn with uvloop and httptools like our services. On
Starlette it is the ceiling of Python HTTP on the machine; on FastAPI, the framework's own
share of a request::

    python bench/_support.py bare --framework starlette --port 8799
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import multiprocessing
import os
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from string import Template
from types import TracebackType
from typing import Any, Self, TypeVar

import httpx
from starlette.requests import Request  # module level: FastAPI resolves annotations here
from starlette.responses import JSONResponse, Response

HEALTH_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 15.0
REQUEST_TIMEOUT_S = 15.0  # above the services' produce timeout: a slow answer is still timed


@dataclass(frozen=True)
class Endpoints:
    """The shared real servers, as ``scripts.realservices`` writes them to its state file."""

    zookeeper: str
    kafka: str
    pulsar: str
    pulsar_admin: str
    postgres: str = ""  # libpq URL; "" when the state file predates PostgreSQL

    @classmethod
    def read(cls, path: Path) -> Endpoints:
        found = json.loads(path.read_text())["endpoints"]
        return cls(
            found["zookeeper"],
            found["kafka"],
            found["pulsar"],
            found["pulsar_admin"],
            found.get("postgres", ""),
        )


def server_pid(state_file: Path, name: str) -> int | None:
    """The pid of a shared real server (``zookeeper``, ``kafka``, ...) as the state file of
    ``scripts.realservices`` records it; None if it records none."""
    found = json.loads(state_file.read_text()).get("processes", {}).get(name)
    return int(found["pid"]) if found else None


async def bounded(
    jobs: Iterable[Callable[[], Awaitable[object]]],
    concurrency: int,
    *,
    tolerate: tuple[type[Exception], ...] = (),
) -> None:
    """Run ``jobs`` with at most ``concurrency`` of them at once; a job that raises one of
    ``tolerate`` counts as done (a rerun meeting what the last run made)."""
    gate = asyncio.Semaphore(concurrency)

    async def one(job: Callable[[], Awaitable[object]]) -> None:
        async with gate:
            with contextlib.suppress(*tolerate):
                await job()

    await asyncio.gather(*(one(j) for j in jobs))


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def interrupt_on_sigterm() -> None:
    """Treat SIGTERM like Ctrl-C, so ``with``/``finally`` blocks stop the children."""

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupt)


def bench_workdir(given: Path | None, prefix: str) -> Path:
    """``--workdir``, or a new temporary folder named ``prefix…``; made if missing."""
    workdir = given or Path(tempfile.mkdtemp(prefix=prefix))
    workdir.mkdir(parents=True, exist_ok=True)
    return workdir


def ran_to_the_end(run: Callable[[], None]) -> bool:
    """``run()``; False, with a word that nothing is left running, if Ctrl-C or SIGTERM (see
    :func:`interrupt_on_sigterm`) stopped it: the benches' ``with`` blocks stop their
    children on the way out. A bench's ``main`` returns 130 then."""
    try:
        run()
    except KeyboardInterrupt:
        print("\ninterrupted: every process started here has been stopped")
        return False
    return True


CLUSTERS = {"kafka": "kafka-main", "pulsar": "pulsar-main"}  # --backend: the cluster it names


class BenchRun:
    """What every bench's run starts with: its arguments, the servers, its workdir, a tag
    (ZooKeeper root, project, storage topics) and the admin token it starts httpbus with."""

    def __init__(self, args: argparse.Namespace, endpoints: Endpoints, workdir: Path) -> None:
        self.args = args
        self.endpoints = endpoints
        self.workdir = workdir
        self.tag = f"bench-{secrets.token_hex(4)}"
        self.token = secrets.token_urlsafe(24)
        self.backends = list(CLUSTERS) if args.backend == "both" else [args.backend]


def bench_setup(args: argparse.Namespace, prefix: str) -> tuple[Endpoints, Path]:
    """What a bench's ``main`` does first: SIGTERM as Ctrl-C (:func:`interrupt_on_sigterm`),
    the workdir (:func:`bench_workdir`), and the endpoints of the running servers."""
    interrupt_on_sigterm()
    workdir = bench_workdir(args.workdir, prefix)
    return Endpoints.read(args.services_file), workdir


B = TypeVar("B")


def run_and_report(bench: B, run: Callable[[B], None], report: Callable[[B], None]) -> int:
    """``run(bench)`` to the end, then ``report(bench)``: a bench's exit status (130 if
    interrupted, see :func:`ran_to_the_end`)."""
    if not ran_to_the_end(lambda: run(bench)):
        return 130
    report(bench)
    return 0


def slug(text: str) -> str:
    """``text`` as a file name part."""
    return "-".join("".join(c if c.isalnum() else " " for c in text.lower()).split())


def expect(response: httpx.Response, status: int) -> Any:
    """The JSON body of an admin API answer (None if empty); a RuntimeError naming the call
    when the status is not ``status``."""
    if response.status_code != status:
        request = response.request
        raise RuntimeError(
            f"{request.method} {request.url}: {response.status_code} {response.text}"
        )
    return response.json() if response.content else None


@contextlib.contextmanager
def warn_on_error(what: str) -> Iterator[None]:
    """For cleanup: best effort, and never hiding the run's own error."""
    try:
        yield
    except Exception as exc:
        print(f"WARNING: could not {what}: {exc!r}")


@contextlib.contextmanager
def zookeeper(hosts: str) -> Iterator[Any]:
    """A started kazoo client of ``hosts``, stopped and closed on the way out."""
    from kazoo.client import KazooClient

    zk = KazooClient(hosts=hosts, timeout=10)
    zk.start(timeout=10)
    try:
        yield zk
    finally:
        zk.stop()
        zk.close()


def drop_zookeeper_root(hosts: str, tag: str) -> None:
    """Delete a bench's ZooKeeper root ``/tag`` and all below it (a failure is only warned of)."""
    with warn_on_error(f"delete ZooKeeper /{tag}"), zookeeper(hosts) as zk:
        zk.delete(f"/{tag}", recursive=True)


def session_cpu_s(pid: int) -> float:
    """CPU-seconds (user + system, every thread) of ``pid`` so far, and of every process of
    its session if it leads one; NaN if it is gone (or /proc is missing)."""
    if not Path(f"/proc/{pid}/stat").exists():
        return math.nan
    ticks = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rpartition(")")[2].split()
        except OSError:  # ended meanwhile
            continue
        if int(stat.parent.name) == pid or int(fields[3]) == pid:
            ticks += int(fields[11]) + int(fields[12])
    return ticks / os.sysconf("SC_CLK_TCK")


class Server:
    """A server in its own process, its output in ``log``; ready once ``/healthz`` answers."""

    def __init__(self, name: str, argv: Sequence[str], port: int, log: Path) -> None:
        self.name = name
        self.argv = list(argv)
        self.port = port
        self.log = log
        self.url = f"http://127.0.0.1:{port}"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout_s: float = HEALTH_TIMEOUT_S) -> None:
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                self.argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited ({self.proc.returncode}):\n{self.tail()}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{self.url}/healthz", timeout=1).status_code == 200:
                    return
            time.sleep(0.2)
        raise RuntimeError(f"{self.name} not healthy within {timeout_s:g}s:\n{self.tail()}")

    @property
    def pid(self) -> int:
        assert self.proc is not None, "start() first"
        return self.proc.pid

    def cpu_seconds(self) -> float:
        """CPU time (user + system, all threads) used so far by the server and every process
        of its session (started with start_new_session: the children of ``--processes N``)."""
        return session_cpu_s(self.pid)

    def settle(self, timeout_s: float = 30.0, busy: float = 0.05, window_s: float = 0.5) -> float:
        """Wait (bounded) until the server uses under ``busy`` of a core, so what an earlier
        run left behind (background flushes, GC) is not billed to the next; seconds waited."""
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout_s:
            before = self.cpu_seconds()
            time.sleep(window_s)
            if not self.cpu_seconds() - before > busy * window_s:  # NaN: cannot tell, go on
                break
        return time.monotonic() - t0

    def stop(self) -> None:
        """SIGTERM (graceful: the lifespan closes its clients), SIGKILL if that hangs."""
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(STOP_TIMEOUT_S)

    def tail(self, lines: int = 40) -> str:
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return "\n".join(text.splitlines()[-lines:])

    def __enter__(self) -> Self:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


def py_spy(pid: int, seconds: float, out: Path) -> subprocess.Popen[bytes] | None:
    """Start py-spy on ``pid`` for ``seconds`` (collapsed stacks: speedscope, flamegraph.pl);
    None, with a hint, when py-spy is not in the virtualenv."""
    exe = Path(sys.executable).with_name("py-spy")
    if not exe.exists():
        print(f"  (no profile: {Path(sys.executable).parent}/pip install py-spy)")
        return None
    argv = [str(exe), "record", "--pid", str(pid), "--format", "raw", "--nonblocking"]
    argv += ["--rate", "250", "--duration", str(max(1, round(seconds))), "--output", str(out)]
    return subprocess.Popen(
        argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )


# ---------------------------------------------------------------- load generation


@dataclass(frozen=True)
class LoadSpec:
    """POST ``body`` to ``url`` over ``connections`` keep-alive connections for ``seconds``;
    ``rate`` (requests/s, all connections together) paces them, else as fast as answered."""

    url: str
    body: bytes
    headers: dict[str, str]
    connections: int
    threads: int
    seconds: float
    rate: float | None = None
    unique_ids: str | None = None  # a prefix: each request gets X-Message-Id <prefix>-<n>


@dataclass(frozen=True)
class LoadResult:
    """What one load run measured; latencies in milliseconds."""

    requests: int
    seconds: float
    statuses: dict[int, int]
    socket_errors: int
    p50_ms: float
    p99_ms: float
    p999_ms: float
    raw: str = field(default="", repr=False)

    @property
    def ok(self) -> int:
        """Requests fully accepted (200 or 201; a 207 batch had failures)."""
        return self.statuses.get(200, 0) + self.statuses.get(201, 0)

    def describe_errors(self) -> str:
        """'' when every request was accepted, else e.g. '12x503, 3 socket errors'."""
        parts = [f"{n}x{s}" for s, n in sorted(self.statuses.items()) if s not in (200, 201)]
        parts += [f"{self.socket_errors} socket errors"] if self.socket_errors else []
        return ", ".join(parts)


_WRK_SCRIPT = Template(r"""
local body_file = assert(io.open($body_path, "rb"))
wrk.method = "POST"
wrk.body = body_file:read("*a")
body_file:close()
$header_lines
local threads = {}
statuses = {}

function setup(thread)
  table.insert(threads, thread)
  thread:set("tid", #threads)
end
$request

function response(status, headers, body)
  statuses[status] = (statuses[status] or 0) + 1
end
$pacing
function done(summary, latency, requests)
  local total, parts = {}, {}
  for _, thread in ipairs(threads) do
    for status, n in pairs(thread:get("statuses")) do
      total[status] = (total[status] or 0) + n
    end
  end
  for status, n in pairs(total) do
    parts[#parts + 1] = string.format('"%d": %d', status, n)
  end
  local e = summary.errors
  io.write(string.format(
    '\nBENCH_RESULT {"requests": %d, "duration_us": %d, "statuses": {%s}, '
      .. '"socket_errors": %d, "p50_us": %d, "p99_us": %d, "p999_us": %d}\n',
    summary.requests, summary.duration, table.concat(parts, ", "),
    e.connect + e.read + e.write + e.timeout,
    latency:percentile(50), latency:percentile(99), latency:percentile(99.9)))
end
""")

# A new X-Message-Id per request (for dedupe runs, where a repeated id is not stored again).
_WRK_UNIQUE_IDS = Template(r"""
local sent = 0
function request()
  sent = sent + 1
  wrk.headers["X-Message-Id"] = $prefix .. "-" .. tid .. "-" .. sent
  return wrk.format()
end
""")

# Plain wrk has no fixed-rate mode: each thread hands out send slots ``interval_ms`` apart
# through delay() (wall clock via LuaJIT's ffi), dropping a backlog older than 100 ms rather
# than bursting to catch up. wrk times a request from its write, so the delay is not counted.
_WRK_PACING = Template(r"""
local ffi = require("ffi")
ffi.cdef[[
typedef struct { long tv_sec; long tv_usec; } bench_timeval;
int gettimeofday(bench_timeval *tv, void *tz);
]]
local tv = ffi.new("bench_timeval")
local interval_ms = $interval_ms
local next_ms = nil

function delay()
  ffi.C.gettimeofday(tv, nil)
  local now = tonumber(tv.tv_sec) * 1000 + tonumber(tv.tv_usec) / 1000
  if next_ms == nil or next_ms < now - 100 then
    next_ms = now
  end
  next_ms = next_ms + interval_ms
  return math.max(0, math.floor(next_ms - now))
end
""")


def ensure_wrk() -> str | None:
    """The path of ``wrk``; installs the Debian package when root; None if unavailable."""
    found = shutil.which("wrk")
    if found is not None or os.geteuid() != 0:
        if found is None:
            print("wrk is not installed; install it with: sudo apt-get install -y wrk")
        return found
    print("wrk is not installed; running apt-get install -y wrk")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for argv in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", "wrk"]):
        try:
            subprocess.run(argv, check=True, env=env, timeout=600, capture_output=True)
        except (OSError, subprocess.SubprocessError) as exc:
            print(f"could not install wrk ({exc})")
            return None
    return shutil.which("wrk")


def run_wrk(wrk: str, spec: LoadSpec, workdir: Path) -> LoadResult:
    """One wrk run of ``spec``; the figures come from the script's done()."""
    body_path = workdir / "body.bin"
    body_path.write_bytes(spec.body)
    pacing = ""
    if spec.rate is not None:
        pacing = _WRK_PACING.substitute(interval_ms=f"{spec.threads * 1000.0 / spec.rate:.6f}")
    script = workdir / "load.lua"
    script.write_text(
        _WRK_SCRIPT.substitute(
            # A JSON string of ASCII text is a valid Lua string literal.
            body_path=json.dumps(str(body_path)),
            header_lines="\n".join(
                f"wrk.headers[{json.dumps(k)}] = {json.dumps(v)}" for k, v in spec.headers.items()
            ),
            pacing=pacing,
            request=_WRK_UNIQUE_IDS.substitute(prefix=json.dumps(spec.unique_ids))
            if spec.unique_ids
            else "",
        )
    )
    argv = [wrk, f"-t{spec.threads}", f"-c{spec.connections}", f"-d{max(1, round(spec.seconds))}s"]
    argv += [f"--timeout={REQUEST_TIMEOUT_S:g}s", "--latency", "-s", str(script), spec.url]
    out = _run_bounded(argv, spec.seconds + REQUEST_TIMEOUT_S + 30)
    line = next((x for x in out.splitlines() if x.startswith("BENCH_RESULT ")), None)
    if line is None:
        raise RuntimeError(f"wrk printed no result:\n{out}")
    data = json.loads(line.removeprefix("BENCH_RESULT "))
    return LoadResult(
        requests=data["requests"],
        seconds=data["duration_us"] / 1e6,
        statuses={int(s): n for s, n in data["statuses"].items()},
        socket_errors=data["socket_errors"],
        p50_ms=data["p50_us"] / 1000,
        p99_ms=data["p99_us"] / 1000,
        p999_ms=data["p999_us"] / 1000,
        raw=out,
    )


def _run_bounded(argv: list[str], timeout_s: float) -> str:
    """Run ``argv`` in its own session; killed on timeout, Ctrl-C or any exception."""
    proc = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True
    )
    try:
        out = proc.communicate(timeout=timeout_s)[0].decode(errors="replace")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(STOP_TIMEOUT_S)
    if proc.returncode != 0:
        raise RuntimeError(f"{argv[0]} exited {proc.returncode}:\n{out}")
    return out


def run_httpx(spec: LoadSpec) -> LoadResult:
    """The fallback generator: ``spec.threads`` processes of asyncio + httpx (far slower
    than wrk: on a small machine it may measure itself more than the server)."""
    procs = max(1, min(spec.threads, spec.connections))
    shares = [spec.connections // procs + (i < spec.connections % procs) for i in range(procs)]
    rates = [None if spec.rate is None else spec.rate * n / spec.connections for n in shares]
    with multiprocessing.get_context("spawn").Pool(procs) as pool:
        jobs = [(spec, n, r) for n, r in zip(shares, rates, strict=True)]
        parts = pool.starmap_async(_httpx_worker, jobs).get(spec.seconds + REQUEST_TIMEOUT_S + 60)
    latencies = sorted(x for lat, _, _ in parts for x in lat)
    statuses: Counter[int] = Counter()
    for _, counted, _ in parts:
        statuses.update(counted)
    return LoadResult(
        requests=statuses.total(),
        seconds=spec.seconds,
        statuses=dict(statuses),
        socket_errors=sum(errors for _, _, errors in parts),
        p50_ms=percentile(latencies, 50),
        p99_ms=percentile(latencies, 99),
        p999_ms=percentile(latencies, 99.9),
    )


def _httpx_worker(
    spec: LoadSpec, connections: int, rate: float | None
) -> tuple[list[float], dict[int, int], int]:
    latencies: list[float] = []
    statuses: Counter[int] = Counter()
    errors = 0
    interval = connections / rate if rate else 0.0

    async def connection(client: httpx.AsyncClient, index: int, deadline: float) -> None:
        nonlocal errors
        next_at = time.perf_counter() + interval * index / connections
        while (now := time.perf_counter()) < deadline:
            if interval:
                await asyncio.sleep(max(0.0, next_at - now))
                next_at = max(next_at + interval, time.perf_counter() - 0.1)
            t0 = time.perf_counter()
            extra = {}
            if spec.unique_ids:
                extra["X-Message-Id"] = f"{spec.unique_ids}-{os.getpid()}-{index}-{t0}"
            try:
                response = await client.post(spec.url, content=spec.body, headers=extra)
            except httpx.HTTPError:
                errors += 1
                continue
            latencies.append((time.perf_counter() - t0) * 1000)
            statuses[response.status_code] += 1

    async def all_connections() -> None:
        # A client per connection (one shared pool serialises on its lock under load), all
        # sharing one TLS context (each would build its own, slowly), made before the clock.
        tls = ssl.create_default_context()
        clients = [
            httpx.AsyncClient(timeout=REQUEST_TIMEOUT_S, headers=spec.headers, verify=tls)
            for _ in range(connections)
        ]
        deadline = time.perf_counter() + spec.seconds
        try:
            await asyncio.gather(*(connection(c, i, deadline) for i, c in enumerate(clients)))
        finally:
            await asyncio.gather(*(c.aclose() for c in clients))

    asyncio.run(all_connections())
    return latencies, dict(statuses), errors


# ---------------------------------------------------------------- figures


def host_cpu() -> tuple[float, float]:
    """(busy, total) CPU time of the whole machine so far, in clock ticks; NaNs without /proc."""
    try:
        ticks = [int(x) for x in Path("/proc/stat").read_text().split("\n")[0].split()[1:9]]
    except OSError:
        return math.nan, math.nan
    return sum(ticks) - ticks[3] - ticks[4], sum(ticks)  # all but idle and iowait


class Cpu:
    """CPU used during a ``with`` block, as a share of the wall time: ``process`` (from
    ``process_seconds``; 1.0 is one core) and ``host`` (the whole machine; 1.0 is all cores)."""

    def __init__(self, process_seconds: Callable[[], float] = time.process_time) -> None:
        self.process_seconds = process_seconds
        self.process = self.host = math.nan

    def __enter__(self) -> Self:
        self._start = time.monotonic(), self.process_seconds(), host_cpu()
        return self

    def __exit__(self, *exc_info: object) -> None:
        wall, process, (busy, total) = self._start
        self.process = (self.process_seconds() - process) / (time.monotonic() - wall)
        busy_now, total_now = host_cpu()
        self.host = (busy_now - busy) / max(1.0, total_now - total)


def load_average() -> float:
    """The 1-minute load average of the machine (NaN where /proc is missing): printed before
    each run, since on a shared machine it says how much the figures may be moved by others."""
    try:
        return float(Path("/proc/loadavg").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return math.nan


def percentile(ordered: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (nearest rank) of an ascending sequence; NaN if empty."""
    if not ordered:
        return math.nan
    return ordered[min(len(ordered), max(1, math.ceil(q / 100 * len(ordered)))) - 1]


def fmt(value: float | None, digits: int = 1) -> str:
    """A figure for a table: thousands separated, '-' when there is none."""
    return "-" if value is None or math.isnan(value) else f"{value:,.{digits}f}"


def print_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    """A plain-text table: the first column left-aligned, the others right-aligned."""
    widths = [max(len(r[i]) for r in [headers, *rows]) for i in range(len(headers))]
    for row in [headers, ["-" * w for w in widths], *rows]:
        cells = [c.rjust(w) for c, w in zip(row, widths, strict=True)]
        cells[0] = row[0].ljust(widths[0])
        print("  ".join(cells).rstrip())


# ---------------------------------------------------------------- the bare handlers


def bare_app(framework: str) -> Any:
    """POST anywhere: read the body, answer 201 ``{"size": n}``; GET /healthz."""

    async def accept(request: Request) -> Response:
        return JSONResponse({"size": len(await request.body())}, status_code=201)

    async def healthz(request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    if framework == "fastapi":
        from fastapi import FastAPI

        app = FastAPI()
        app.add_api_route("/healthz", healthz, methods=["GET"])
        app.add_api_route("/{path:path}", accept, methods=["POST"])
        return app
    from starlette.applications import Starlette
    from starlette.routing import Route

    routes = [Route("/healthz", healthz), Route("/{path:path}", accept, methods=["POST"])]
    return Starlette(routes=routes)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Servers the benchmarks measure against.")
    parser.add_argument("server", choices=["bare"])
    parser.add_argument("--framework", choices=["starlette", "fastapi"], default="starlette")
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args(argv)
    import uvicorn

    app = bare_app(args.framework)
    uvicorn.run(
        app,
        host="127.0.0.1",
        port=args.port,
        loop="uvloop",
        http="httptools",
        log_level="warning",
        access_log=False,
        proxy_headers=False,  # as the producer service
    )


if __name__ == "__main__":
    main()


def add_run_args(p: argparse.ArgumentParser) -> None:
    """``--services-file`` and ``--workdir``, the same in every benchmark."""
    p.add_argument(
        "--services-file",
        type=Path,
        default=Path("/tmp/httpbus-services/state.json"),
        help="endpoints of the running servers (written by scripts.realservices)",
    )
    p.add_argument("--workdir", type=Path, help="for logs and outputs (default: a new temp dir)")
