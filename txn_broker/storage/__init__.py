"""Object storage for segments: a local directory or S3, behind one small interface."""

from __future__ import annotations

from urllib.parse import urlparse

from ..errors import CredentialsInUrlError, InvalidConfigError
from ..redaction import strip_userinfo
from ..retry import DEFAULT_RETRY_BUDGET_MS
from .base import S3_OPTIONS, SECRET_OPTIONS, ObjectData, ObjectInfo, ObjectNotFoundError, ObjectStore, check_options
from .local import LocalObjectStore


def open_store(url: str, *, retry_budget_ms: int = DEFAULT_RETRY_BUDGET_MS, **options: str | None) -> ObjectStore:
    """The object store named by ``file:///path`` or ``s3://bucket/prefix``, with its
    storage options passed explicitly (:data:`S3_OPTIONS`: ``endpoint_url``,
    ``region_name``, ``aws_access_key_id``, ``aws_secret_access_key``,
    ``aws_session_token``, ``addressing_style``; empty values count as not given). An
    option not given falls back to the process's own defaults (the endpoint to
    ``TXN_BROKER_S3_ENDPOINT_URL``, the rest to boto3's chain); the environment is never
    written. A local directory takes no options: S3 ones are ignored there. An unknown
    option name is an InvalidConfigError."""
    given = check_options(options)
    parsed = urlparse(url)
    shown = strip_userinfo(url)  # what a message may say of the URL
    if "@" in parsed.netloc:  # never used, never retried: the secret would only end up in messages
        raise CredentialsInUrlError(
            f"storage URL {shown!r} has credentials in it (user:password@): give them as storage "
            "options instead (connect(storage_options={'aws_access_key_id': ..., 'aws_secret_access_key': ...}), "
            "an Airflow connection's S3 extras) or in the AWS variables, profiles or roles boto3 reads")
    if parsed.scheme == "file":
        if parsed.netloc not in ("", "localhost"):
            raise InvalidConfigError(f"file storage URL must be file:///path, got {shown!r}")
        return LocalObjectStore(parsed.path)
    if parsed.scheme == "s3":
        from .s3 import S3ObjectStore

        if not parsed.netloc:
            raise InvalidConfigError(f"S3 storage URL needs a bucket: s3://bucket/prefix, got {shown!r}")
        return S3ObjectStore(parsed.netloc, parsed.path.strip("/"), retry_budget_ms=retry_budget_ms, **given)
    raise InvalidConfigError(f"unsupported storage URL {shown!r}: use file:///path or s3://bucket/prefix")


__all__ = ["S3_OPTIONS", "SECRET_OPTIONS", "ObjectData", "ObjectInfo", "ObjectNotFoundError", "ObjectStore",
           "open_store"]
