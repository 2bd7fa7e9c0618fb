"""Fixtures for the real servers.

Under ``make test`` the servers are already up (``scripts.realservices run``) and
``HTTPBUS_SERVICES_FILE`` names their endpoints. A plain ``pytest tests/integration`` starts
them itself, once per session, on a run folder of its own, and stops them at the end (the
kernel kills them too if pytest dies). Every test names its own topics and znodes with a
random suffix, so tests never see each other's data.
"""

from __future__ import annotations

import contextlib
import gc
import os
import shutil
import sys
import tempfile
import uuid
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.dependencies import models as fastapi_models

from scripts.realservices.__main__ import DEFAULT_CACHE, NAMES

# The suite's endpoints listen on 127.0.0.1, as a developer's do under `httpbus dev`: every
# control plane and worker it builds (in process or as a child) allows private networks. The
# policy's own tests pass their policy explicitly (tests/unit/core/test_endpoint_policy.py).
os.environ.setdefault("HTTPBUS_ENDPOINT_POLICY__ALLOW_PRIVATE_NETWORKS", "true")
# A pytest-xdist worker (make test's lanes) starts with COLUMNS=80 in its environment, and a
# rich Console built at import (the CLI's) would keep that width for good: the CLI tests give
# each command its own COLUMNS, as a terminal would.
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.pop("COLUMNS", None)
    os.environ.pop("LINES", None)
from scripts.realservices.supervisor import Supervisor
from tests.support import socket_sites
from tests.support.services import RealServices, load

socket_sites.install()


@pytest.fixture(scope="session")
def real_services() -> Iterator[RealServices]:
    """Endpoints of the real ZooKeeper, Kafka and Pulsar of this test run."""
    given = os.environ.get("HTTPBUS_SERVICES_FILE")
    if given:
        yield load(Path(given))
        return
    run_dir = Path(tempfile.mkdtemp(prefix="httpbus-pytest-services-"))
    sup = Supervisor(run_dir, DEFAULT_CACHE)
    sup.start(NAMES, die_with_parent=True)
    try:
        yield load(sup.state_file)
    finally:
        sup.stop()


@pytest.fixture(scope="session")
def postgres_server(real_services: RealServices) -> Iterator[str]:
    """The URL of a real PostgreSQL: the one of ``real_services``, or (when its state file has
    none) one started here on a free port, on a run folder of its own, stopped at the end."""
    if real_services.postgres:
        yield real_services.postgres
        return
    import socket

    from scripts.realservices.servers import Ports

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = int(sock.getsockname()[1])
    run_dir = Path(tempfile.mkdtemp(prefix="httpbus-pytest-postgres-"))
    sup = Supervisor(run_dir, DEFAULT_CACHE, Ports(postgres=port))
    sup.start(["postgres"], die_with_parent=True)
    try:
        yield load(sup.state_file).postgres
    finally:
        sup.stop()
        shutil.rmtree(run_dir, ignore_errors=True)


