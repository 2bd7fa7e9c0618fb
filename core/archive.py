"""The archive of a topic: its setting, where archives may go, and the window arithmetic.

A topic with ``archive: {to: URL, every: 1h}`` has each closed window of its messages (an
hour by default) written to ``URL`` as one Parquet file, every segment of its timeline (Kafka
and Pulsar), each message once (docs/archive.md). ``URL`` is ``s3://bucket/prefix`` (an
S3-compatible object store the control plane's ``archive`` setting names) or
``file:///path`` (a folder under the control plane's ``archive.local_root``).

Pure: no I/O. The control plane's archiver (``control_plane.leaders.archiver``) does the work.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import PurePosixPath
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator

HOUR_MS = 3_600_000
DAY_MS = 24 * HOUR_MS
EVERY = {f"{h}h": h * HOUR_MS for h in (1, 2, 3, 4, 6, 8, 12, 24)}
"""The window lengths an archive may have: whole hours that divide a day, so every window
lies within one date (the layout's ``date=`` folder)."""


class ArchiveSpec(BaseModel):
    """A topic's setting ``archive``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    to: str = Field(
        min_length=1,
        max_length=1_000,
        description="where the closed windows go: s3://bucket/prefix or file:///path",
    )
    every: str = Field(
        default="1h",
        description=f"the window each file holds, one of {', '.join(EVERY)}",
    )
    keep_days: int | None = Field(
        default=None,
        ge=1,
        le=3_660,
        description="delete archived windows whose date is older than this many days; "
        "null: keep them",
    )

    @field_validator("every")
    @classmethod
    def _every(cls, every: str) -> str:
        text = every.strip().lower()
        if text not in EVERY:
            raise ValueError(f"every must be one of {', '.join(EVERY)}")
        return text

    @field_validator("to")
    @classmethod
    def _to(cls, to: str) -> str:
        target_of(to)  # raises ValueError naming what to write
        return to

    @property
    def every_ms(self) -> int:
        return EVERY[self.every]


class Target(BaseModel):
    """An archive URL taken apart: ``scheme`` s3 (``bucket`` and ``prefix``) or file
    (``prefix`` is the absolute folder)."""

    model_config = ConfigDict(frozen=True)

    scheme: str
    bucket: str = ""
    prefix: str


def target_of(url: str) -> Target:
    """``s3://bucket/prefix`` or ``file:///abs/path``; ValueError saying what is wrong."""
    parts = urlsplit(url)
    if parts.query or parts.fragment:
        raise ValueError("an archive URL has no query or fragment")
    path = parts.path.strip("/")
    if ".." in PurePosixPath(path).parts:
        raise ValueError("an archive URL's path may not contain '..'")
    if parts.scheme == "s3":
        if not parts.netloc:
            raise ValueError("s3://bucket/prefix: the bucket is missing")
        return Target(scheme="s3", bucket=parts.netloc, prefix=path)
    if parts.scheme == "file":
        if parts.netloc or not path:
            raise ValueError("file:///absolute/folder: three slashes and a folder")
        return Target(scheme="file", prefix="/" + path)
    raise ValueError("the archive goes to s3://bucket/prefix or file:///folder")


class ArchiveStorage(BaseModel):
    """The control plane's setting ``archive``: where topics may archive, and how often the
    archiver looks (docs/archive.md)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    s3_endpoint: str | None = Field(
        default=None,
        description="the S3-compatible endpoint (http://host:port); none: AWS's, by region",
    )
    s3_region: str = Field(default="us-east-1", description="the object store's region")
    s3_access_key_id: str | None = Field(default=None, description="S3 access key id")
    s3_secret_access_key: SecretStr | None = Field(default=None, description="S3 secret key")
    s3_buckets: list[str] = Field(
        default_factory=list, description="the buckets topics may archive to (s3://bucket/…)"
    )
    local_root: str | None = Field(
        default=None,
        description="topics may archive to file:///… folders under this one; none: no local "
        "archives",
    )
    interval_s: float = Field(
        default=60.0, gt=0, le=86_400, description="how often the archiver looks for closed windows"
    )
    grace_s: float = Field(
        default=120.0,
        ge=0,
        le=3_600,
        description="a window is closed this long after its end (a write accepted just before "
        "the end may still be on its way to storage)",
    )

    def refusal(self, target: Target) -> str | None:
        """Why a topic may not archive to ``target`` (None: it may)."""
        if target.scheme == "s3":
            if target.bucket not in self.s3_buckets:
                allowed = ", ".join(self.s3_buckets) or "none"
                return (
                    f"bucket {target.bucket!r} is not one of the control plane's "
                    f"archive.s3_buckets ({allowed})"
                )
            return None
        if self.local_root is None:
            return "local archives are off: the control plane sets no archive.local_root"
        root = PurePosixPath(self.local_root)
        if not PurePosixPath(target.prefix).is_relative_to(root):
            return f"a local archive must lie under archive.local_root ({root})"
        return None


def window_start(timestamp_ms: int, every_ms: int) -> int:
    """The start of the window holding ``timestamp_ms`` (windows are aligned on midnight UTC)."""
    return timestamp_ms - timestamp_ms % every_ms


def window_key(start_ms: int) -> str:
    """Where a window's file lies under the archive's prefix:
    ``date=YYYY-MM-DD/hour=HH/part-<start>.parquet`` (the layout of ``httpbus export``)."""
    at = datetime.fromtimestamp(start_ms / 1000, UTC)
    return f"date={at:%Y-%m-%d}/hour={at:%H}/part-{start_ms}.parquet"


def iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat().replace("+00:00", "Z")
