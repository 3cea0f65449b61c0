"""Kafka's on-the-wire record format (RecordBatch, magic 2): decoding what producers send
and encoding what consumers fetch.

The protocol messages themselves come from ``kio`` (generated from Kafka's JSON message
definitions). The record batch is not one of those messages: it is an opaque ``records``
field whose format Kafka documents separately. kio's own record reader keeps only whole
seconds of the timestamps and reads no compressed batch, so the format is read and written
here, with CRC32C from ``crc32c`` and the codecs from ``cramjam``.

Malformed input raises :class:`RecordFormatError` (Kafka's CORRUPT_MESSAGE), never
anything else.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

import cramjam
import crc32c

# attributes of a batch
COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE = 0x08
TRANSACTIONAL = 0x10
CONTROL = 0x20

NONE, GZIP, SNAPPY, LZ4, ZSTD = range(5)
COMPRESSION_NAMES = {NONE: "none", GZIP: "gzip", SNAPPY: "snappy", LZ4: "lz4", ZSTD: "zstd"}

#: baseOffset(8) batchLength(4) partitionLeaderEpoch(4) magic(1) crc(4)
_PREFIX = struct.Struct(">qiibI")
#: attributes(2) lastOffsetDelta(4) baseTimestamp(8) maxTimestamp(8) producerId(8)
#: producerEpoch(2) baseSequence(4) recordCount(4)
_AFTER_CRC = struct.Struct(">hiqqqhii")
BATCH_OVERHEAD = _PREFIX.size + _AFTER_CRC.size  # 61 bytes
_XERIAL_MAGIC = b"\x82SNAPPY\x00"

#: a decompressed batch may not grow beyond this (a zip bomb costs the connection only)
MAX_DECOMPRESSED_BYTES = 256 * 1024 * 1024


class RecordFormatError(ValueError):
    """The records of a produce request are not valid RecordBatch v2 data."""


@dataclass(frozen=True)
class Record:
    offset_delta: int
    timestamp_ms: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()


@dataclass
class Batch:
    base_offset: int
    partition_leader_epoch: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records: list[Record] = field(default_factory=list)

    @property
    def compression(self) -> int:
        return self.attributes & COMPRESSION_MASK

    @property
    def transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL)

    @property
    def control(self) -> bool:
        return bool(self.attributes & CONTROL)

    @property
    def record_count(self) -> int:
        return len(self.records)


# -- varints ---------------------------------------------------------------------------------


def _read_varint(buf: memoryview, pos: int, end: int) -> tuple[int, int]:
    """A zig-zag varint (at most 10 bytes) at ``pos``; returns (value, new position)."""
    result = 0
    shift = 0
    while True:
        if pos >= end or shift > 63:
            raise RecordFormatError("truncated or overlong varint")
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            break
        shift += 7
    return (result >> 1) ^ -(result & 1), pos


def _write_varint(out: bytearray, value: int) -> None:
    v = (value << 1) ^ (value >> 63)
    v &= (1 << 64) - 1
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)


def _read_bytes(buf: memoryview, pos: int, end: int) -> tuple[bytes | None, int]:
    length, pos = _read_varint(buf, pos, end)
    if length < 0:
        if length != -1:
            raise RecordFormatError(f"negative length {length}")
        return None, pos
    if pos + length > end:
        raise RecordFormatError("a field runs past the end of its record")
    return bytes(buf[pos:pos + length]), pos + length


def _write_bytes(out: bytearray, data: bytes | None) -> None:
    if data is None:
        _write_varint(out, -1)
    else:
        _write_varint(out, len(data))
        out += data


# -- compression -----------------------------------------------------------------------------


def _decompress(codec: int, data: bytes) -> bytes:
    try:
        if codec == GZIP:
            out = bytes(cramjam.gzip.decompress(data))
        elif codec == SNAPPY:
            out = _snappy_decompress(data)
        elif codec == LZ4:
            out = bytes(cramjam.lz4.decompress(data))
        elif codec == ZSTD:
            out = bytes(cramjam.zstd.decompress(data))
        else:
            raise RecordFormatError(f"unknown compression codec {codec}")
    except RecordFormatError:
        raise
    except Exception as error:  # cramjam raises its own DecompressionError
        raise RecordFormatError(f"cannot decompress a {COMPRESSION_NAMES.get(codec)} batch: {error}") from None
    if len(out) > MAX_DECOMPRESSED_BYTES:
        raise RecordFormatError("a batch decompresses to more than the allowed size")
    return out


def _snappy_decompress(data: bytes) -> bytes:
    """Raw snappy (librdkafka) or the xerial framing Java clients write."""
    if not data.startswith(_XERIAL_MAGIC):
        return bytes(cramjam.snappy.decompress_raw(data))
    pos = 16  # magic, version, compatible version
    out = bytearray()
    while pos < len(data):
        if pos + 4 > len(data):
            raise RecordFormatError("truncated xerial snappy block")
        (size,) = struct.unpack_from(">i", data, pos)
        pos += 4
        if size < 0 or pos + size > len(data):
            raise RecordFormatError("bad xerial snappy block size")
        out += bytes(cramjam.snappy.decompress_raw(data[pos:pos + size]))
        pos += size
        if len(out) > MAX_DECOMPRESSED_BYTES:
            raise RecordFormatError("a batch decompresses to more than the allowed size")
    return bytes(out)


def _compress(codec: int, data: bytes) -> bytes:
    if codec == NONE:
        return data
    if codec == GZIP:
        return bytes(cramjam.gzip.compress(data))
    if codec == SNAPPY:
        return bytes(cramjam.snappy.compress_raw(data))
    if codec == LZ4:
        return bytes(cramjam.lz4.compress(data))
    if codec == ZSTD:
        return bytes(cramjam.zstd.compress(data))
    raise ValueError(f"unknown compression codec {codec}")


# -- decoding --------------------------------------------------------------------------------


def decode_batches(data: bytes | memoryview | None) -> list[Batch]:
    """Every batch of a produce request's ``records`` field, CRC checked."""
    if not data:
        return []
    buf = memoryview(bytes(data))
    pos = 0
    batches = []
    while pos < len(buf):
        if pos + _PREFIX.size + _AFTER_CRC.size > len(buf):
            raise RecordFormatError("truncated record batch header")
        base_offset, length, leader_epoch, magic, crc = _PREFIX.unpack_from(buf, pos)
        if magic != 2:
            raise RecordFormatError(f"record batch magic {magic}: only magic 2 (Kafka 0.11+) is supported")
        end = pos + 12 + length
        body = pos + _PREFIX.size
        if length < _PREFIX.size - 12 + _AFTER_CRC.size or end > len(buf):
            raise RecordFormatError(f"record batch length {length} does not fit the {len(buf) - pos} bytes left")
        if crc32c.crc32c(buf[body:end]) != crc:
            raise RecordFormatError("record batch CRC mismatch")
        (attributes, last_delta, base_ts, max_ts, pid, epoch, base_seq, count) = _AFTER_CRC.unpack_from(buf, body)
        batch = Batch(base_offset, leader_epoch, attributes, last_delta, base_ts, max_ts, pid, epoch, base_seq)
        payload = buf[body + _AFTER_CRC.size:end]
        codec = attributes & COMPRESSION_MASK
        if codec != NONE:
            payload = memoryview(_decompress(codec, bytes(payload)))
        if count < 0 or count > len(payload):
            raise RecordFormatError(f"bad record count {count}")
        batch.records = _decode_records(payload, count, base_ts)
        batches.append(batch)
        pos = end
    return batches


