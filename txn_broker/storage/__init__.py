"""Object storage for segments: a local directory or S3, behind one small interface."""

from __future__ import annotations

from urllib.parse import urlparse

from ..errors import InvalidConfigError
from .base import ObjectInfo, ObjectNotFoundError, ObjectStore
from .local import LocalObjectStore


def open_store(url: str) -> ObjectStore:
    """The object store named by ``file:///path`` or ``s3://bucket/prefix``."""
    parsed = urlparse(url)
    if parsed.scheme == "file":
        if parsed.netloc not in ("", "localhost"):
            raise InvalidConfigError(f"file storage URL must be file:///path, got {url!r}")
        return LocalObjectStore(parsed.path)
    if parsed.scheme == "s3":
        from .s3 import S3ObjectStore

        if not parsed.netloc:
            raise InvalidConfigError(f"S3 storage URL needs a bucket: s3://bucket/prefix, got {url!r}")
        return S3ObjectStore(parsed.netloc, parsed.path.strip("/"))
    raise InvalidConfigError(f"unsupported storage URL {url!r}: use file:///path or s3://bucket/prefix")


__all__ = ["ObjectInfo", "ObjectNotFoundError", "ObjectStore", "open_store"]
