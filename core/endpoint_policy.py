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
2. the known cloud metadata services (:data:`METADATA_ADDRESSES`, :data:`METADATA_NAMES`)
   are refused under every policy, unless ``allow`` names that very address or name (a
   CIDR in ``allow`` does not open them);
3. one matching ``allow`` is allowed;
4. link-local addresses (``169.254.0.0/16``, ``fe80::/10``), the unspecified address and
   multicast are refused, even with private networks allowed;
5. private networks (loopback, RFC 1918, unique-local ``fc00::/7``, CGNAT ``100.64.0.0/10``,
   ``localhost``) are refused unless ``allow_private_networks`` (``httpbus dev`` sets it);
6. everything else is allowed.

IPv4 is recognised in every form the resolver accepts (``127.1``, ``2130706433``,
``0x7f000001``), and an IPv6 address that carries an IPv4 one is judged as that IPv4 address
too (:func:`embedded_ipv4`): IPv4-mapped ``::ffff:a.b.c.d``, IPv4-translated
``::ffff:0:a.b.c.d``, IPv4-compatible ``::a.b.c.d``, NAT64 ``64:ff9b::/96`` and the
local-use ``64:ff9b:1::/48`` (every RFC 6052 layout its prefix allows), 6to4 ``2002::/16``
and Teredo ``2001::/32`` (the client, the last 32 bits inverted). A translator or relay on
the way would deliver to that IPv4 address, so the IPv6 form must not pass where it fails.

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

METADATA_NAMES = frozenset(
    {
        "metadata",
        "metadata.google.internal",  # Google Cloud
        "metadata.goog",
        "metadata.tencentyun.com",  # Tencent Cloud
        "instance-data",  # AWS
        "instance-data.ec2.internal",
    }
)
METADATA_ADDRESSES = frozenset(
    ipaddress.ip_address(a)
    for a in (
        "169.254.169.254",  # AWS, Azure, Google, Oracle, DigitalOcean, OpenStack, ...
        "fd00:ec2::254",  # AWS over IPv6
        "169.254.170.2",  # AWS ECS task metadata and credentials
        "169.254.170.23",  # AWS EKS pod identity
        "fd00:ec2::23",
        "fd20:ce::254",  # Google Cloud over IPv6
        "100.100.100.200",  # Alibaba Cloud
        "169.254.0.23",  # Tencent Cloud
        "192.0.0.192",  # Oracle Cloud (classic)
        "168.63.129.16",  # Azure's host agent (WireServer)
    )
)
"""Cloud metadata and credential services: refused under every policy (rule 2)."""
_ALWAYS = tuple(
    ipaddress.ip_network(n) for n in ("169.254.0.0/16", "fe80::/10", "0.0.0.0/8", "::/128")
)
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_NAT64_LOCAL = ipaddress.ip_network("64:ff9b:1::/48")
_6TO4 = ipaddress.ip_network("2002::/16")
_TEREDO = ipaddress.ip_network("2001::/32")
_COMPATIBLE = ipaddress.ip_network("::/96")
_TRANSLATED = ipaddress.ip_network("::ffff:0:0:0/96")
# RFC 6052: where the 32 bits of the IPv4 address sit for each prefix length (bits of the
# IPv6 address from its left; bits 64-71, the "u" octet, are always skipped).
_RFC6052 = {
    48: ((48, 16), (72, 16)),
    56: ((56, 8), (72, 24)),
    64: ((72, 32),),
    96: ((96, 32),),
}
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


def _bits(value: int, start: int, length: int) -> int:
    return (value >> (128 - start - length)) & ((1 << length) - 1)


def _local_nat64(value: int) -> list[tuple[str, ipaddress.IPv4Address]]:
    """What a local-use NAT64 address carries in each RFC 6052 layout. Which layout the
    operator's translator uses is not known here, so each is judged; but one that reads
    0.x.x.x is not the one in use (unless every layout does)."""
    found = []
    for prefix, places in _RFC6052.items():
        v4 = 0
        for start, length in places:
            v4 = (v4 << length) | _bits(value, start, length)
        found.append((f"NAT64 (local-use, /{prefix})", ipaddress.IPv4Address(v4)))
    routable = [(form, v4) for form, v4 in found if int(v4) >> 24]
    return routable or found