def _decode_records(buf: memoryview, count: int, base_ts: int) -> list[Record]:
    records = []
    pos = 0
    end = len(buf)
    for _ in range(count):
        length, pos = _read_varint(buf, pos, end)
        stop = pos + length
        if length < 0 or stop > end:
            raise RecordFormatError("a record runs past the end of its batch")
        pos += 1  # attributes (unused)
        ts_delta, pos = _read_varint(buf, pos, stop)
        offset_delta, pos = _read_varint(buf, pos, stop)
        key, pos = _read_bytes(buf, pos, stop)
        value, pos = _read_bytes(buf, pos, stop)
        n_headers, pos = _read_varint(buf, pos, stop)
        if n_headers < 0 or n_headers > stop - pos:
            raise RecordFormatError(f"bad header count {n_headers}")
        headers = []
        for _h in range(n_headers):
            hkey, pos = _read_bytes(buf, pos, stop)
            hvalue, pos = _read_bytes(buf, pos, stop)
            if hkey is None:
                raise RecordFormatError("a header key is null")
            try:
                headers.append((hkey.decode("utf-8"), hvalue))
            except UnicodeDecodeError:
                raise RecordFormatError("a header key is not UTF-8") from None
        if pos != stop:
            raise RecordFormatError("a record's length does not match its fields")
        records.append(Record(offset_delta, base_ts + ts_delta, key, value, tuple(headers)))
    if pos != end:
        raise RecordFormatError("bytes left over after the batch's records")
    return records


# -- encoding --------------------------------------------------------------------------------


def encode_batch(base_offset: int, records: list[Record], *, compression: int = NONE,
                 attributes: int = 0, producer_id: int = -1, producer_epoch: int = -1,
                 base_sequence: int = -1, last_offset_delta: int | None = None) -> bytes:
    """One RecordBatch v2. ``last_offset_delta``: default the last record's offset delta
    (a control batch may cover more offsets than it has records)."""
    if not records:
        raise ValueError("a batch needs at least one record")
    base_ts = records[0].timestamp_ms
    max_ts = max(r.timestamp_ms for r in records)
    body = bytearray()
    for r in records:
        rec = bytearray(b"\x00")
        _write_varint(rec, r.timestamp_ms - base_ts)
        _write_varint(rec, r.offset_delta)
        _write_bytes(rec, r.key)
        _write_bytes(rec, r.value)
        _write_varint(rec, len(r.headers))
        for hkey, hvalue in r.headers:
            _write_bytes(rec, hkey.encode("utf-8"))
            _write_bytes(rec, hvalue)
        _write_varint(body, len(rec))
        body += rec
    payload = _compress(compression, bytes(body))
    delta = records[-1].offset_delta if last_offset_delta is None else last_offset_delta
    after = _AFTER_CRC.pack(attributes | compression, delta, base_ts, max_ts, producer_id,
                            producer_epoch, base_sequence, len(records)) + payload
    crc = crc32c.crc32c(after)
    return _PREFIX.pack(base_offset, len(after) + 9, 0, 2, crc) + after


def control_batch(base_offset: int, last_offset_delta: int, timestamp_ms: int, *, commit: bool,
                  producer_id: int = -1, producer_epoch: int = -1) -> bytes:
    """A transaction marker batch covering ``[base_offset, base_offset + last_offset_delta]``:
    clients skip it and continue after it. Used for offsets a reader must pass over without
    records (a read_committed reader over an aborted segment)."""
    key = struct.pack(">hh", 0, 1 if commit else 0)  # version 0, type: 0 abort, 1 commit
    value = struct.pack(">hi", 0, 0)  # version 0, coordinator epoch
    record = Record(last_offset_delta, timestamp_ms, key, value)
    return encode_batch(base_offset, [record], attributes=TRANSACTIONAL | CONTROL, producer_id=producer_id,
                        producer_epoch=producer_epoch, last_offset_delta=last_offset_delta)
