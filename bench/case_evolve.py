"""Case 11 (issue 26, "Performance"): ``read_committed`` consume of a topic whose rows span
5 schema versions, against the same rows written under one version (the final schema).
Target: throughput ratio ≥ 0.90.

The evolving topic is made in version 1 and altered four times, with a fifth of the rows
written in each version (in that version's schema) before the next alteration:

- v1: ``id`` int64, ``a`` int32, ``b`` string, ``x`` float64, ``gone`` string;
- v2: ``note`` string added (nullable);
- v3: ``a`` widened to int64;
- v4: ``b`` renamed ``name`` (its field id kept);
- v5: ``gone`` dropped, and ``d`` int64 added, required with the default 7.

Reading it, every segment older than v5 is brought to v5 (a column filled with nulls or
its default, a cast, a rename by field id, a column dropped). The baseline topic is made
in v5's schema and holds the same rows as they read under v5 (``note`` null for the first
fifth, ``d`` 7 for the first four fifths), written the same way (4 partitions, a
transaction of one chunk per partition). Both are checked to read back the same rows
(not timed), then read whole in every repetition by a new consumer (cold segment
cache), polling ``poll_records`` at a time, the two taking turns."""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa

import txn_broker
from txn_broker import READ_COMMITTED, TopicPartition

from .harness import CaseResult, Target, interleaved, throughput_ratio, timed
from .servers import Backend
from .sizes import Sizes
from .workload import drop_topic, new_topic, unique

TITLE = "read_committed consume across 5 schema versions vs one version"
PARTITIONS = 4
CHUNK_ROWS = 100_000
VERSIONS = 5
DEFAULT_D = 7
TARGET = Target(">=", 0.90)

V1 = pa.schema([("id", pa.int64()), ("a", pa.int32()), ("b", pa.string()), ("x", pa.float64()),
                ("gone", pa.string())])
FINAL = pa.schema([pa.field("id", pa.int64()), pa.field("a", pa.int64()), pa.field("name", pa.string()),
                   pa.field("x", pa.float64()), pa.field("note", pa.string()),
                   pa.field("d", pa.int64(), nullable=False)])


def _alteration(latest: pa.Schema, version: int) -> pa.Schema:
    """The schema ``alter_topic`` is given to make ``version`` (2..5) from ``latest`` (the
    topic's latest, with its field ids)."""
    fields = list(latest)
    if version == 2:
        return pa.schema([*fields, pa.field("note", pa.string())])
    if version == 3:
        return pa.schema([f.with_type(pa.int64()) if f.name == "a" else f for f in fields])
    if version == 4:
        return pa.schema([f.with_name("name") if f.name == "b" else f for f in fields])
    if version == 5:
        return pa.schema([*(f for f in fields if f.name != "gone"),
                          txn_broker.with_default(pa.field("d", pa.int64(), nullable=False), DEFAULT_D)])
    raise ValueError(f"no alteration makes version {version}")