def embedded_ipv4(ip: ipaddress.IPv6Address) -> tuple[tuple[str, ipaddress.IPv4Address], ...]:
    """The IPv4 addresses ``ip`` carries, each with the name of its form; none for a plain
    IPv6 address. ``::`` and ``::1`` are IPv6's own, not IPv4-compatible forms.

    Example::

        embedded_ipv4(IPv6Address("64:ff9b::a00:1"))  # (("NAT64", IPv4Address("10.0.0.1")),)
    """
    value = int(ip)
    found: list[tuple[str, ipaddress.IPv4Address]] = []
    if ip.ipv4_mapped is not None:
        found.append(("IPv4-mapped", ip.ipv4_mapped))
    if ip in _TRANSLATED:
        found.append(("IPv4-translated", ipaddress.IPv4Address(value & 0xFFFFFFFF)))
    if ip in _COMPATIBLE and value > 1:
        found.append(("IPv4-compatible", ipaddress.IPv4Address(value)))
    if ip in _NAT64:
        found.append(("NAT64", ipaddress.IPv4Address(value & 0xFFFFFFFF)))
    if ip in _NAT64_LOCAL:
        found += _local_nat64(value)
    if ip.sixtofour is not None:
        found.append(("6to4", ip.sixtofour))
    if ip.teredo is not None:
        found.append(("Teredo", ip.teredo[1]))
    return tuple(found)


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
        """Why the sender refuses to connect to ``address`` (resolved from ``host``), or None.
        An IPv6 address carrying an IPv4 one is refused if either is."""
        ip = parse_address(address)
        if ip is None:
            return f"{host} resolved to {address!r}, which is not an IP address"
        name = host.lower().rstrip(".")
        problem = self._ip_problem(host, name, ip)
        if problem is not None or not isinstance(ip, ipaddress.IPv6Address):
            return problem
        for form, inner in embedded_ipv4(ip):
            problem = self._ip_problem(host, name, inner, form)
            if problem is not None:
                return problem
        return None

    def _ip_problem(self, host: str, name: str, ip: Address, form: str = "") -> str | None:
        """Why ``ip`` is refused (``form``: the IPv6 form that carried it), or None."""
        shown = f"{host} ({form} of {ip})" if form else f"{host} ({ip})"
        if self._matches(self.deny, name, ip):
            return f"{shown} is denied by the endpoint policy"
        if ip in METADATA_ADDRESSES and not self._names(name, ip):
            return (
                f"{shown} is a cloud metadata service, refused under every policy: use the "
                "endpoint's public address (only an exact entry in endpoint_policy.allow "
                "opens it)"
            )
        if self._matches(self.allow, name, ip):
            return None
        if ip.is_multicast or any(ip in n for n in _ALWAYS if n.version == ip.version):
            return (
                f"{shown} is a link-local, unspecified or multicast address: use the "
                "endpoint's public address, or list it in endpoint_policy.allow"
            )
        private = any(ip in n for n in _PRIVATE if n.version == ip.version)
        if private and form:  # no one means 127.0.0.1 by writing ::127.0.0.1
            return (
                f"{shown} is a private address in an IPv6 form, refused under every policy: "
                f"use the endpoint's public address, or write {ip} itself"
            )
        if private and not self.allow_private_networks:
            return (
                f"{shown} is on a private network: use the endpoint's public address, set "
                "endpoint_policy.allow_private_networks or list it in endpoint_policy.allow"
            )
        return None

    def _names(self, name: str, ip: Address) -> bool:
        """``allow`` names this host or address exactly (not through a CIDR)."""
        return any(e == name or parse_address(e) == ip for e in self.allow if "/" not in e)

    def _name_problem(self, name: str) -> str | None:
        if name in self.deny:
            return f"{name} is denied by the endpoint policy"
        if name in self.allow:
            return None
        if name in METADATA_NAMES:
            return (
                f"{name} is a cloud metadata service, refused under every policy: use the "
                "endpoint's public name (only an exact entry in endpoint_policy.allow opens it)"
            )
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
