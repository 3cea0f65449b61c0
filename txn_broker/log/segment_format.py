"""The segment format: one Arrow IPC file per segment, a ``_timestamp`` column first,
its buffers compressed with the topic's ``compression.type``; and the schema readers get
(the metadata columns, then the topic's own)."""

from __future__ import annotations

from collections.abc import Collection

import pyarrow as pa

from ..errors import InvalidConfigError

#: columns the broker adds in front of the topic's own on every read
METADATA_COLUMNS = ("_topic", "_partition", "_offset", "_timestamp")
TIMESTAMP_TYPE = pa.timestamp("ms", tz="UTC")
#: a compacted segment's stored offsets (first column; gaps are aborted records dropped)
OFFSET_COLUMN = "_offset"

#: segment compression codecs (topic config ``compression.type``), Arrow IPC's own
COMPRESSION_TYPES = ("uncompressed", "lz4", "zstd")
_IPC_OPTIONS = {
    "uncompressed": pa.ipc.IpcWriteOptions(),
    "lz4": pa.ipc.IpcWriteOptions(compression="lz4"),
    "zstd": pa.ipc.IpcWriteOptions(compression="zstd"),
}
#: the same, compressing on the calling thread: for a small table, handing its few buffers
#: to Arrow's thread pool costs more CPU than compressing them (10 records of 1 KB: 0.12
#: against 0.06 ms with zstd)
_IPC_OPTIONS_ONE_THREAD = {
    name: pa.ipc.IpcWriteOptions(compression=options.compression, use_threads=False)
    for name, options in _IPC_OPTIONS.items()
}
#: tables smaller than this are compressed on the calling thread
_THREADED_BYTES = 1 << 20
#: a segment larger than this is compressed only if a sample of it is
_SAMPLE_BYTES = 64 * 1024
#: ... at least this much smaller compressed
_MIN_SAVINGS = 0.1


def encode_segment(table: pa.Table, compression: str = "uncompressed", *,
                   sample_without: tuple[str, ...] = ()) -> pa.Buffer:
    """One segment object, as the Arrow buffer it was written to (see
    :func:`write_segment_file`, which writes the same bytes into a file-like sink)."""
    sink = pa.BufferOutputStream()
    write_segment_file(sink, table, compression, sample_without=sample_without)
    return sink.getvalue()


def write_segment_file(sink: pa.NativeFile, table: pa.Table, compression: str = "uncompressed", *,
                       sample_without: tuple[str, ...] = ()) -> None:
    """Write one segment object into ``sink`` (an object store's writer, or a buffer): an
    Arrow IPC file, its buffers compressed with ``compression`` (``uncompressed``, ``lz4``
    or ``zstd``: Arrow's IPC buffer compression, which every Arrow IPC reader decodes).
    Data that does not compress is stored as it is: Arrow does so per buffer, and a large
    segment whose first ``_SAMPLE_BYTES`` do not shrink by ``_MIN_SAVINGS`` is written
    uncompressed without trying (already compressed or encrypted payloads cost no
    compression time, and are read without a copy). ``sample_without``: columns left out
    of that sample (a compacted segment's ``_offset``, which always compresses, would
    otherwise decide for records that do not, and cost every read a decompression)."""
    table = _compact_null_nested(table)
    small = table.nbytes < _THREADED_BYTES
    try:
        options = (_IPC_OPTIONS_ONE_THREAD if small else _IPC_OPTIONS)[compression]
    except KeyError:
        raise InvalidConfigError(f"unknown segment compression {compression!r}; known: {COMPRESSION_TYPES}") from None
    if compression != "uncompressed" and table.nbytes > 4 * _SAMPLE_BYTES:
        sample = table.drop_columns(list(sample_without)) if sample_without else table
        if not _compresses(sample, _IPC_OPTIONS_ONE_THREAD[compression]):
            options = _IPC_OPTIONS["uncompressed"]
    with pa.ipc.new_file(sink, table.schema, options=options) as writer:
        writer.write_table(table)


