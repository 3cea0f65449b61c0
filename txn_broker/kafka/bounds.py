"""Checking a request's length fields before kio decodes it.

kio's native decoder trusts the lengths it reads: a compact array announcing 4 billion
elements makes it allocate for them, and the process aborts when that fails (one 20-byte
Metadata request was enough). :func:`check_request` walks the frame as kio would, driven by
the same schema classes (their fields' ``kafka_type``, tags and ``__flexible__``), reading
nothing but lengths, and refuses any array, string, bytes or tagged-field length larger
than the bytes left in the frame. Whatever passes holds no length kio could choke on: every
element of an array takes at least one byte, so an array cannot announce more elements
than there are bytes.

The walk is stricter than kio where being lenient could make it lose its place (a varint of
more than its five bytes, a nullable struct's marker other than -1 or 1, a tagged field
whose value does not fill its announced size exactly); such frames are malformed anyway.

It is more lenient than kio in one way the protocol asks for: a tagged field whose tag the
schema does not know is skipped (KIP-482 lets a client add tagged fields to a version a
broker already speaks; Kafka's brokers skip them), where kio refuses the whole request.
:func:`check_request` returns the frame without such fields, with the counts and sizes that
enclose them rewritten, for kio to decode.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable
from typing import Any

from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveField,
    PrimitiveTupleField,
    classify_field,
    get_field_tag,
    is_optional,
)


class LengthError(ValueError):
    """A length field of a request is larger than what is left of its frame, or the frame
    ends inside a field."""


#: bytes of each fixed-size Kafka type
FIXED_SIZES = {
    "bool": 1, "int8": 1, "uint8": 1,
    "int16": 2, "uint16": 2, "error_code": 2,
    "int32": 4, "uint32": 4, "timedelta_i32": 4,
    "int64": 8, "uint64": 8, "timedelta_i64": 8, "datetime_i64": 8, "float64": 8,
    "uuid": 16,
}
#: the longest unsigned varint (32 bits) in bytes
MAX_VARINT_BYTES = 5

#: a step of a walk: (frame, position, end of the frame) -> position after the field
Step = Callable[[memoryview, int, int], int]


def check_request(header_cls: type[Any], body_cls: type[Any], frame: bytes | memoryview) -> bytes | memoryview:
    """Raise LengthError unless every length in ``frame`` (a request header of
    ``header_cls`` then a body of ``body_cls``) fits in the bytes that follow it. Bytes after
    the body are allowed, as :func:`txn_broker.kafka.codec.decode_request` allows them.

    Returns ``frame`` itself, or, when it holds tagged fields the schema does not know, a
    copy without them."""
    view = memoryview(frame).cast("B") if not isinstance(frame, memoryview) or frame.format != "B" else frame
    end = len(view)
    _walk.unknown = unknown = _UnknownTags()
    try:
        pos = _entity_step(header_cls)(view, 0, end)
        _entity_step(body_cls)(view, pos, end)
    finally:
        _walk.unknown = None
    return unknown.strip(view) if unknown.edits else frame


# -- skipping tagged fields the schema does not know ------------------------------------------


class _UnknownTags:
    """What a walk found to strip: byte ranges to replace (an unknown tagged field by
    nothing, its section's count by the smaller count), and the known tagged fields whose
    announced size must shrink by what is stripped inside them."""

    def __init__(self) -> None:
        self.edits: list[tuple[int, int, bytes]] = []
        #: (size start, size end, value start, value end) of each known tagged field read
        self.sized: list[tuple[int, int, int, int]] = []

    def strip(self, view: memoryview) -> bytes:
        edits = list(self.edits)
        # innermost first, so that an enclosing field's new size counts the inner ones'
        for size_start, size_end, start, end in sorted(self.sized, key=lambda s: s[3] - s[2]):
            change = sum(len(new) - (b - a) for a, b, new in edits if start <= a and b <= end)
            if change:
                edits.append((size_start, size_end, _encode_uvarint(end - start + change)))
        out, pos = bytearray(), 0
        for a, b, new in sorted(edits):
            out += view[pos:a]
            out += new
            pos = b
        out += view[pos:]
        return bytes(out)


#: the walk in progress on this thread (listener worker threads decode concurrently)
_walk = threading.local()


def _encode_uvarint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


# -- reading the lengths themselves ---------------------------------------------------------


def _need(pos: int, size: int, end: int, what: str) -> int:
    if size < 0 or size > end - pos:
        raise LengthError(f"{what} needs {size} bytes at byte {pos}; {end - pos} are left in the frame")
    return pos + size


def _uvarint(view: memoryview, pos: int, end: int) -> tuple[int, int]:
    value = shift = 0
    for i in range(MAX_VARINT_BYTES):
        if pos + i >= end:
            raise LengthError(f"the frame ends inside a varint at byte {pos}")
        byte = view[pos + i]
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            if value > 0xFFFFFFFF:
                raise LengthError(f"a varint of more than 32 bits at byte {pos}")
            return value, pos + i + 1
        shift += 7
    raise LengthError(f"a varint of more than {MAX_VARINT_BYTES} bytes at byte {pos}")


def _signed(view: memoryview, pos: int, end: int, size: int) -> tuple[int, int]:
    after = _need(pos, size, end, "a length")
    return int.from_bytes(view[pos:after], "big", signed=True), after


# -- steps for each kind of field -----------------------------------------------------------


def _fixed(size: int) -> Step:
    def step(view: memoryview, pos: int, end: int) -> int:
        return _need(pos, size, end, "a fixed-size field")
    return step


def _legacy_sized(prefix: int) -> Step:
    """A string (int16 length) or bytes (int32 length); -1 is null."""
    def step(view: memoryview, pos: int, end: int) -> int:
        size, pos = _signed(view, pos, end, prefix)
        return pos if size == -1 else _need(pos, size, end, "a string or bytes")
    return step


def _compact_sized(view: memoryview, pos: int, end: int) -> int:
    """A compact string or bytes: an unsigned varint of length + 1; 0 is null."""
    size, pos = _uvarint(view, pos, end)
    return pos if size == 0 else _need(pos, size - 1, end, "a compact string or bytes")


def _array(item: Step, flexible: bool, fixed: int | None = None) -> Step:
    """An array of ``item`` (of ``fixed`` bytes each when their size is fixed)."""
    item_size = fixed or 1
    def step(view: memoryview, pos: int, end: int) -> int:
        if flexible:
            count, pos = _uvarint(view, pos, end)
            count -= 1  # 0 (now -1) is null
        else:
            count, pos = _signed(view, pos, end, 4)
        if count < 0:
            return pos
        # each element takes at least a byte in every schema kio has; an array may never
        # announce more elements than bytes are left, whatever its elements are
        _need(pos, count * item_size, end, f"an array of {count} elements")
        if fixed is not None:
            return pos + count * fixed
        for _ in range(count):
            pos = item(view, pos, end)
        return pos
    return step


def _nullable(entity: Step) -> Step:
    """A nullable struct (KIP-893): an int8 marker, -1 null or 1 present."""
    def step(view: memoryview, pos: int, end: int) -> int:
        marker, pos = _signed(view, pos, end, 1)
        if marker == -1:
            return pos
        if marker != 1:
            raise LengthError(f"a nullable struct's marker is {marker} at byte {pos - 1}")
        return entity(view, pos, end)
    return step


def _primitive(kafka_type: str, flexible: bool, legacy_string: bool = False) -> Step:
    if kafka_type in FIXED_SIZES:
        return _fixed(FIXED_SIZES[kafka_type])
    if kafka_type == "string":
        return _legacy_sized(2) if legacy_string or not flexible else _compact_sized
    if kafka_type in ("bytes", "records"):
        return _compact_sized if flexible else _legacy_sized(4)
    raise LengthError(f"no rule for the Kafka type {kafka_type!r}")  # a kio newer than this module


def _field_step(entity_cls: type[Any], field: dataclasses.Field[Any], tagged: bool) -> Step:
    flexible = bool(entity_cls.__flexible__)
    kind = classify_field(field)
    # RequestHeader.client_id is a legacy string in every header version (as kio reads it)
    legacy_string = entity_cls.__name__ == "RequestHeader" and field.name == "client_id"
    if isinstance(kind, PrimitiveField):
        return _primitive(field.metadata["kafka_type"], flexible, legacy_string)
    if isinstance(kind, PrimitiveTupleField):
        kafka_type = field.metadata["kafka_type"]
        return _array(_primitive(kafka_type, flexible), flexible, FIXED_SIZES.get(kafka_type))
    if isinstance(kind, EntityField):
        inner = _entity_step(kind.type_)
        return _nullable(inner) if is_optional(field) and not tagged else inner
    if isinstance(kind, EntityTupleField):
        return _array(_entity_step(kind.type_), flexible)
    raise LengthError(f"no rule for the field {field.name} of {entity_cls.__name__}")


_steps: dict[type[Any], Step] = {}


def _entity_step(entity_cls: type[Any]) -> Step:
    """The walk over one entity: its fields in order, then (flexible versions) its tagged
    fields: a count, then for each a tag, a size and a value of that size. Built once per
    class."""
    if entity_cls in _steps:
        return _steps[entity_cls]
    plain: list[Step] = []
    tags: dict[int, Step] = {}
    for field in dataclasses.fields(entity_cls):
        tag = get_field_tag(field)
        if tag is None:
            plain.append(_field_step(entity_cls, field, tagged=False))
        else:
            tags[int(tag)] = _field_step(entity_cls, field, tagged=True)
    flexible = bool(entity_cls.__flexible__)

    def step(view: memoryview, pos: int, end: int) -> int:
        for field_step in plain:
            pos = field_step(view, pos, end)
        if not flexible:
            return pos
        count_at = pos
        count, pos = _uvarint(view, pos, end)
        count_end = pos
        _need(pos, count, end, f"{count} tagged fields")
        skipped = 0
        unknown: _UnknownTags | None = getattr(_walk, "unknown", None)
        for _ in range(count):
            field_at = pos
            tag, pos = _uvarint(view, pos, end)
            size_at = pos
            size, pos = _uvarint(view, pos, end)
            after = _need(pos, size, end, f"tagged field {tag}")
            known = tags.get(tag)
            if known is not None:
                if known(view, pos, after) != after:
                    raise LengthError(f"tagged field {tag} does not fill its {size} bytes")
                if unknown is not None:
                    unknown.sized.append((size_at, pos, pos, after))
            elif unknown is not None:
                unknown.edits.append((field_at, after, b""))
                skipped += 1
            pos = after
        if skipped and unknown is not None:
            unknown.edits.append((count_at, count_end, _encode_uvarint(count - skipped)))
        return pos
    _steps[entity_cls] = step
    return step
