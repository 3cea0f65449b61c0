"""Kafka's on-the-wire record format (RecordBatch, magic 2): decoding what producers send
and encoding what consumers fetch.

The protocol messages themselves come from ``kio`` (generated from Kafka's JSON message
definitions). The record batch is not one of those messages: it is an opaque ``records``
field whose format Kafka documents separately. kio's own record reader keeps only whole
seconds of the timestamps and reads no compressed batch, so the format is read and written
here, with CRC32C from ``crc32c`` and the codecs from ``cramjam``.

Records are handled a column at a time (docs/kafka-protocol.md, "Performance"): a batch
decodes into :class:`RecordColumns` (keys and values as Arrow binary arrays, timestamps and
offset deltas as numpy arrays) and encodes from them, with the varints of every record
computed at once in numpy and the records joined by Arrow, so the per-record work in
Python is one slice of the input. A batch the columnar decoder does not take as it is (a
record with headers, a varint of 10 bytes, anything malformed) goes through the
record-at-a-time reader (``_decode_records``), which also gives the exact error; the
record-at-a-time writer (``encode_batch``) stays as the reference the tests hold the
columnar one to, and writes control batches.

Malformed input raises :class:`RecordFormatError` (Kafka's CORRUPT_MESSAGE), never
anything else.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass

import cramjam
import crc32c
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

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


Headers = tuple[tuple[str, bytes | None], ...]


@dataclass(frozen=True)
class RecordColumns:
    """The records of one batch, a column each: ``headers`` is None when no record has
    any (one tuple per record otherwise)."""

    offset_deltas: np.ndarray  # int64
    timestamps: np.ndarray  # int64, milliseconds (absolute: the batch's base added)
    keys: pa.Array  # binary, null for a null key
    values: pa.Array  # binary, null for a null value
    headers: list[Headers] | None = None

    def __len__(self) -> int:
        return len(self.timestamps)

    @classmethod
    def from_records(cls, records: Sequence[Record]) -> RecordColumns:
        headers = [r.headers for r in records]
        return cls(np.array([r.offset_delta for r in records], dtype=np.int64),
                   np.array([r.timestamp_ms for r in records], dtype=np.int64),
                   pa.array([r.key for r in records], pa.binary()),
                   pa.array([r.value for r in records], pa.binary()),
                   headers if any(headers) else None)

    def to_records(self) -> list[Record]:
        keys, values = self.keys.to_pylist(), self.values.to_pylist()
        headers = self.headers or [()] * len(self)
        return [Record(int(d), int(t), k, v, tuple(h)) for d, t, k, v, h in
                zip(self.offset_deltas.tolist(), self.timestamps.tolist(), keys, values, headers, strict=True)]


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
    columns: RecordColumns

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
        return len(self.columns)

    @property
    def records(self) -> list[Record]:
        """The records one by one (built from the columns on each call)."""
        return self.columns.to_records()


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
    raw = data if isinstance(data, bytes) else bytes(data)
    buf = memoryview(raw)
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
        payload = buf[body + _AFTER_CRC.size:end]
        codec = attributes & COMPRESSION_MASK
        source, begin = raw, body + _AFTER_CRC.size
        if codec != NONE:
            source, begin = _decompress(codec, bytes(payload)), 0
            payload = memoryview(source)
        if count < 0 or count > len(payload):
            raise RecordFormatError(f"bad record count {count}")
        columns = _decode_columns(source, begin, begin + len(payload), count, base_ts)
        if columns is None:  # not for the columnar reader: record by record (and its exact error)
            columns = RecordColumns.from_records(_decode_records(payload, count, base_ts))
        batches.append(Batch(base_offset, leader_epoch, attributes, last_delta, base_ts, max_ts, pid, epoch,
                             base_seq, columns))
        pos = end
    return batches


def _varints_at(data: np.ndarray, pos: np.ndarray, stop: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """The zig-zag varints starting at ``pos`` (one per record), each ending at or before
    ``stop``: (values, positions after them); None if any is longer than 9 bytes or runs
    past its stop. Bytes past the end of ``data`` read as its last one: a varint that
    needs them runs past its stop."""
    window = data[np.minimum(pos[:, None] + np.arange(10), len(data) - 1)]
    ends = window < 0x80
    size = ends.argmax(axis=1) + 1  # bytes of each varint
    if not ends.any(axis=1).all() or size.max(initial=1) > 9:
        return None
    after = pos + size
    if (after > stop).any():
        return None
    raw = np.zeros(len(pos), dtype=np.uint64)
    for k in range(int(size.max(initial=1))):
        part = (window[:, k] & 0x7F).astype(np.uint64) << np.uint64(7 * k)
        raw |= np.where(k < size, part, np.uint64(0))
    values = (raw >> np.uint64(1)).astype(np.int64) ^ -(raw & np.uint64(1)).astype(np.int64)
    return values, after


#: records the run-length reader looks ahead at once; a run shorter than RUN_MIN hands the
#: rest of the batch to the record-by-record loop (records of varying sizes)
RUN_WINDOW = 4096
RUN_MIN = 8


def _record_bounds(data: bytes, array: np.ndarray, begin: int, end: int,
                   count: int) -> tuple[np.ndarray, np.ndarray] | None:
    """Where each record's body starts and stops (after its length varint), or None where
    the record-at-a-time reader must take over (a length of more than 2 bytes, a negative
    one, one past the end, bytes left over).

    Records are found one after the other, as each one's length says where the next
    starts; but producers write runs of records of the same size, so from each record
    the reader assumes the next ones have the same length bytes and checks all of them at
    once in numpy: the leading run that has them is, record by record, exactly what the
    one-by-one reading finds. Short runs switch to reading one record at a time."""
    starts = np.empty(count, dtype=np.int64)
    stops = np.empty(count, dtype=np.int64)
    pos, i, runs = begin, 0, True
    while i < count:
        if pos + 1 >= end:
            return None
        raw = data[pos]
        size = 1
        if raw >= 0x80:
            b1 = data[pos + 1]
            if b1 >= 0x80:
                return None
            raw = (raw & 0x7F) | (b1 << 7)
            size = 2
        length = (raw >> 1) ^ -(raw & 1)
        step = size + length
        if length < 0 or pos + step > end:
            return None
        taken = 1
        if runs:
            ahead = min(count - i, RUN_WINDOW)
            candidates = pos + step * np.arange(ahead, dtype=np.int64)
            fits = (candidates + step <= end) & (candidates + 1 < end)
            head = np.minimum(candidates, len(array) - 2)
            same = fits & (array[head] == data[pos])
            if size == 2:
                same &= array[head + 1] == data[pos + 1]
            taken = ahead if same.all() else int(same.argmin())
            runs = taken >= RUN_MIN
        starts[i:i + taken] = pos + size + step * np.arange(taken, dtype=np.int64)
        stops[i:i + taken] = starts[i:i + taken] + length
        i += taken
        pos += step * taken
    if pos != end or not count:
        return None
    return starts, stops


def _decode_columns(data: bytes, begin: int, end: int, count: int, base_ts: int) -> RecordColumns | None:
    """The records of a batch's (decompressed) payload ``data[begin:end]`` a column at a
    time, read in place; None where the record-at-a-time reader must take over (headers,
    anything unusual or malformed)."""
    array = np.frombuffer(data, dtype=np.uint8)
    bounds = _record_bounds(data, array, begin, end, count)
    if bounds is None:
        return None
    at, stop = bounds
    at = at + 1  # attributes (unused)
    if (at > stop).any():
        return None
    fields = []
    for _field in range(3):  # timestamp delta, offset delta, key length
        got = _varints_at(array, at, stop)
        if got is None:
            return None
        value, at = got
        fields.append(value)
    ts_delta, offset_deltas, key_lengths = fields
    if (key_lengths < -1).any():
        return None
    key_starts = at
    at = at + np.maximum(key_lengths, 0)
    if (at > stop).any():
        return None
    got = _varints_at(array, at, stop)
    if got is None:
        return None
    value_lengths, value_starts = got
    if (value_lengths < -1).any():
        return None
    at = value_starts + np.maximum(value_lengths, 0)
    if (at > stop).any():
        return None
    got = _varints_at(array, at, stop)
    if got is None:
        return None
    header_counts, at = got
    if header_counts.any() or (at != stop).any():
        return None
    return RecordColumns(offset_deltas, ts_delta + base_ts, _binary(array, key_starts, key_lengths),
                         _binary(array, value_starts, value_lengths))


def _binary(data: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> pa.Array:
    """A binary array of the slices ``data[start:start + length]`` (-1: null), made as
    Arrow's view layout over ``data`` (no per-record work) and compacted by a cast."""
    n = len(starts)
    sizes = np.maximum(lengths, 0)
    views = np.zeros((n, 16), dtype=np.uint8)
    views[:, 0:4] = sizes.astype("<i4").view(np.uint8).reshape(n, 4)
    inline = data[np.minimum(starts[:, None] + np.arange(12), len(data) - 1)]  # zeroed past each value
    inline[np.arange(12) >= sizes[:, None]] = 0
    views[:, 4:16] = inline
    long = sizes > 12  # prefix, buffer 0, offset
    views[long, 8:12] = 0
    views[long, 12:16] = starts[long].astype("<i4").view(np.uint8).reshape(-1, 4)
    nulls = lengths < 0
    validity = pa.py_buffer(np.packbits(~nulls, bitorder="little")) if nulls.any() else None
    array = pa.Array.from_buffers(pa.binary_view(), n, [validity, pa.py_buffer(views), pa.py_buffer(data)],
                                  null_count=int(nulls.sum()))
    return array.cast(pa.binary())


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


