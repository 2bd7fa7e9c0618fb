"""Every metastore path of httpbus, built in this one module.

The tree (relative to the store's root)::

    /projects/{p}                                   Project
    /projects/{p}/topics/{t}                        Topic (without segments and pointer)
    /projects/{p}/topics/{t}/segments               empty; its version moves with each change
                                                    to a segment record alone (a watch for it)
    /projects/{p}/topics/{t}/segments/{id:010d}     Segment
    /projects/{p}/topics/{t}/produce-pointer        {"segment_id": n}; version = znode version
    /projects/{p}/topics/{t}/cutover                the topic's latest cutover (its state)
    /projects/{p}/topics/{t}/migration              the topic's latest verified migration
    /projects/{p}/topics/{t}/schema                 SchemaState: latest version, active, mode
    /projects/{p}/topics/{t}/schema/{n:010d}        SchemaVersion n (written once)
    /projects/{p}/topics/{t}/grant-requests/{g}     GrantRequest of project g (docs/catalog.md)
    /projects/{p}/subscriptions/{s}                 Subscription (without consume pointer)
    /projects/{p}/subscriptions/{s}/consume-pointer {"segment_id": n}
    /projects/{p}/tokens/{id}                       ProduceToken (a hash, never the secret)
    /projects/{p}/quota                             ProjectQuota; every create of a topic or
                                                    subscription of p bumps its version (CAS)
    /quota-leases/{p}/{member}                      ephemeral: a producer's LeaseReport for p
    /subscribers/{p}/{t}/{project}:{s}              marks a subscription of topic p/t
    /members/{group}/{member}                       ephemeral process membership
    /leader/{role}                                  ephemeral: the elected leader of a role
    /assignments/{worker}                           ["project/subscription", ...] (by the leader)
    /locks/subscriptions/{project}:{s}              ephemeral: the worker running subscription s
    /cutovers/active/{p}:{t}                        marks a cutover the coordinator still drives
    /migrations/active/{p}:{t}                      marks a migration the leader still drives
    /internal/subscriptions/{project}:{s}           the internal storage topics of subscription s
                                                    (delay levels, hold, replay, DLQ)
    /seeks/{project}:{s}                            a seek of s in progress (by the control plane)
    /replays/{project}:{s}                          s's latest window replay and its progress
                                                    (control_plane.services.replays)
    /status/{project}:{s}                           ephemeral: s's figures, by the worker running it
    /failing/{project}:{s}                          {"since_ms": t}: s's endpoint fails every
                                                    attempt since t (by the worker running it)
    /failover/health/{p}:{t}:{segment}:{member}     ephemeral: a producer's write figures of one
                                                    segment (segments.failover.health)
    /failover/unsealed/{p}:{t}:{segment}            a segment a failover left unsealed: the
                                                    leader seals it when its cluster is back
    /signing-keys                                   KeySet: the keys delivery JWTs are signed
                                                    with, and their timings (core.signing_keys)
"""

from __future__ import annotations

from core.names import check_name
from core.shards import SEPARATOR, parse_unit_key

PROJECTS = "/projects"
MEMBERS = "/members"
SUBSCRIBERS = "/subscribers"
LEADER = "/leader"
ASSIGNMENTS = "/assignments"
SUBSCRIPTION_LOCKS = "/locks/subscriptions"
ACTIVE_CUTOVERS = "/cutovers/active"
ACTIVE_MIGRATIONS = "/migrations/active"
INTERNAL_SUBSCRIPTIONS = "/internal/subscriptions"
SEEKS = "/seeks"
REPLAYS = "/replays"
TEST_EVENTS = "/test-events"
STATUS = "/status"
FAILING = "/failing"
REVOKED_SESSIONS = "/ui/revoked-sessions"
QUOTA_LEASES = "/quota-leases"
FAILOVER_HEALTH = "/failover/health"
FAILOVER_UNSEALED = "/failover/unsealed"
SIGNING_KEYS = "/signing-keys"


def _n(*names: str) -> tuple[str, ...]:
    return tuple(check_name(n) for n in names)


def project(p: str) -> str:
    (p,) = _n(p)
    return f"{PROJECTS}/{p}"


def topics(p: str) -> str:
    return f"{project(p)}/topics"


def topic(p: str, t: str) -> str:
    (t,) = _n(t)
    return f"{topics(p)}/{t}"


def segments(p: str, t: str) -> str:
    return f"{topic(p, t)}/segments"


def segment(p: str, t: str, segment_id: int) -> str:
    return f"{segments(p, t)}/{segment_id:010d}"


def produce_pointer(p: str, t: str) -> str:
    return f"{topic(p, t)}/produce-pointer"


def topic_schema(p: str, t: str) -> str:
    """The topic's schema state (absent: it never had a schema)."""
    return f"{topic(p, t)}/schema"


def schema_version(p: str, t: str, version: int) -> str:
    return f"{topic_schema(p, t)}/{version:010d}"


def grant_requests(p: str, t: str) -> str:
    return f"{topic(p, t)}/grant-requests"


def grant_request(p: str, t: str, grantee: str) -> str:
    (grantee,) = _n(grantee)
    return f"{grant_requests(p, t)}/{grantee}"


def subscriptions(p: str) -> str:
    return f"{project(p)}/subscriptions"


def subscription(p: str, s: str) -> str:
    (s,) = _n(s)
    return f"{subscriptions(p)}/{s}"


def consume_pointer(p: str, s: str) -> str:
    return f"{subscription(p, s)}/consume-pointer"


def tokens(p: str) -> str:
    return f"{project(p)}/tokens"


