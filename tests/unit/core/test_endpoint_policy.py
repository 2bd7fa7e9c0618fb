"""The endpoint policy (SSRF, issue 17): every form of an internal address refused unless
allowed, names checked again at connect time, and the dev default still reaching 127.0.0.1."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path
from typing import Any

import pytest

from cli.dev import dev_settings
from control_plane.settings import ControlPlaneSettings
from core.endpoint_policy import EndpointPolicy
from core.result import ErrorKind
from delivery_workers.http_sender import HttpSender
from delivery_workers.sender import Delivery
from delivery_workers.settings import WorkerSettings
from tests.support.control_plane import create_shop, embedded_control_plane
from tests.support.hook import serve_hook
from tests.support.senders import delivery_to

STRICT = EndpointPolicy()
DEV = EndpointPolicy(allow_private_networks=True)
INTERNAL = [
    "http://169.254.169.254/latest/meta-data/",
    "http://10.0.0.7/hook",
    "http://172.16.4.4/hook",
    "http://192.168.1.1/hook",
    "http://100.64.0.1/hook",
    "http://[::1]:8080/hook",
    "http://[fd12::1]/hook",
    "http://[::ffff:127.0.0.1]/hook",
    "http://localhost:8700/v1/projects",
    "http://api.localhost/hook",
    "http://127.0.0.1:8700/v1/projects",  # the admin API itself
    "http://127.1/hook",
    "http://2130706433/hook",
    "http://0x7f000001/hook",
    "http://0177.0.0.1/hook",
    "http://metadata.google.internal/computeMetadata/v1/",
    "http://[fd00:ec2::254]/latest",
]


@pytest.mark.parametrize("url", INTERNAL)
def test_every_form_of_an_internal_address_is_refused_by_default(url: str) -> None:
    assert STRICT.url_problem(url) is not None


@pytest.mark.parametrize("url", ["https://hooks.example.com/in", "http://8.8.8.8/hook"])
def test_public_endpoints_pass(url: str) -> None:
    assert STRICT.url_problem(url) is None


def test_metadata_and_link_local_stay_refused_even_in_dev_unless_allowed() -> None:
    assert DEV.url_problem("http://127.0.0.1:9/hook") is None
    assert DEV.url_problem("http://10.0.0.7/hook") is None
    for url in (INTERNAL[0], INTERNAL[-2], INTERNAL[-1]):
        assert DEV.url_problem(url) is not None
    allowed = EndpointPolicy(allow=("169.254.169.254", "metadata.google.internal"))
    assert allowed.url_problem(INTERNAL[0]) is None
    assert allowed.url_problem(INTERNAL[-2]) is None


def test_deny_wins_and_allow_takes_cidrs() -> None:
    policy = EndpointPolicy(allow=("10.1.0.0/16",), deny=("hooks.example.com", "8.8.8.0/24"))
    assert policy.url_problem("http://10.1.2.3/") is None
    assert policy.url_problem("http://10.2.0.1/") is not None
    assert policy.url_problem("https://hooks.example.com/") is not None
    assert policy.url_problem("http://8.8.8.8/") is not None
    with pytest.raises(ValueError):
        EndpointPolicy(allow=("10.0.0.0/99",))


def test_the_settings_default_refuses_private_networks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HTTPBUS_ENDPOINT_POLICY__ALLOW_PRIVATE_NETWORKS", raising=False)
    assert WorkerSettings().endpoint_policy == STRICT


async def test_the_control_plane_refuses_an_internal_endpoint_with_422(tmp_path: Path) -> None:
    async with embedded_control_plane(tmp_path, endpoint_policy=STRICT) as cp:
        await create_shop(cp.client)
        sub = {"name": "s1", "topic": "orders", "endpoint": {"url": "http://169.254.169.254/"}}
        r = await cp.client.post("/v1/projects/shop/subscriptions", json=sub)
        assert r.status_code == 422, r.text
        assert r.json()["details"]["fields"][0]["field"] == "endpoint.url"
        sub["endpoint"] = {"url": "https://hooks.example.com/in"}
        created = await cp.client.post("/v1/projects/shop/subscriptions", json=sub)
        assert created.status_code == 201, created.text
        version = created.json()["version"]
        moved = {"endpoint": {"url": "http://2130706433/hook"}, "version": version}
        r = await cp.client.put("/v1/projects/shop/subscriptions/s1", json=moved)
        assert r.status_code == 422 and "endpoint.url" in r.text


def _delivery(url: str) -> Delivery:
    return delivery_to(url, name="s")


async def test_a_name_that_resolves_inside_is_refused_at_connect_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A public-looking name passes the URL check, then resolves to 127.0.0.1 (DNS
    rebinding): the sender checks what it would connect to, and never sends."""
    real = socket.getaddrinfo

    def rebinding(host: str, *args: Any, **kwargs: Any) -> Any:
        return real("127.0.0.1" if host == "rebind.example" else host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", rebinding)
    async with serve_hook() as hook:
        url = hook.url.replace("127.0.0.1", "rebind.example")
        assert STRICT.url_problem(url) is None
        async with HttpSender(policy=STRICT) as sender:
            result = await sender.send(_delivery(url))
        assert not result.succeeded and "private network" in (result.error or "")
        assert result.error_kind is ErrorKind.INVALID_REQUEST  # to the DLQ, not retried
        assert hook.requests == []
        async with HttpSender(policy=DEV) as sender:  # the dev default still delivers
            assert (await sender.send(_delivery(url))).succeeded
        assert len(hook.requests) == 1


def test_httpbus_dev_allows_private_networks_and_tells_its_worker(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("HTTPBUS_ENDPOINT_POLICY__ALLOW_PRIVATE_NETWORKS", raising=False)
    monkeypatch.delenv("HTTPBUS_CONFIG", raising=False)
    settings = dev_settings(None, tmp_path, "127.0.0.1", 8700)
    assert settings.endpoint_policy == DEV
    assert ControlPlaneSettings(admin_token="x" * 24).endpoint_policy == STRICT


# --- IPv6 forms that carry an IPv4 address (issue 38) ---------------------------------------

CARRIED = {  # the URL's host -> the IPv4 address it carries
    "[64:ff9b::a00:1]": "10.0.0.1",  # NAT64, well-known prefix
    "[64:ff9b:1::a00:1]": "10.0.0.1",  # NAT64, local-use prefix (/96 layout)
    "[64:ff9b:1:a00:0:100::]": "10.0.0.1",  # NAT64, local-use prefix (/48 layout)
    "[::127.0.0.1]": "127.0.0.1",  # IPv4-compatible
    "[2002:7f00:1::]": "127.0.0.1",  # 6to4
    "[::ffff:0:7f00:1]": "127.0.0.1",  # IPv4-translated
    "[2001:0:4136:e378:8000:63bf:80ff:fffe]": "127.0.0.1",  # Teredo, client 127.0.0.1
    "[64:ff9b::a9fe:a9fe]": "169.254.169.254",
    "[::169.254.169.254]": "169.254.169.254",
    "[::ffff:169.254.169.254]": "169.254.169.254",
}
METADATA = [
    "http://[64:ff9b::a9fe:a9fe]/",
    "http://[::169.254.169.254]/",
    "http://[2002:a9fe:a9fe::]/",
    "http://100.100.100.200/latest/meta-data/",
    "http://[64:ff9b::6464:64c8]/",  # 100.100.100.200 through NAT64
    "http://169.254.170.2/v2/credentials",
    "http://[fd00:ec2::254]/",
    "http://[fd20:ce::254]/",
    "http://metadata.tencentyun.com/",
]


@pytest.mark.parametrize("host", CARRIED)
def test_an_ipv6_form_is_judged_as_the_ipv4_address_it_carries(host: str) -> None:
    """Refused as its IPv4 address is, and, being private, even where private networks are
    allowed: write the address itself (or list it in allow)."""
    url, inner = f"http://{host}/hook", CARRIED[host]
    for policy in (STRICT, DEV):
        problem = policy.url_problem(url)
        assert problem is not None and f"{inner})" in problem, problem
    allowed = EndpointPolicy(allow=(f"{inner}/32",))
    if not inner.startswith("169.254."):
        assert allowed.url_problem(url) is None
        assert DEV.url_problem(f"http://{inner}/hook") is None


@pytest.mark.parametrize("url", METADATA)
@pytest.mark.parametrize("policy", [STRICT, DEV], ids=["default", "dev"])
def test_cloud_metadata_is_refused_under_every_policy(policy: EndpointPolicy, url: str) -> None:
    problem = policy.url_problem(url)
    assert problem is not None and "metadata" in problem, problem
    assert "public" in problem  # says what to do instead


def test_a_cidr_in_allow_does_not_open_a_metadata_address() -> None:
    wide = EndpointPolicy(allow=("169.254.0.0/16", "100.64.0.0/10"))
    assert wide.url_problem("http://169.254.10.1/") is None
    assert wide.url_problem("http://169.254.169.254/") is not None
    assert wide.url_problem("http://100.100.100.200/") is not None
    exact = EndpointPolicy(allow=("100.100.100.200",))
    assert exact.url_problem("http://100.100.100.200/") is None


@pytest.mark.parametrize(
    "host", ["[2606:4700::1111]", "[64:ff9b::808:808]", "[2002:808:808::]", "[64:ff9b:1::808:808]"]
)
def test_ipv6_forms_of_public_addresses_pass(host: str) -> None:
    assert STRICT.url_problem(f"http://{host}/hook") is None


REFUSED_AT_CREATE = [*(f"http://{h}/hook" for h in CARRIED), *METADATA]


@pytest.mark.parametrize("policy", [STRICT, DEV], ids=["default", "dev"])
async def test_the_control_plane_refuses_every_form_at_create(
    tmp_path: Path, policy: EndpointPolicy
) -> None:
    """Under the default policy and under dev (which allows 127.0.0.1 written as such)."""
    async with embedded_control_plane(tmp_path, endpoint_policy=policy) as cp:
        await create_shop(cp.client)
        for n, url in enumerate(REFUSED_AT_CREATE):
            sub = {"name": f"s{n}", "topic": "orders", "endpoint": {"url": url}}
            r = await cp.client.post("/v1/projects/shop/subscriptions", json=sub)
            assert r.status_code == 422, (url, r.text)
            body = r.json()
            assert body["code"] == "validation_failed"
            assert body["details"]["fields"][0]["field"] == "endpoint.url"
            assert "public" in body["message"], body["message"]
            project = {"name": f"p{n}", "notification_url": url}
            r = await cp.client.post("/v1/projects", json=project)
            assert r.status_code == 422 and "notification_url" in r.text, (url, r.text)


@pytest.mark.parametrize("host", list(CARRIED) + ["100.100.100.200"])
async def test_the_sender_refuses_every_form_at_connect(host: str) -> None:
    """The sender resolves the host and judges the address it would connect to: a literal
    that slipped past the control plane never gets a connection."""
    url = f"http://{host}:9/hook"
    for policy in (STRICT, DEV):
        async with HttpSender(policy=policy) as sender:
            result = await sender.send(_delivery(url))
        assert result.error_kind is ErrorKind.INVALID_REQUEST, result
        assert "endpoint refused" in (result.error or "")


@pytest.mark.parametrize("address", ["::ffff:0:7f00:1", "64:ff9b::a9fe:a9fe", "::a9fe:a9fe"])
async def test_a_name_resolving_to_an_ipv6_form_is_refused_at_connect(
    monkeypatch: pytest.MonkeyPatch, address: str
) -> None:
    """DNS answering an IPv6 form of an inside address: refused under the default policy
    and under dev."""

    async def resolve(self: Any, host: str, port: int, **kwargs: Any) -> Any:
        return [(socket.AF_INET6, socket.SOCK_STREAM, 6, "", (address, port, 0, 0))]

    monkeypatch.setattr(asyncio.get_running_loop().__class__, "getaddrinfo", resolve)
    url = "http://hooks.example.com:9/hook"
    for policy in (STRICT, DEV):
        async with HttpSender(policy=policy) as sender:
            result = await sender.send(_delivery(url))
        assert result.error_kind is ErrorKind.INVALID_REQUEST, result
        assert "endpoint refused" in (result.error or "")