def encode_columns(base_offset: int, columns: RecordColumns, *, compression: int = NONE, attributes: int = 0,
                   producer_id: int = -1, producer_epoch: int = -1, base_sequence: int = -1) -> bytes:
    """One RecordBatch v2 from columns: the same bytes as :func:`encode_batch` gives for
    the same records, with no per-record work in Python unless records have headers."""
    return b"".join(encode_columns_parts(base_offset, columns, compression=compression, attributes=attributes,
                                         producer_id=producer_id, producer_epoch=producer_epoch,
                                         base_sequence=base_sequence))


def encode_columns_parts(base_offset: int, columns: RecordColumns, *, compression: int = NONE, attributes: int = 0,
                         producer_id: int = -1, producer_epoch: int = -1,
                         base_sequence: int = -1,
                         last_offset_delta: int | None = None) -> tuple[bytes, bytes | memoryview]:
    """:func:`encode_columns`'s batch as its header and its records, not joined (a fetch
    response writes the records from where they were encoded). ``last_offset_delta``: the
    batch's span when it reaches past its last record (offsets of records removed, as
    Kafka's log compaction leaves them: clients continue after the span), else the last
    record's delta."""
    n = len(columns)
    if not n:
        raise ValueError("a batch needs at least one record")
    stamps = columns.timestamps.astype(np.int64, copy=False)
    deltas = columns.offset_deltas.astype(np.int64, copy=False)
    base_ts = int(stamps[0])
    keys = _plain_binary(columns.keys)
    values = _plain_binary(columns.values)
    key_lengths = np.where(_valid(keys), _lengths(keys), -1)
    value_lengths = np.where(_valid(values), _lengths(values), -1)
    if columns.headers is None:
        suffix = pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(np.arange(n + 1, dtype=np.int32)),
                                                        pa.py_buffer(bytes(n))])
    else:
        suffix = pa.array([_encode_headers(h) for h in columns.headers], pa.binary())
    # the varints of the four fields at once (a call costs about as much for a few records
    # as for thousands), split by field
    matrix, sizes = _varints(np.concatenate([stamps - base_ts, deltas, key_lengths, value_lengths]))
    ts_part, off_part, key_part, value_part = ((matrix[i * n:(i + 1) * n], sizes[i * n:(i + 1) * n])
                                               for i in range(4))
    body_lengths = (1 + sizes.reshape(4, n).sum(axis=0) + np.maximum(key_lengths, 0)
                    + np.maximum(value_lengths, 0) + _lengths(suffix))
    attr_part = (np.zeros((n, 1), dtype=np.uint8), np.ones(n, dtype=np.int64))
    head = _joined([_varints(body_lengths), attr_part, ts_part, off_part, key_part])
    records = pc.binary_join_element_wise(head, _no_nulls(keys), _joined([value_part]), _no_nulls(values),
                                          suffix, b"")
    offsets = np.frombuffer(records.buffers()[1], dtype=np.int32, count=n + 1, offset=4 * records.offset)
    body = memoryview(records.buffers()[2])[int(offsets[0]):int(offsets[-1])]
    payload = body if compression == NONE else _compress(compression, bytes(body))
    span = int(deltas[-1]) if last_offset_delta is None else max(last_offset_delta, int(deltas[-1]))
    after = _AFTER_CRC.pack(attributes | compression, span, base_ts, int(stamps.max()), producer_id,
                            producer_epoch, base_sequence, n)
    crc = crc32c.crc32c(payload, crc32c.crc32c(after))
    prefix = _PREFIX.pack(base_offset, len(after) + len(payload) + 9, 0, 2, crc)
    return prefix + after, payload