@pytest.fixture
def postgres_database(postgres_server: str, unique: str) -> Iterator[str]:
    """A fresh database of its own on the real PostgreSQL (dropped after the test)."""
    import psycopg

    name = f"t_{unique}"
    with psycopg.connect(postgres_server, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield postgres_server.rsplit("/", 1)[0] + f"/{name}"
    finally:
        with psycopg.connect(postgres_server, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """One local[2] SparkSession for the whole test run (a JVM start costs seconds), with the
    Kafka connector's jars when they resolve (``scripts.realservices fetch``), so the unit and
    the integration tests share it. Stopped at the end of the run."""
    pytest.importorskip("pyspark")
    from scripts.realservices.maven import spark_jars
    from spark.session import build_session

    try:
        jars = spark_jars(DEFAULT_CACHE)
    except Exception:  # no Maven here: the unit tests need no connector
        jars = []
    session = build_session(
        "local[2]",
        jars=jars,
        app_name="httpbus-tests",
        config={"spark.sql.shuffle.partitions": "2", "spark.default.parallelism": "2"},
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # py4j leaves the sockets of collected results to the garbage collector (a pyspark trait,
    # not ours): their ResourceWarning must not fail the tests that use Spark.
    mark = pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
    for item in items:
        if "spark" in getattr(item, "fixturenames", ()):
            item.add_marker(mark)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--lanes",
        action="store_true",
        help="with -n 2: the tests of the shared servers in one worker, the rest in the other",
    )


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``make test`` runs two pytest workers (``-n 2 --lanes``), one per lane (:func:`_lane`).
    Each lane keeps its order and runs one test at a time, so no fault test ever shares the
    shared servers with another."""
    if not config.getoption("lanes"):
        return None
    from xdist.scheduler import LoadScopeScheduling

    class Lanes(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return _lane(nodeid)

    return Lanes(config, log)


OWN_LANE = ("tests/chaos/", "tests/unit/")


def _lane(nodeid: str) -> str:
    """``shared``: the tests of the suite's shared servers (started by ``make test``), one at
    a time. ``own``: the chaos tests, which start clusters of their own (or only use the shared
    ZooKeeper under names of their own), then the unit tests (no servers, CPU only, niced).
    The shared lane was the whole run's length (CI 2026-11-28: 40 min) with the chaos tests in
    it; beside the unit tests they fill the other lane's waiting instead (a lanes run at load
    3-6: the shared lane 35 min, the own lane done after 22)."""
    return "own" if nodeid.startswith(OWN_LANE) else "shared"


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """The chaos matrix: every chaos run's verdict of this process, one line each (``make
    chaos`` runs in one process; under xdist the verdicts stay in the workers)."""
    checker = sys.modules.get("tests.chaos.checker")
    if checker is not None and checker.RUNS:
        terminalreporter.section("chaos matrix (tests/chaos/checker.py)")
        for line in checker.matrix(checker.RUNS):
            terminalreporter.write_line(line)


def pytest_runtest_setup(item: pytest.Item) -> None:
    # The unit tests step aside (nice 19): the other lanes' deadlines are measured against
    # real servers, the unit tests' own are held under a load of 12. A chaos test, which runs
    # before them in their lane, runs at the normal priority.
    lanes = item.config.getoption("lanes") and os.environ.get("PYTEST_XDIST_WORKER")
    if lanes:
        _niceness(19 if item.nodeid.startswith("tests/unit/") else 0)


def _niceness(wanted: int) -> None:
    """Set this thread's niceness (and that of the threads and processes it starts from now
    on); lowering it needs root, which the chaos tests need anyway."""
    if os.getpriority(os.PRIO_PROCESS, 0) != wanted:
        with contextlib.suppress(PermissionError):
            os.setpriority(os.PRIO_PROCESS, 0, wanted)


# FastAPI classifies each endpoint function once, in lru_caches of 4 096 entries keyed by the
# function: our routers define their endpoints inside a function per app, so every app a test
# builds stays alive in them (the control plane's ~300 routes and their closures, 25 000
# objects an app), dozens at a time. Production builds one app per process.
_FASTAPI_CACHES = [
    getattr(fastapi_models, name)
    for name in (
        "_is_gen_callable_cached",
        "_is_async_gen_callable_cached",
        "_is_coroutine_callable_cached",
    )
    if hasattr(getattr(fastapi_models, name, None), "cache_clear")
]


@pytest.fixture(autouse=True)
def forget_apps_after() -> Iterator[None]:
    """After each test, let the apps it built go: FastAPI's caches of endpoint functions
    held them, and the unit suite's heap grew to 5.5 million objects (a full collection took
    5.5 s at load 10: tests/unit/producer_api/test_quotas.py)."""
    yield
    for cache in _FASTAPI_CACHES:
        cache.cache_clear()


@pytest.fixture(autouse=True)
def collect_garbage_after(request: pytest.FixtureRequest) -> Iterator[None]:
    """After an integration test, collect garbage: a socket or transport it left unclosed in a
    reference cycle then warns (an error here) in this test, not in whichever later test the
    collector happens to run in (CI once blamed 213 unclosed sockets on the wrong test). A
    socket's failure names where it was connected (``tests/support/socket_sites.py``)."""
    yield
    if "integration" not in request.node.path.parts:
        return
    with warnings.catch_warnings(record=True) as recorded:
        warnings.simplefilter("always", ResourceWarning)
        gc.collect()
    leaked = socket_sites.leaks(recorded)
    if leaked and "spark" not in request.fixturenames:  # py4j's sockets: see above
        pytest.fail("left unclosed by this test:\n" + "\n".join(leaked), pytrace=False)


@pytest.fixture
def unique() -> str:
    """A random suffix for the names a test creates."""
    return uuid.uuid4().hex[:10]
