"""Where a topic's archive lies: an S3-compatible bucket or a local folder, behind one seam.

:class:`ArchiveObjects` puts, gets, lists and deletes objects under the archive URL's
prefix, through ``obstore`` (the Rust ``object_store`` crate: S3 and local files with the
same calls, async, typed). The S3 credentials come from the control plane's ``archive``
setting, never from the topic. Errors of the object store become ``StorageUnavailable``
here, at the boundary.

Example::

    objects = open_objects(settings.archive, "s3://archive/shop/orders")
    await objects.put_bytes("_httpbus_archive.json", b"{}")
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

from core.archive import ArchiveStorage, Target, target_of
from core.errors import StorageUnavailable, ValidationFailed

_TIMEOUT = timedelta(seconds=30)


class ArchiveObjects:
    """Objects under one archive's prefix (keys are relative to it)."""

    def __init__(self, store: Any, url: str) -> None:
        self._store = store
        self.url = url

    async def put_file(self, key: str, path: Path) -> None:
        """Upload a local file (multipart when large)."""
        import obstore

        try:
            await obstore.put_async(self._store, key, path)
        except Exception as exc:  # obstore's errors: any is "the object store failed"
            raise StorageUnavailable(f"archive {self.url}: could not write {key}: {exc}") from exc

    async def put_bytes(self, key: str, data: bytes) -> None:
        import obstore

        try:
            await obstore.put_async(self._store, key, data)
        except Exception as exc:
            raise StorageUnavailable(f"archive {self.url}: could not write {key}: {exc}") from exc

    async def get_bytes(self, key: str) -> bytes | None:
        """The object's bytes, or None if there is none."""
        import obstore

        try:
            got = await obstore.get_async(self._store, key)
            return bytes(await got.bytes_async())
        except FileNotFoundError:
            return None
        except Exception as exc:
            raise StorageUnavailable(f"archive {self.url}: could not read {key}: {exc}") from exc

    async def delete(self, key: str) -> None:
        """Delete an object (absent: nothing to do)."""
        import obstore

        try:
            await obstore.delete_async(self._store, key)
        except FileNotFoundError:
            return
        except Exception as exc:
            raise StorageUnavailable(f"archive {self.url}: could not delete {key}: {exc}") from exc


def open_objects(storage: ArchiveStorage, url: str) -> ArchiveObjects:
    """The objects of the archive at ``url`` as the control plane's settings reach them;
    ``ValidationFailed`` if the settings do not allow that URL."""
    try:
        target = target_of(url)
    except ValueError as exc:
        raise ValidationFailed(f"archive.to: {exc}") from None
    why = storage.refusal(target)
    if why is not None:
        raise ValidationFailed(f"archive.to: {why}")
    return ArchiveObjects(_store(storage, target), url)


def _store(storage: ArchiveStorage, target: Target) -> Any:
    try:
        from obstore.store import LocalStore, S3Store
    except ImportError as exc:  # the httpbus[archive] extra
        raise StorageUnavailable(
            "the archive needs obstore and pyarrow: pip install 'httpbus[archive]'"
        ) from exc
    if target.scheme == "file":
        Path(target.prefix).mkdir(parents=True, exist_ok=True)
        return LocalStore(target.prefix, mkdir=True)
    secret = storage.s3_secret_access_key
    options: dict[str, Any] = {
        "region": storage.s3_region,
        "virtual_hosted_style_request": False,
        "client_options": {
            "allow_http": bool(storage.s3_endpoint and storage.s3_endpoint.startswith("http:")),
            "timeout": _TIMEOUT,
        },
        "retry_config": {"max_retries": 3, "retry_timeout": _TIMEOUT},
    }
    if storage.s3_endpoint:
        options["endpoint"] = storage.s3_endpoint
    if storage.s3_access_key_id and secret is not None:
        options["access_key_id"] = storage.s3_access_key_id
        options["secret_access_key"] = secret.get_secret_value()
    return S3Store(target.bucket, prefix=target.prefix or None, **options)