def segment_overhead(topic_schema: pa.Schema, compression: str = "uncompressed") -> int:
    """The bytes of a segment of ``topic_schema`` that hold no record: the IPC file's
    framing, its schema (stored twice: the first message and the footer) and one record
    batch's metadata. A small segment is mostly this (10 records of 100 B: 800 of its
    2,000 bytes), a merged one pays it once, so sizing a merge by stored bytes overcounts
    what small inputs bring."""
    schema = pa.schema([pa.field("_timestamp", TIMESTAMP_TYPE), *topic_schema])
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, schema, options=_IPC_OPTIONS_ONE_THREAD[compression]) as writer:
        writer.write_batch(pa.RecordBatch.from_pylist([], schema=schema))
    return int(sink.tell())


def _compact_null_nested(table: pa.Table) -> pa.Table:
    """``table`` with its all-null nested columns (lists, maps, structs) rebuilt. Arrow's
    IPC writer writes the whole child offsets of a ``pa.nulls`` map, however few of its
    rows a slice holds: a segment cut from a large table with null headers carried 8
    bytes per row of the whole table. Rebuilt, such a column costs its validity and
    offsets."""
    columns = table.columns
    compacted = [pa.chunked_array([pa.concat_arrays([chunk]) for chunk in column.chunks], column.type)
                 if pa.types.is_nested(column.type) and len(column) and column.null_count == len(column) else column
                 for column in columns]
    if all(new is old for new, old in zip(compacted, columns, strict=True)):
        return table
    return pa.Table.from_arrays(compacted, schema=table.schema)


def _compresses(table: pa.Table, options: pa.ipc.IpcWriteOptions) -> bool:
    """Whether the first ``_SAMPLE_BYTES`` of ``table`` shrink by ``_MIN_SAVINGS`` (of a
    table whose all-null nested columns were rebuilt, :func:`_compact_null_nested`: a
    slice of a ``pa.nulls`` map carries its parent's offsets, which compression removes,
    and incompressible data looked compressible). ``options`` compress on the calling
    thread: for a sample this small Arrow's thread pool costs twice the CPU (0.46 against
    0.21 ms for 64 KB of incompressible bytes with zstd)."""
    sample = table.slice(0, max(1, table.num_rows * _SAMPLE_BYTES // max(table.nbytes, 1)))
    sizes = []
    for sample_options in (_IPC_OPTIONS["uncompressed"], options):
        sink = pa.MockOutputStream()
        with pa.ipc.new_file(sink, sample.schema, options=sample_options) as writer:
            writer.write_table(sample)
        sizes.append(sink.size())
    return bool(sizes[1] <= sizes[0] * (1 - _MIN_SAVINGS))


def decode_segment(data: bytes | pa.Buffer, skip: Collection[str] = (), *, use_threads: bool = True) -> pa.Table:
    """The records of a segment object, compressed or not. From a ``pa.Buffer`` (a memory
    map, an S3 body) the uncompressed columns are read without a copy. Columns named in
    ``skip`` (those a reader's schema version dropped) are not decoded at all.
    ``use_threads``: decompress the columns on pyarrow's CPU thread pool (False: on the
    calling thread, for callers that already decode in several threads of their own)."""
    source = data if isinstance(data, pa.Buffer) else pa.py_buffer(data)
    options = None if use_threads else pa.ipc.IpcReadOptions(use_threads=False)
    reader = pa.ipc.open_file(source, options=options)
    if skip:
        keep = [i for i, name in enumerate(reader.schema.names) if name not in skip]
        if keep and len(keep) < len(reader.schema):  # an empty list would mean every column
            reader = pa.ipc.open_file(source, options=pa.ipc.IpcReadOptions(included_fields=keep,
                                                                            use_threads=use_threads))
    return reader.read_all()


def with_timestamp(table: pa.Table, now_ms: int) -> pa.Table:
    ts = pa.repeat(pa.scalar(now_ms, TIMESTAMP_TYPE), table.num_rows)
    return table.add_column(0, pa.field("_timestamp", TIMESTAMP_TYPE), ts)


def read_schema(topic_schema: pa.Schema) -> pa.Schema:
    """The schema of what consumers get: metadata columns, then the topic's own."""
    return pa.schema(
        [
            pa.field("_topic", pa.string()),
            pa.field("_partition", pa.int32()),
            pa.field("_offset", pa.int64()),
            pa.field("_timestamp", TIMESTAMP_TYPE),
            *topic_schema,
        ]
    )