def _chunks(rows: int) -> list[tuple[int, dict[str, Any]]]:
    """``(version, columns)`` per chunk of at most CHUNK_ROWS rows: a fifth of ``rows`` in
    each version, in order, with every column any version has."""
    rng = np.random.default_rng(11)
    words = np.array([f"name-{i:05d}-{'y' * (i % 9)}" for i in range(2048)], dtype=object)
    out = []
    bounds = [rows * v // VERSIONS for v in range(VERSIONS + 1)]
    for version in range(1, VERSIONS + 1):
        for start in range(bounds[version - 1], bounds[version], CHUNK_ROWS):
            n = min(CHUNK_ROWS, bounds[version] - start)
            out.append((version, {
                "id": np.arange(start, start + n, dtype=np.int64),
                "a": rng.integers(-2**31, 2**31 - 1, n, dtype=np.int64),
                "b": pa.array(words[rng.integers(0, len(words), n)], type=pa.string()),
                "x": rng.random(n),
                "gone": pa.array(words[rng.integers(0, len(words), n)], type=pa.string()),
                "note": pa.array(words[rng.integers(0, len(words), n)], type=pa.string()),
                "d": rng.integers(0, 1_000_000, n, dtype=np.int64),
            }))
    return out


def _as_written(version: int, c: dict[str, Any]) -> pa.Table:
    """A chunk in the schema of the version it is written in (plain names: the producer
    matches them to the latest version)."""
    a = pa.array(c["a"].astype(np.int32) if version < 3 else c["a"], type=pa.int32() if version < 3 else pa.int64())
    cols: dict[str, Any] = {"id": c["id"], "a": a, ("b" if version < 4 else "name"): c["b"], "x": c["x"]}
    if version < 5:
        cols["gone"] = c["gone"]
    if version >= 2:
        cols["note"] = c["note"]
    if version >= 5:
        cols["d"] = c["d"]
    return pa.table(cols)


def _as_read(version: int, c: dict[str, Any]) -> pa.Table:
    """The same chunk as it reads under v5: the baseline topic's rows."""
    n = len(c["id"])
    a = c["a"].astype(np.int32).astype(np.int64) if version < 3 else c["a"]
    note = c["note"] if version >= 2 else pa.nulls(n, pa.string())
    d = c["d"] if version >= 5 else np.full(n, DEFAULT_D, dtype=np.int64)
    return pa.table({"id": c["id"], "a": a, "name": c["b"], "x": c["x"], "note": note, "d": d}, schema=FINAL)


def _write(producer: Any, topic: str, tables: list[pa.Table]) -> None:
    """A transaction per PARTITIONS tables, one to each partition."""
    for start in range(0, len(tables), PARTITIONS):
        with producer.transaction():
            for i in range(start, min(start + PARTITIONS, len(tables))):
                producer.send(topic, tables[i], partition=i % PARTITIONS)


def _consume(broker: Any, topic: str, expected: int, poll_records: int, keep: bool = False) -> pa.Table | None:
    consumer = broker.consumer(isolation_level=READ_COMMITTED)
    consumer.assign([TopicPartition(topic, p) for p in range(PARTITIONS)])
    got, batches = 0, []
    while got < expected:
        batch = consumer.poll(max_records=poll_records)
        if batch.num_rows == 0:
            raise RuntimeError(f"consumer of {topic} stopped at {got} of {expected} records")
        got += batch.num_rows
        if keep:
            batches.append(batch.select(FINAL.names))
    consumer.close()
    return pa.concat_tables(batches) if keep else None


def run(backend: Backend, sizes: Sizes, progress: Callable[[str], None]) -> CaseResult:
    rows = sizes.evolve_rows
    chunks = _chunks(rows)
    broker = backend.connect()
    evolving = new_topic(broker, "c11v", V1, partitions=PARTITIONS)
    single = new_topic(broker, "c11s", FINAL.set(FINAL.get_field_index("d"), txn_broker.with_default(
        FINAL.field("d"), DEFAULT_D)), partitions=PARTITIONS)
    try:
        producer = broker.producer(transactional_id=unique("bench-c11"))
        producer.init_transactions()
        for version in range(1, VERSIONS + 1):
            if version > 1:
                latest = broker.describe_topic(evolving).schema
                broker.alter_topic(evolving, schema=_alteration(latest, version), by="bench")
            _write(producer, evolving, [_as_written(v, c) for v, c in chunks if v == version])
        _write(producer, single, [_as_read(v, c) for v, c in chunks])
        producer.close()
        versions = len(broker.describe_topic(evolving).schema_versions)
        if versions != VERSIONS:
            raise RuntimeError(f"the evolving topic has {versions} schema versions, not {VERSIONS}")
        progress(f"{rows:,} rows in {VERSIONS} schema versions: checking both topics read the same rows")
        read = {t: _consume(broker, t, rows, sizes.poll_records, keep=True) for t in (evolving, single)}
        sort = [("id", "ascending")]
        got, want = (read[t].sort_by(sort) for t in (evolving, single))  # type: ignore[union-attr]
        if got.schema.names != want.schema.names or not got.cast(want.schema).equals(want):
            raise RuntimeError("the topic written in 5 schema versions does not read as the one written in v5")
        del read, got, want
        variants = {
            "one version": lambda: timed(lambda: _consume(broker, single, rows, sizes.poll_records)),
            "5 versions": lambda: timed(lambda: _consume(broker, evolving, rows, sizes.poll_records)),
        }
        times = interleaved(variants, sizes.reps, progress=progress)
    finally:
        drop_topic(broker, evolving)
        drop_topic(broker, single)
        broker.close()
    result = CaseResult(11, TITLE, backend.name, sizes=(
        f"{rows:,} rows in {PARTITIONS} partitions, a fifth written in each of {VERSIONS} schema versions (a column "
        f"added, int32 widened to int64, a rename, a column dropped and one added with a default), against the same "
        f"rows written in the final version; read whole per repetition with "
        f"poll(max_records={sizes.poll_records:,}); {sizes.reps} interleaved repetitions"))
    result.add(throughput_ratio("throughput, 5 schema versions / one version", times["one version"],
                                times["5 versions"], TARGET, rows=rows))
    result.series = {"seconds": times, "rows": rows}
    result.notes.append("Median seconds: " + ", ".join(
        f"{n} {statistics.median(ts):.3f}" for n, ts in times.items()) + ".")
    return result