def _plain_binary(array: pa.Array | pa.ChunkedArray) -> pa.Array:
    if isinstance(array, pa.ChunkedArray):  # one chunk taken as it is: combining copies it
        array = array.chunk(0) if array.num_chunks == 1 else array.combine_chunks()
    return array.cast(pa.binary()) if array.type != pa.binary() else array


def _no_nulls(array: pa.Array) -> pa.Array:
    """Nulls as empty values (their length says -1); the array itself when it has none."""
    return array.fill_null(b"") if array.null_count else array


def _valid(array: pa.Array) -> np.ndarray:
    if not array.null_count:
        return np.ones(len(array), dtype=bool)
    return array.is_valid().to_numpy(zero_copy_only=False)


def _lengths(array: pa.Array) -> np.ndarray:
    """Bytes of each value (0 for a null)."""
    offsets = np.frombuffer(array.buffers()[1], dtype=np.int32, count=len(array) + 1, offset=4 * array.offset)
    return np.diff(offsets).astype(np.int64)


def _encode_headers(headers: Headers) -> bytes:
    out = bytearray()
    _write_varint(out, len(headers))
    for hkey, hvalue in headers:
        _write_bytes(out, hkey.encode("utf-8"))
        _write_bytes(out, hvalue)
    return bytes(out)


