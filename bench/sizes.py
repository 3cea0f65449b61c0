"""Data sizes and repetition counts: a full preset (about 15 minutes on 2 cores, both
backends), a ``--quick`` preset, and one command-line flag per field to change any of them."""

from __future__ import annotations

import argparse
import dataclasses
from dataclasses import dataclass, field


def _f(default: int, help: str) -> int:
    return field(default=default, metadata={"help": help})


@dataclass(frozen=True)
class Sizes:
    reps: int = _f(5, "interleaved repetitions of each ratio measurement")
    produce_mb: int = _f(128, "cases 1, 2: MB produced per repetition")
    max_txn_mb: int = _f(1024, "case 1: the largest transaction of the overhead curve, MB")
    txn_mb: int = _f(8, "cases 1, 2, 5: MB per transaction")
    record_bytes: int = _f(1024, "cases 1, 2, 5, 7: bytes per record")
    small_rows: int = _f(1_000, "case 3: rows per small append")
    small_appends: int = _f(40, "case 3: small appends per system")
    large_rows: int = _f(1_000_000, "case 3: rows per large append")
    large_reps: int = _f(3, "case 3: large appends per system")
    commit_samples: int = _f(120, "case 4: commits timed per partition count")
    consume_mb: int = _f(64, "case 5: MB read per repetition")
    poll_records: int = _f(100_000, "case 5: max_records per poll")
    user_rows: int = _f(2_000_000, "case 5: rows of the new-user shape (int64, float64, string; 4 partitions)")
    scale_partitions: int = _f(10_000, "case 6: partitions at the largest scale point")
    scale_segments: int = _f(1_000_000, "case 6: segments at the largest scale point")
    scale_points: int = _f(4, "case 6: scale points, each 10x the previous")
    scale_samples: int = _f(60, "case 6: commits and fetch plans timed per scale point")
    max_producers: int = _f(16, "case 7: the largest number of producer processes (1, 4, 16); "
                               "case 9: producers per side of its many-producer shape (at most 16)")
    concurrency_seconds: int = _f(8, "cases 7, 9: seconds each producer count runs")
    spark_rows: int = _f(1_000_000, "case 8: rows through the Spark stage")
    spark_reps: int = _f(5, "case 8: interleaved repetitions of each Spark stage")
    kafka_mb: int = _f(32, "case 9: MB produced and consumed through the Kafka protocol per repetition")
    compact_txns: int = _f(20_000, "case 10: transactions of 10 records written, then compacted")
    evolve_rows: int = _f(2_000_000, "case 11: rows written across 5 schema versions (and again in one)")
    metrics_partitions: int = _f(10_000, "case 12: partitions of the scraped broker")
    metrics_groups: int = _f(1_000, "case 12: consumer groups of the scraped broker")
    iceberg_mb: int = _f(64, "case 13: MB published to an Iceberg table per repetition")
    iceberg_lag_seconds: int = _f(30, "case 13: seconds of the steady workload whose lag is measured")
    iceberg_txns: int = _f(10_000, "case 15: transactions of 10 records published to an Iceberg table")

    @classmethod
    def quick(cls) -> Sizes:
        return cls(reps=3, produce_mb=32, small_appends=15, large_rows=200_000, large_reps=2, commit_samples=30,
                   consume_mb=32, user_rows=500_000, scale_partitions=1_000, scale_segments=100_000, scale_points=3,
                   scale_samples=20, concurrency_seconds=3, spark_rows=100_000, spark_reps=1, kafka_mb=8,
                   compact_txns=2_000, evolve_rows=500_000, metrics_partitions=1_000,
                   metrics_groups=100, iceberg_mb=16, iceberg_lag_seconds=15, iceberg_txns=2_000)

    @classmethod
    def add_arguments(cls, parser: argparse.ArgumentParser) -> None:
        group = parser.add_argument_group("sizes (default: the full preset, or --quick's)")
        for f in dataclasses.fields(cls):
            group.add_argument(f"--{f.name.replace('_', '-')}", type=int, default=None, metavar="N",
                               help=f"{f.metadata['help']} (full: {f.default})")

    @classmethod
    def from_arguments(cls, args: argparse.Namespace) -> Sizes:
        base = cls.quick() if args.quick else cls()
        changes = {f.name: getattr(args, f.name) for f in dataclasses.fields(cls) if getattr(args, f.name) is not None}
        for name, value in changes.items():
            if value <= 0:
                raise SystemExit(f"--{name.replace('_', '-')} must be positive, got {value}")
        return dataclasses.replace(base, **changes)

    def producer_counts(self) -> list[int]:
        """1, 4, 16: powers of 4 below ``max_producers``, then ``max_producers``."""
        counts, n = [], 1
        while n < self.max_producers:
            counts.append(n)
            n *= 4
        return [*counts, self.max_producers]
