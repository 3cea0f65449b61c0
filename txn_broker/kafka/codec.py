"""Frames of Kafka's protocol: request headers and bodies in, responses out.

Every message schema comes from ``kio``, generated from Kafka's own JSON message
definitions. Handlers answer with plain dicts holding the union of the fields of every
version they support; :func:`build` turns such a dict into the kio response class of the
negotiated version, dropping the fields that version does not have and converting values
to the types kio writes (error codes, durations, timestamps).
"""

from __future__ import annotations

import dataclasses
import datetime
import io
import os
import types
import typing
import uuid
from functools import cache
from typing import Any

from kio.index import load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode
from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2
from kio.schema.response_header.v0.header import ResponseHeader as ResponseHeaderV0
from kio.schema.response_header.v1.header import ResponseHeader as ResponseHeaderV1
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i32

from txn_broker.kafka.bounds import LengthError, check_request

API_VERSIONS_KEY = 18
#: a request frame: bytes, or a read-only view of the buffer it was received into
Frame = bytes | memoryview
NULL_UUID = uuid.UUID(int=0)


class FrameError(ValueError):
    """A request frame cannot be decoded; the connection is closed."""


@dataclasses.dataclass(frozen=True)
class RequestHead:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None


def peek_head(frame: Frame) -> RequestHead:
    """Api key, version and correlation id: the first 8 bytes of every request header."""
    if len(frame) < 8:
        raise FrameError(f"a request of {len(frame)} bytes has no header")
    return RequestHead(int.from_bytes(frame[0:2], "big", signed=True),
                       int.from_bytes(frame[2:4], "big", signed=True),
                       int.from_bytes(frame[4:8], "big", signed=True), None)


@cache
def request_class(api_key: int, version: int) -> type[Any]:
    return load_request_schema(api_key, version)


@cache
def response_class(api_key: int, version: int) -> type[Any]:
    return load_response_schema(api_key, version)


def has_top_level_error(api_key: int, version: int) -> bool:
    """Whether kio has the response of this key and version and it has an error code."""
    try:
        cls = response_class(api_key, version)
    except Exception:  # kio's UnknownAPIKey / UnknownEntity
        return False
    return any(f.name == "error_code" for f in dataclasses.fields(cls))


def decode_request(frame: Frame, supported: dict[int, tuple[int, int]]) -> tuple[RequestHead, Any]:
    """The header and body of a request whose key and version are ``supported``
    (``peek_head`` first to answer the others). Raises FrameError."""
    head = peek_head(frame)
    low, high = supported[head.api_key]
    if not low <= head.api_version <= high:
        raise FrameError(f"api key {head.api_key} version {head.api_version} is not supported")
    cls = request_class(head.api_key, head.api_version)
    header_cls = RequestHeaderV2 if cls.__flexible__ else RequestHeaderV1
    try:
        # no length kio reads may exceed the frame: its native decoder allocates what a
        # length announces, and aborts the process when it cannot (docs/kafka-protocol.md)
        frame = check_request(header_cls, cls, frame)
    except LengthError as error:
        raise FrameError(f"malformed request (api key {head.api_key} v{head.api_version}): {error}") from None
    try:
        header, used = entity_reader(header_cls)(frame, 0)
        body, _size = entity_reader(cls)(frame, used)
    except Exception as error:  # kio's DecodeError and its native reader's errors
        raise FrameError(f"malformed request (api key {head.api_key} v{head.api_version}): "
                         f"{type(error).__name__}: {error}") from None
    # bytes after the request are ignored, as Kafka's brokers do (librdkafka 2.16 sends three
    # more than Metadata v12 defines when it asks for every topic)
    return RequestHead(head.api_key, head.api_version, head.correlation_id, getattr(header, "client_id", None)), body


def encode_response(head: RequestHead, payload: dict[str, Any]) -> bytes:
    """The response frame body (without its length prefix) for ``head``'s request."""
    cls = response_class(head.api_key, head.api_version)
    body = build(cls, payload)
    out = io.BytesIO()
    # ApiVersions answers with header v0 at every version, so that a client whose
    # request version is too new can still read the error (KIP-511)
    if cls.__flexible__ and head.api_key != API_VERSIONS_KEY:
        entity_writer(ResponseHeaderV1)(out, ResponseHeaderV1(correlation_id=i32(head.correlation_id)))
    else:
        entity_writer(ResponseHeaderV0)(out, ResponseHeaderV0(correlation_id=i32(head.correlation_id)))
    entity_writer(cls)(out, body)
    return out.getvalue()


