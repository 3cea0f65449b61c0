"""Case 3: append + commit against pyiceberg (SqlCatalog) and delta-rs (``deltalake``),
all in this process, on the same storage (the same local file system, or the same bucket
of the same S3 server) and, for pyiceberg's catalog, the same database server (a separate
database on the benchmark's PostgreSQL; a SQLite file next to the broker's on the
embedded set-up). The same Arrow table goes to all three.

Targets: small appends (1,000 rows): p50 latency ≤ 1/3 of pyiceberg's; large appends
(1,000,000 rows): throughput ≥ 1.0× both peers.

The broker's append is one transaction: ``begin``, ``send(table)``, ``commit``. The peers
append with their defaults (Parquet, zstd for pyiceberg, snappy for delta-rs); the broker
writes Arrow IPC, uncompressed.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import Any

import pyarrow as pa

from . import data
from .harness import CaseResult, Figure, Target, latency_figure, mb, percentiles, throughput_ratio, timed
from .servers import Backend
from .sizes import Sizes
from .workload import drop_topic, new_topic, unique

TITLE = "Append + commit vs pyiceberg and delta-rs"
SMALL_TARGET = Target("<=", round(1 / 3, 3))
LARGE_TARGET = Target(">=", 1.0)
SYSTEMS = ("txn-broker", "pyiceberg", "delta-rs")


class Appenders:
    """One append function per system, each writing to its own table of one kind."""

    def __init__(self, backend: Backend, broker: Any, catalog: Any, kind: str, schema: pa.Schema) -> None:
        from deltalake import write_deltalake

        self.backend = backend
        self.broker = broker
        self.topic = new_topic(broker, f"c3-{kind}", schema)
        self.producer = broker.producer(transactional_id=unique(f"bench-c3-{kind}"))
        self.producer.init_transactions()
        self.catalog = catalog
        self.iceberg_name = f"bench.{kind}_{unique('t').replace('-', '_')}"
        self.iceberg = catalog.create_table(self.iceberg_name, schema=schema)
        self.delta_prefix = unique(f"delta-{kind}")
        self.delta_uri = backend.location(self.delta_prefix)
        self._write_delta = write_deltalake

    def broker_append(self, table: pa.Table) -> None:
        with self.producer.transaction():
            self.producer.send(self.topic, table)

    def iceberg_append(self, table: pa.Table) -> None:
        self.iceberg.append(table)

    def delta_append(self, table: pa.Table) -> None:
        self._write_delta(self.delta_uri, table, mode="append", storage_options=self.backend.delta_options())

    def functions(self) -> dict[str, Callable[[pa.Table], None]]:
        return {"txn-broker": self.broker_append, "pyiceberg": self.iceberg_append, "delta-rs": self.delta_append}

    def close(self) -> None:
        self.producer.close()
        drop_topic(self.broker, self.topic)
        self.catalog.purge_table(self.iceberg_name)
        fs, base = self.backend.arrow_fs()
        fs.delete_dir_contents(f"{base}/{self.delta_prefix}", missing_dir_ok=True)


def run(backend: Backend, sizes: Sizes, progress: Callable[[str], None]) -> CaseResult:
    small = data.orders(sizes.small_rows, seed=1)
    large = data.orders(sizes.large_rows, seed=2)
    result = CaseResult(3, TITLE, backend.name, sizes=(
        f"small: {sizes.small_appends} appends of {sizes.small_rows:,} rows ({mb(small.nbytes)}) per system; "
        f"large: {sizes.large_reps} appends of {sizes.large_rows:,} rows ({mb(large.nbytes)}) per system; "
        f"7 columns (int64, timestamp, float64, strings)"))
    broker = backend.connect()
    catalog = backend.iceberg_catalog("c3")
    catalog.create_namespace("bench")
    try:
        _small(result, backend, broker, catalog, small, sizes, progress)
        _large(result, backend, broker, catalog, large, sizes, progress)
    finally:
        broker.close()
    return result


def _small(result: CaseResult, backend: Backend, broker: Any, catalog: Any, table: pa.Table, sizes: Sizes,
           progress: Callable[[str], None]) -> None:
    appenders = Appenders(backend, broker, catalog, "small", table.schema)
    try:
        functions = appenders.functions()
        for append in functions.values():  # warm-up: first writes create files, logs, pools
            append(table)
        samples: dict[str, list[float]] = {name: [] for name in functions}
        for i in range(sizes.small_appends):
            order = list(functions)[i % 3:] + list(functions)[:i % 3]
            for name in order:
                samples[name].append(timed(lambda name=name: functions[name](table)))
        progress("small appends: " + ", ".join(f"{n} p50 {percentiles(s)['p50']:.1f} ms" for n, s in samples.items()))
    finally:
        appenders.close()
    p50 = {name: percentiles(s)["p50"] for name, s in samples.items()}
    for name in SYSTEMS:
        result.add(latency_figure(f"small append p50, {name}", samples[name], 50))
    result.add(Figure("small append p50 latency, txn-broker / pyiceberg", p50["txn-broker"] / p50["pyiceberg"], "×",
                      SMALL_TARGET, None, {"p50_ms": p50}))
    result.add(Figure("small append p50 latency, txn-broker / delta-rs", p50["txn-broker"] / p50["delta-rs"], "×",
                      None, None, {"p50_ms": p50}))
    result.series["small_latency_ms"] = {n: percentiles(s) for n, s in samples.items()}
    result.series["small_samples_s"] = samples


def _large(result: CaseResult, backend: Backend, broker: Any, catalog: Any, table: pa.Table, sizes: Sizes,
           progress: Callable[[str], None]) -> None:
    appenders = Appenders(backend, broker, catalog, "large", table.schema)
    try:
        functions = appenders.functions()
        times: dict[str, list[float]] = {name: [] for name in functions}
        for rep in range(sizes.large_reps):
            order = list(functions)[rep % 3:] + list(functions)[:rep % 3]
            for name in order:
                times[name].append(timed(lambda name=name: functions[name](table)))
            progress(f"large append {rep + 1}/{sizes.large_reps}: "
                     + ", ".join(f"{n} {t[-1]:.2f}s" for n, t in times.items()))
    finally:
        appenders.close()
    for peer in ("pyiceberg", "delta-rs"):
        result.add(throughput_ratio(f"large append throughput, txn-broker / {peer}", times[peer],
                                    times["txn-broker"], LARGE_TARGET, rows=table.num_rows))
    result.series["large_seconds"] = times
    rows_per_s = {n: table.num_rows / statistics.median(t) for n, t in times.items()}
    result.notes.append("Large appends, median rows/s: "
                        + ", ".join(f"{n} {v:,.0f}" for n, v in rows_per_s.items()) + ".")
