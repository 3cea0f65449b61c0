"""The interface every object store implements."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Protocol, TypeAlias

import pyarrow as pa

from ..errors import InvalidConfigError, TxnBrokerError

#: what ``put`` stores: bytes, or any object with the buffer protocol (a ``pa.Buffer``)
ObjectData: TypeAlias = bytes | bytearray | memoryview | pa.Buffer


#: the storage options of an S3 store: boto3's own names
S3_OPTIONS = ("endpoint_url", "region_name", "aws_access_key_id", "aws_secret_access_key", "aws_session_token",
              "addressing_style")
#: the options that are secrets: never logged, never shown
SECRET_OPTIONS = ("aws_secret_access_key", "aws_session_token")


def check_options(options: Mapping[str, Any]) -> dict[str, str]:
    """The given storage options (empty values dropped), or InvalidConfigError naming the
    unknown ones (never their values)."""
    unknown = sorted(set(options) - set(S3_OPTIONS))
    if unknown:
        raise InvalidConfigError(f"unknown storage option(s) {', '.join(unknown)}; known: {', '.join(S3_OPTIONS)}")
    out: dict[str, str] = {}
    for name, value in options.items():
        if value is None or value == "":
            continue
        if not isinstance(value, str):
            raise InvalidConfigError(f"storage option {name} must be a string")
        out[name] = value
    return out


class ObjectNotFoundError(TxnBrokerError):
    """The object does not exist."""


@dataclass(frozen=True)
class ObjectInfo:
    key: str
    size: int
    modified_ms: int


class ObjectStore(Protocol):
    """Immutable objects by key. ``put`` is atomic: a reader sees the whole object or none.
    An object is never changed in place (a repeated ``put`` of a key stores equal data),
    which is what lets ``get_buffer`` hand out memory maps."""

    url: str

    def put(self, key: str, data: ObjectData) -> None:
        """Store ``data`` under ``key``, replacing nothing partially. Idempotent for equal data."""

    def writer(self, key: str) -> AbstractContextManager[pa.NativeFile]:
        """A writable Arrow file whose bytes become the object ``key`` when the ``with``
        block ends without an exception, atomically and durably as ``put`` stores one (a
        local store writes a temporary file in place, fsyncs and renames it; S3 buffers the
        bytes and puts them). If the block raises, nothing becomes visible and the
        temporary data is removed; a process killed meanwhile leaves at most a temporary
        file under the object's directory, which ``list`` reports like any object, so the
        orphan gc removes it. What lets an encoder write straight into the object instead of
        building it in memory first."""

    def get(self, key: str) -> bytes:
        """The whole object as bytes; ObjectNotFoundError if absent."""

    def get_buffer(self, key: str) -> pa.Buffer:
        """The whole object as an Arrow buffer, without copying it where the store can
        (a read-only memory map of a local file, the S3 response body as received); what
        segment readers use. ObjectNotFoundError if absent."""

    def head(self, key: str) -> ObjectInfo | None:
        """Size and time of an object, None if absent."""

    def list(self, prefix: str = "") -> Iterator[ObjectInfo]:
        """Every complete object whose key starts with ``prefix``."""

    def delete(self, keys: Iterable[str]) -> None:
        """Delete objects; absent keys are ignored."""

    def options(self) -> dict[str, str]:
        """The storage options that open this same store in another process (``open_store(url,
        **options)``); may contain secrets: pass them on, never print them."""