#: the smallest zig-zag value of each varint length past one byte (2 bytes from 2**7, ...)
_VARINT_STEPS = np.array([1 << (7 * k) for k in range(1, 10)], dtype=np.uint64)


def _varints(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The zig-zag varints of ``values`` (int64): a byte matrix, one row per value padded
    on the right, and the length of each."""
    values = values.astype(np.int64, copy=False)
    raw = ((values << np.int64(1)) ^ (values >> np.int64(63))).view(np.uint64)
    sizes = np.searchsorted(_VARINT_STEPS, raw, side="right") + 1
    width = int(sizes.max(initial=1))
    matrix = np.empty((len(values), width), dtype=np.uint8)
    if width == 1:  # one byte each (no continuation bit): the values themselves
        matrix[:, 0] = raw
        return matrix, sizes
    more = sizes - 1  # byte k carries the continuation bit while k < more (bytes follow it)
    for k in range(width):
        group = ((raw >> np.uint64(7 * k)) & np.uint64(0x7F)).astype(np.uint8)
        matrix[:, k] = group | ((more > k).view(np.uint8) << np.uint8(7))
    return matrix, sizes


def _joined(parts: list[tuple[np.ndarray, np.ndarray]]) -> pa.Array:
    """A binary array whose value i is the concatenation of row i's bytes of every part."""
    matrix = np.hstack([m for m, _ in parts])
    mask = np.hstack([np.arange(m.shape[1]) < sizes[:, None] for m, sizes in parts])
    sizes = np.sum([sizes for _, sizes in parts], axis=0)
    offsets = np.zeros(len(sizes) + 1, dtype=np.int32)
    np.cumsum(sizes, out=offsets[1:])
    return pa.Array.from_buffers(pa.binary(), len(sizes), [None, pa.py_buffer(offsets),
                                                           pa.py_buffer(matrix[mask].tobytes())])


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