def encode_response_parts(head: RequestHead, payload: dict[str, Any],
                          holders: list[dict[str, Any]]) -> list[bytes | memoryview]:
    """:func:`encode_response`'s bytes in parts, without copying the ``records`` of
    ``holders`` (dicts inside ``payload``, e.g. a Fetch response's partitions) through
    kio: each is encoded as a short unique token that is then replaced, with its length
    prefix, by the records' own length prefix and the records themselves (the parts
    joined are the same bytes as :func:`encode_response` gives with the records joined).
    A holder's records are bytes or a list of parts. ``holders`` are changed."""
    cls = response_class(head.api_key, head.api_version)
    swapped: list[tuple[bytes, list[bytes | memoryview]]] = []
    for holder in holders:
        records = holder.get("records")
        pieces = list(records) if isinstance(records, list) else [records] if records else []
        if sum(len(piece) for piece in pieces):  # a token of fixed size: a length prefix of 1 byte or 4
            token = b"txn-broker-records" + len(swapped).to_bytes(4, "big") + os.urandom(10)
            holder["records"] = token
            swapped.append((token, pieces))
        elif isinstance(records, list):
            holder["records"] = b""
    body = encode_response(head, payload)
    parts: list[bytes | memoryview] = []
    view = memoryview(body)
    pos = 0
    for token, pieces in swapped:
        size = sum(len(piece) for piece in pieces)
        old, new = (_length_prefix(cls.__flexible__, len(token)), _length_prefix(cls.__flexible__, size))
        at = body.find(old + token, pos)
        if at < 0:  # kio wrote the field unlike RECORDS: not reachable with kio's schemas
            raise AssertionError("a records token is missing from the encoded response")
        parts += [view[pos:at], new, *pieces]
        pos = at + len(old) + len(token)
    parts.append(view[pos:])
    return parts


def _length_prefix(flexible: bool, size: int) -> bytes:
    """The length prefix of a non-null RECORDS field of ``size`` bytes: an unsigned varint
    of size + 1 (flexible versions) or an int32."""
    if not flexible:
        return size.to_bytes(4, "big", signed=True)
    value, out = size + 1, bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def encode_api_versions_error(correlation_id: int, api_keys: list[dict[str, int]]) -> bytes:
    """ApiVersions v0 answering UNSUPPORTED_VERSION, for a client asking a newer version."""
    head = RequestHead(API_VERSIONS_KEY, 0, correlation_id, None)
    return encode_response(head, {"error_code": ErrorCode.unsupported_version, "api_keys": api_keys})


# -- building kio entities from dicts --------------------------------------------------------


def build(cls: type[Any], data: dict[str, Any]) -> Any:
    """An instance of the kio entity ``cls`` from ``data``: keys the class does not have
    are dropped; missing fields get their default or the type's zero."""
    kwargs = {}
    for f in dataclasses.fields(cls):
        if f.name in data:
            kwargs[f.name] = _convert(f, data[f.name])
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            kwargs[f.name] = _zero(f)
    return cls(**kwargs)


def _entity_of(tp: Any) -> type[Any] | None:
    """The entity class inside ``tp`` (``X``, ``X | None``, ``tuple[X, ...]``)."""
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        return tp
    for arg in typing.get_args(tp):
        found = _entity_of(arg)
        if found is not None:
            return found
    return None


def _is_tuple(tp: Any) -> bool:
    if typing.get_origin(tp) is tuple:
        return True
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        return any(_is_tuple(a) for a in typing.get_args(tp))
    return False


def _convert(f: dataclasses.Field[Any], value: Any) -> Any:
    kind = f.metadata.get("kafka_type", "")
    entity = _entity_of(f.type)
    if value is None:
        return None
    if entity is not None:
        if _is_tuple(f.type):
            return tuple(item if isinstance(item, entity) else build(entity, item) for item in value)
        return value if isinstance(value, entity) else build(entity, value)
    if _is_tuple(f.type):
        return tuple(_scalar(kind, v) for v in value)
    return _scalar(kind, value)


def _scalar(kind: str, value: Any) -> Any:
    if kind == "error_code":
        return ErrorCode(int(value))
    if kind.startswith("timedelta"):
        return value if isinstance(value, datetime.timedelta) else datetime.timedelta(milliseconds=int(value))
    if kind.startswith("datetime"):
        if isinstance(value, datetime.datetime):
            return value
        return datetime.datetime.fromtimestamp(int(value) / 1000, datetime.UTC)
    if kind == "uuid":
        return value if isinstance(value, uuid.UUID) else uuid.UUID(str(value))
    if kind == "bool":
        return bool(value)
    if kind in ("string", "records", "bytes"):
        return value
    if kind == "float64":
        return float(value)
    return int(value)


def _zero(f: dataclasses.Field[Any]) -> Any:
    kind = f.metadata.get("kafka_type", "")
    if _entity_of(f.type) is not None or _is_tuple(f.type):
        return () if _is_tuple(f.type) else None
    if kind == "error_code":
        return ErrorCode.none
    if kind.startswith("timedelta"):
        return datetime.timedelta(0)
    if kind.startswith("datetime"):
        return None
    if kind == "uuid":
        return NULL_UUID
    if kind == "bool":
        return False
    if kind == "string":
        return ""
    if kind in ("records", "bytes"):
        return None
    return 0
