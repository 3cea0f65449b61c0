"""Object storage for segments: a local directory or S3, behind one small interface."""

from __future__ import annotations

from urllib.parse import urlparse

from ..errors import InvalidConfigError
from .base import ObjectData, ObjectInfo, ObjectNotFoundError, ObjectStore
from .local import LocalObjectStore


def open_store(url: str, s3_endpoint_url: str | None = None) -> ObjectStore:
    """The object store named by ``file:///path`` or ``s3://bucket/prefix``. For S3,
    ``s3_endpoint_url`` (else ``TXN_BROKER_S3_ENDPOINT_URL``, else AWS) names the endpoint."""
    parsed = urlparse(url)
    if parsed.scheme == "file":
        if parsed.netloc not in ("", "localhost"):
            raise InvalidConfigError(f"file storage URL must be file:///path, got {url!r}")
        return LocalObjectStore(parsed.path)
    if parsed.scheme == "s3":
        from .s3 import S3ObjectStore

        if not parsed.netloc:
            raise InvalidConfigError(f"S3 storage URL needs a bucket: s3://bucket/prefix, got {url!r}")
        return S3ObjectStore(parsed.netloc, parsed.path.strip("/"), endpoint_url=s3_endpoint_url)
    raise InvalidConfigError(f"unsupported storage URL {url!r}: use file:///path or s3://bucket/prefix")


__all__ = ["ObjectData", "ObjectInfo", "ObjectNotFoundError", "ObjectStore", "open_store"]
