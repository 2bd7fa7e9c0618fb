"""Schemathesis, a maintained OpenAPI fuzzer, against both HTTP APIs of ``httpbus dev``.

Every operation of the control plane and of the producer is called with generated requests
(bounded: a fixed seed, ``MAX_EXAMPLES`` per operation, a deadline), authenticated with the
admin token. The run must find no 5xx and no answer the OpenAPI does not document: status
codes, content types, headers and response bodies all match it (``core/openapi.py`` makes the
documents say what errors look like). The producer's operations are aimed at a topic that
exists, so its produce logic is reached, not just its 404.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.dev import Dev, run_dev

TOKEN = "fuzz-test-admin-token-0123456789"
MAX_EXAMPLES = int(os.environ.get("HTTPBUS_FUZZ_EXAMPLES", "25"))
# A fixed seed keeps CI reproducible; HTTPBUS_FUZZ_SEED explores other runs by hand.
SEED = int(os.environ.get("HTTPBUS_FUZZ_SEED", "20261124"))
CHECKS = ",".join(
    [
        "not_a_server_error",
        "status_code_conformance",
        "content_type_conformance",
        "response_headers_conformance",
        "response_schema_conformance",
    ]
)


@pytest.fixture(scope="module")
def dev(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Dev]:
    with run_dev(tmp_path_factory.mktemp("fuzz"), TOKEN) as running:
        auth = {"Authorization": f"Bearer {TOKEN}"}
        api = f"{running.control_plane}/v1/projects"
        assert httpx.post(api, json={"name": "shop"}, headers=auth).status_code == 201
        created = httpx.post(f"{api}/shop/topics", json={"name": "orders"}, headers=auth)
        assert created.status_code == 201, created.text
        yield running


@pytest.mark.parametrize("service", ["control_plane", "producer"])
def test_the_fuzzer_finds_no_5xx_and_no_undocumented_answer(
    dev: Dev, service: str, tmp_path: Path
) -> None:
    config = tmp_path / "schemathesis.toml"
    config.write_text('[parameters]\n"path.project" = "shop"\n"path.topic" = "orders"\n')
    base = getattr(dev, service)
    argv = [str(Path(sys.executable).with_name("st"))]
    if service == "producer":
        argv += ["--config-file", str(config)]
    argv += [
        "run",
        f"{base}/openapi.json",
        "-H",
        f"Authorization: Bearer {TOKEN}",
        f"--checks={CHECKS}",
        "--phases=examples,fuzzing",
        f"--max-examples={MAX_EXAMPLES}",
        f"--seed={SEED}",
        "--workers=1",
        "--no-color",
    ]
    started = time.monotonic()
    run = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    took = time.monotonic() - started
    out = run.stdout + run.stderr
    cases = re.search(r"(\d+) generated", out)
    operations = re.search(r"Tested: (\d+)", out)
    print(
        f"\n[{service}] schemathesis: {operations.group(1) if operations else '?'} operations, "
        f"{cases.group(1) if cases else '?'} cases in {took:.1f} s (seed {SEED})"
    )
    assert run.returncode == 0, out[-6000:]
