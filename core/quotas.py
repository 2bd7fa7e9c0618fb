"""Per-project quotas and the arithmetic of their shared rate budget. Pure: no I/O.

A :class:`ProjectQuota` caps a project's publish rate (messages and bytes per second, over
every producer process together) and how many topics and subscriptions it may have. ``None``
means unlimited.

The rate budget is split among the producer processes that publish to the project. Each one
writes a :class:`LeaseReport` (its demand and what it accepted, per second, over its last
refresh) to the metastore about once a second and reads everybody's; :func:`share` then gives
its part of the quota: a small floor each, so that a process whose demand just rose is not
starved until its next report, and the rest split max-min fairly by demand::

    reports = {"p1": LeaseReport(demand_mps=900, ...), "p2": LeaseReport(demand_mps=30, ...)}
    share(100.0, "p1", reports, lambda r: r.demand_mps)  # 67.5 msg/s (p2 gets its 30 + floor)

Each process computes its own share from the same reports, so the shares add up to the
quota (up to reports read at slightly different times; docs/quotas.md).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from enum import Enum

from pydantic import BaseModel, ConfigDict, Field

FLOOR = 0.05  # of the quota, split among the members: what a member gets without demand
BURST_S = 0.25  # seconds of its share a producer may spend at once (a small burst keeps the
# combined rate near the quota over short windows; a bigger one would smooth clients' bursts)


class ProjectQuota(BaseModel):
    """What an admin allows a project; ``None``: no limit."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    messages_per_second: float | None = Field(default=None, gt=0, le=10_000_000)
    bytes_per_second: float | None = Field(default=None, ge=1024, le=100 * 1024**3)
    max_topics: int | None = Field(default=None, ge=0, le=1_000_000)
    max_subscriptions: int | None = Field(default=None, ge=0, le=1_000_000)

    @property
    def limits_rate(self) -> bool:
        return self.messages_per_second is not None or self.bytes_per_second is not None


class RateQuota(Enum):
    """A rate a project is held to; the value names it in messages, metrics and details."""

    MESSAGES = "messages_per_second"
    BYTES = "bytes_per_second"

    @property
    def unit(self) -> str:
        return "messages/s" if self is RateQuota.MESSAGES else "bytes/s"


class CountQuota(Enum):
    TOPICS = "max_topics"
    SUBSCRIPTIONS = "max_subscriptions"

    @property
    def noun(self) -> str:
        return "topics" if self is CountQuota.TOPICS else "subscriptions"


class LeaseReport(BaseModel):
    """One producer's figures for one project, written to its lease node."""

    model_config = ConfigDict(frozen=True)

    demand_mps: float = Field(default=0.0, ge=0)
    demand_bps: float = Field(default=0.0, ge=0)
    accepted_mps: float = Field(default=0.0, ge=0)
    accepted_bps: float = Field(default=0.0, ge=0)
    at_ms: int = 0


class QuotaUsage(BaseModel):
    """A project's quota and its usage now: counts from the metastore, rates as every live
    producer last reported them (about a second old)."""

    quota: ProjectQuota
    topics: int
    subscriptions: int
    messages_per_second: float
    bytes_per_second: float
    producers: int = Field(description="producer processes that report for this project")


def share(
    quota: float,
    member: str,
    reports: Mapping[str, LeaseReport],
    demand: Callable[[LeaseReport], float],
) -> float:
    """``member``'s part of ``quota``: an equal floor (:data:`FLOOR` of the quota split among
    the members), then the rest split max-min fairly by demand (:func:`fair_split`). The member
    is counted even if its report is not among ``reports`` yet (a newcomer)."""
    members = dict(reports)
    members.setdefault(member, LeaseReport())
    floor = quota * FLOOR / len(members)
    # A demand above the whole quota asks for the quota: two members that both ask for more
    # than there is split it evenly, however noisy their (refused) asking is.
    asks = {name: min(demand(report), quota) for name, report in members.items()}
    return floor + fair_split(quota - floor * len(members), asks)[member]


def fair_split(total: float, asks: Mapping[str, float]) -> dict[str, float]:
    """Max-min fair shares of ``total``: when every ask fits, each gets its ask and the spare
    is split evenly (room to grow until the next round); otherwise the smallest asks are met
    in full and the rest is split evenly among the larger ones. Unlike shares in proportion
    to demand, a member that asks for less than an even split gets all of it, so a producer
    whose clients slowed for a round is not cut below what it just used."""
    spare = total - sum(asks.values())
    if spare >= 0:
        return {name: ask + spare / len(asks) for name, ask in asks.items()}
    shares: dict[str, float] = {}
    left = total
    ordered = sorted(asks.items(), key=lambda item: item[1])
    for i, (name, ask) in enumerate(ordered):
        shares[name] = min(ask, left / (len(ordered) - i))
        left -= shares[name]
    return shares


def rate_per_s(count: float, elapsed_s: float) -> float:
    """``count`` over ``elapsed_s`` seconds (0 when no time passed)."""
    return count / elapsed_s if elapsed_s > 0 else 0.0


def combined_usage(reports: Mapping[str, LeaseReport], kind: RateQuota) -> float:
    """What every producer accepted per second, by their last reports."""
    if kind is RateQuota.MESSAGES:
        return sum(r.accepted_mps for r in reports.values())
    return sum(r.accepted_bps for r in reports.values())


class DebtBucket:
    """A token bucket that may go into debt: ``take(n)`` succeeds whenever the bucket holds
    ``min(n, burst)`` tokens and then subtracts all ``n``. So a batch larger than the burst is
    not impossible, yet the long-run rate stays at ``rate`` (the debt is paid by waiting),
    unlike a bucket that lets an oversize request through for free once it is full.
    ``take`` answers 0.0 when taken, else the seconds until it would succeed."""

    def __init__(self, rate: float, burst_s: float, now: float) -> None:
        self.rate = rate
        self.burst = rate * burst_s
        self._burst_s = burst_s
        self._tokens = self.burst
        self._at = now

    def _refill(self, now: float) -> None:
        self._tokens = min(self.burst, self._tokens + max(0.0, now - self._at) * self.rate)
        self._at = now

    def take(self, n: float, now: float) -> float:
        self._refill(now)
        need = min(n, self.burst)
        if self._tokens >= need:
            self._tokens -= n
            return 0.0
        return (need - self._tokens) / self.rate

    def give_back(self, n: float) -> None:
        self._tokens = min(self.burst, self._tokens + n)

    def retune(self, rate: float, now: float) -> None:
        """A new share: tokens saved so far stay (up to the new burst), debt stays."""
        self._refill(now)
        self.rate = rate
        self.burst = rate * self._burst_s
        self._tokens = min(self._tokens, self.burst)