def token(p: str, token_id: str) -> str:
    (token_id,) = _n(token_id)
    return f"{tokens(p)}/{token_id}"


def quota(p: str) -> str:
    return f"{project(p)}/quota"


def quota_leases(p: str) -> str:
    (p,) = _n(p)
    return f"{QUOTA_LEASES}/{p}"


def quota_lease(p: str, member_id: str) -> str:
    (member_id,) = _n(member_id)
    return f"{quota_leases(p)}/{member_id}"


def topic_subscribers(p: str, t: str) -> str:
    p, t = _n(p, t)
    return f"{SUBSCRIBERS}/{p}/{t}"


def topic_subscriber(p: str, t: str, sub_project: str, s: str) -> str:
    sub_project, s = _n(sub_project, s)
    return f"{topic_subscribers(p, t)}/{sub_project}:{s}"


def members(group: str) -> str:
    (group,) = _n(group)
    return f"{MEMBERS}/{group}"


def member(group: str, member_id: str) -> str:
    (member_id,) = _n(member_id)
    return f"{members(group)}/{member_id}"


def leader(role: str) -> str:
    (role,) = _n(role)
    return f"{LEADER}/{role}"


def assignment(worker: str) -> str:
    (worker,) = _n(worker)
    return f"{ASSIGNMENTS}/{worker}"


def subscription_lock(p: str, s: str, shard: int | None = None) -> str:
    """Held by the worker that runs subscription s (or its shard ``shard``)."""
    p, s = _n(p, s)
    return f"{SUBSCRIPTION_LOCKS}/{p}:{s}{_shard(shard)}"


def _shard(index: int | None) -> str:
    return "" if index is None else f"{SEPARATOR}{index}"


def unit_lock(key: str) -> str:
    """The lock of an assignment key (``p/s`` or ``p/s#k``, see :mod:`core.shards`)."""
    return subscription_lock(*parse_unit_key(key))


def unit_status(key: str) -> str:
    """The status node of an assignment key."""
    return subscription_status(*parse_unit_key(key))


def cutover(p: str, t: str) -> str:
    return f"{topic(p, t)}/cutover"


def migration(p: str, t: str) -> str:
    return f"{topic(p, t)}/migration"


def active_migration(p: str, t: str) -> str:
    p, t = _n(p, t)
    return f"{ACTIVE_MIGRATIONS}/{p}:{t}"


def active_cutover(p: str, t: str) -> str:
    p, t = _n(p, t)
    return f"{ACTIVE_CUTOVERS}/{p}:{t}"


def internal_topics(p: str, s: str) -> str:
    """Where a subscription's internal storage topics are recorded (not under the
    subscription's node, so deleting the subscription stays one transaction)."""
    p, s = _n(p, s)
    return f"{INTERNAL_SUBSCRIPTIONS}/{p}:{s}"


def test_event(p: str, s: str) -> str:
    """A test event of subscription s under way (``core.sample_event``): one at a time."""
    p, s = _n(p, s)
    return f"{TEST_EVENTS}/{p}:{s}"


def seek_request(p: str, s: str) -> str:
    """While it exists, no worker runs subscription s: the control plane is moving it."""
    p, s = _n(p, s)
    return f"{SEEKS}/{p}:{s}"


def replay(p: str, s: str) -> str:
    """Subscription s's latest window replay (docs/archive.md): one at a time."""
    p, s = _n(p, s)
    return f"{REPLAYS}/{p}:{s}"


def parse_replay(name: str) -> tuple[str, str] | None:
    """``(project, subscription)`` of a child of :data:`REPLAYS`, or None."""
    project, sep, sub = name.partition(":")
    return (project, sub) if sep and project and sub else None


def subscription_status(p: str, s: str, shard: int | None = None) -> str:
    """A worker's figures of subscription s (or of its shard ``shard``)."""
    p, s = _n(p, s)
    return f"{STATUS}/{p}:{s}{_shard(shard)}"


def endpoint_failing(p: str, s: str) -> str:
    """Since when subscription s's endpoint has failed every attempt (absent: it has not);
    outside the subscription's node, so deleting the subscription stays one transaction."""
    p, s = _n(p, s)
    return f"{FAILING}/{p}:{s}"


def revoked_session(expires: int, sid: str) -> str:
    """A UI session ended before its expiry (epoch seconds, in the name: no read to prune)."""
    if not sid.isalnum() or not sid.isascii():
        raise ValueError(f"invalid session id {sid!r}")
    return f"{REVOKED_SESSIONS}/{int(expires)}-{sid}"


def segment_health(p: str, t: str, segment_id: int, member: str) -> str:
    """A producer's write figures of segment ``segment_id`` of topic p/t (ephemeral)."""
    p, t, member = _n(p, t, member)
    return f"{FAILOVER_HEALTH}/{p}:{t}:{int(segment_id)}:{member}"


def parse_segment_health(name: str) -> tuple[str, str, int, str] | None:
    """``(p, t, segment_id, member)`` of a child name of ``FAILOVER_HEALTH`` (None: not one)."""
    parts = name.split(":")
    if len(parts) != 4 or not parts[2].isdigit():
        return None
    return parts[0], parts[1], int(parts[2]), parts[3]


def unsealed_segment(p: str, t: str, segment_id: int) -> str:
    """Marks a segment a failover left unsealed, until the leader has sealed it."""
    p, t = _n(p, t)
    return f"{FAILOVER_UNSEALED}/{p}:{t}:{int(segment_id)}"


def parse_unsealed(name: str) -> tuple[str, str, int] | None:
    parts = name.split(":")
    if len(parts) != 3 or not parts[2].isdigit():
        return None
    return parts[0], parts[1], int(parts[2])
