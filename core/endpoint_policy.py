"""Which endpoints httpbus may call: the guard against server-side request forgery (SSRF).

Whoever can register a subscription makes the worker send requests, and reads the first
bytes of each answer in the DLQ. Without a policy that reaches the cloud's metadata service,
the admin API, or any host on the internal network. The policy is checked twice:
- by the control plane on the URL as written, when a subscription is created or updated
  (422 naming ``endpoint.url``);
- by the worker's sender on every address the host name resolves to, just before it
  connects, so a name that resolves to an internal address (DNS rebinding) is refused too.

The rules, in order:
1. a host or address matching ``deny`` is refused;
2. one matching ``allow`` is allowed;
3. link-local and cloud metadata addresses (``169.254.0.0/16``, ``fe80::/10``,
   ``fd00:ec2::254``, ``metadata.google.internal``), the unspecified address and multicast are
   refused, even with private networks allowed;
4. private networks (loopback, RFC 1918, unique-local ``fc00::/7``, CGNAT ``100.64.0.0/10``,
   ``localhost``) are refused unless ``allow_private_networks`` (``httpbus dev`` sets it);
5. everything else is allowed.

IPv4 is recognised in every form the resolver accepts (``127.1``, ``2130706433``,
``0x7f000001``), and IPv4-mapped IPv6 as the IPv4 address it carries.

Example::

    policy = EndpointPolicy()
    policy.url_problem("http://169.254.169.254/latest")  # "... link-local or metadata ..."
    policy.address_problem("hooks.example", "10.0.0.7")  # "... a private network ..."
"""

from __future__ import annotations

import ipaddress
import socket
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network

_METADATA_NAMES = frozenset({"metadata.google.internal", "metadata"})
_ALWAYS = tuple(
    ipaddress.ip_network(n)
    for n in ("169.254.0.0/16", "fe80::/10", "fd00:ec2::254/128", "0.0.0.0/8", "::/128")
)
_PRIVATE = tuple(
    ipaddress.ip_network(n)
    for n in (
        "127.0.0.0/8",
        "10.0.0.0/8",
        "172.16.0.0/12",
        "192.168.0.0/16",
        "100.64.0.0/10",
        "::1/128",
        "fc00::/7",
    )
)


def parse_address(host: str) -> Address | None:
    """``host`` as an IP address in any form a resolver takes, or None for a name."""
    text = host.strip("[]")
    try:
        found = ipaddress.ip_address(text)
    except ValueError:
        try:  # the legacy IPv4 forms: 127.1, 2130706433, 0x7f000001, 0177.0.0.1
            found = ipaddress.IPv4Address(socket.inet_aton(text))
        except (OSError, ValueError):
            return None
    if isinstance(found, ipaddress.IPv6Address) and found.ipv4_mapped is not None:
        return found.ipv4_mapped
    return found


class EndpointPolicy(BaseModel):
    """The rules of the module doc (settings ``endpoint_policy`` of the control plane and the
    worker)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    allow_private_networks: bool = Field(
        default=False,
        description="allow loopback, RFC 1918, unique-local and CGNAT addresses (dev: true)",
    )
    allow: tuple[str, ...] = Field(
        default=(), description="CIDRs or host names always allowed (even link-local)"
    )
    deny: tuple[str, ...] = Field(default=(), description="CIDRs or host names always refused")

    @field_validator("allow", "deny")
    @classmethod
    def _entries(cls, entries: tuple[str, ...]) -> tuple[str, ...]:
        for entry in entries:
            if "/" in entry:
                ipaddress.ip_network(entry, strict=False)  # ValueError names the bad one
        return tuple(e.lower().rstrip(".") for e in entries)

    def url_problem(self, url: str) -> str | None:
        """Why the control plane refuses ``url`` as written, or None."""
        host = (urlsplit(url).hostname or "").lower().rstrip(".")
        if not host:
            return "the endpoint URL has no host"
        address = parse_address(host)
        if address is None:
            return self._name_problem(host)
        return self.address_problem(host, str(address))

    def address_problem(self, host: str, address: str) -> str | None:
        """Why the sender refuses to connect to ``address`` (resolved from ``host``), or None."""
        ip = parse_address(address)
        if ip is None:
            return f"{host} resolved to {address!r}, which is not an IP address"
        name = host.lower().rstrip(".")
        if self._matches(self.deny, name, ip):
            return f"{host} ({ip}) is denied by the endpoint policy"
        if self._matches(self.allow, name, ip):
            return None
        if ip.is_multicast or any(ip in n for n in _ALWAYS if n.version == ip.version):
            return f"{host} ({ip}) is a link-local or metadata address; list it in allow"
        if not self.allow_private_networks and any(
            ip in n for n in _PRIVATE if n.version == ip.version
        ):
            return (
                f"{host} ({ip}) is on a private network; set "
                "endpoint_policy.allow_private_networks or list it in allow"
            )
        return None

    def _name_problem(self, name: str) -> str | None:
        if name in self.deny:
            return f"{name} is denied by the endpoint policy"
        if name in self.allow:
            return None
        if name in _METADATA_NAMES:
            return f"{name} is a cloud metadata service; list it in allow"
        local = name == "localhost" or name.endswith(".localhost")
        if local and not self.allow_private_networks:
            return (
                f"{name} is this machine; set endpoint_policy.allow_private_networks "
                "or list it in allow"
            )
        return None  # a name: its addresses are checked when the worker connects

    @staticmethod
    def _matches(entries: tuple[str, ...], name: str, ip: Address) -> bool:
        for entry in entries:
            if "/" in entry:
                network: Network = ipaddress.ip_network(entry, strict=False)
                if network.version == ip.version and ip in network:
                    return True
            elif entry == name or parse_address(entry) == ip:
                return True
        return False
