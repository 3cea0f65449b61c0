"""The benchmark cases of issue 9 (and later issues: case 10, compaction, issue 29; case 11,
schema evolution, issue 26; case 12, the metrics exporter's scrape, issue 27;
case 13, Iceberg tables, issue 25), by number, and where each one runs."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass

from .harness import CaseResult
from .servers import Backend
from .sizes import Sizes

Runner = Callable[[Backend, Sizes, Callable[[str], None]], CaseResult]


@dataclass(frozen=True)
class Case:
    number: int
    title: str
    module: str
    target: str
    #: the backends it runs on (its target applies to those in ``target_backends``)
    backends: tuple[str, ...] = ("sqlite", "postgres")
    target_backends: tuple[str, ...] = ("sqlite", "postgres")

    def runner(self) -> Runner:
        module = importlib.import_module(f"bench.{self.module}")
        run: Runner = module.run
        return run


CASES = {c.number: c for c in [
    Case(1, "transactional vs idempotent produce", "case_produce", "throughput ratio ≥ 0.95"),
    Case(2, "produce vs pyarrow (physical limit)", "case_physical", "throughput ratio ≥ 0.85"),
    Case(3, "append + commit vs pyiceberg and delta-rs", "case_peers",
         "small: p50 latency ≤ 1/3 of pyiceberg's; large: throughput ≥ 1.0× both"),
    Case(4, "commit latency, 1/8/64 partitions", "case_commit_latency", "p50 ≤ 5 ms, p99 ≤ 20 ms at 8 partitions",
         target_backends=("postgres",)),
    Case(5, "read_committed consume vs pyarrow and read_uncommitted", "case_consume",
         "≥ 0.90 and ≥ 0.95; new-user shape ≥ 0.90 at max_records=10,000, ≥ 0.50 at the default"),
    Case(6, "scale: commit latency and poll planning", "case_scale", "flat within 1.25×"),
    Case(7, "concurrent transactional producers (processes)", "case_concurrency",
         "aggregate commits/s at 16 ≥ 4× one producer", target_backends=("postgres",)),
    Case(8, "Spark stage through txn_topic vs plain Spark Parquet", "case_spark", "≥ 0.9"),
    Case(9, "Kafka clients through txn-broker serve vs the Python API", "case_kafka",
         "≥ 0.5× produce (idempotent, transactional) and consume"),
    Case(10, "small transactions: read_committed after compact", "case_compaction",
         "≥ 0.8× the same records written as one transaction per partition"),
    Case(11, "read_committed consume across 5 schema versions vs one version", "case_evolve",
         "throughput ratio ≥ 0.90"),
    Case(12, "Prometheus scrape of 10,000 partitions and 1,000 groups", "case_metrics", "p50 ≤ 1,000 ms"),
    Case(13, "Iceberg publish vs pyarrow; commit-to-visible lag", "case_iceberg",
         "publish ≥ 0.8× pyarrow; lag p50 ≤ 5 s"),
    Case(14, "Spark stage reading a topic's Iceberg table natively vs plain Spark Parquet", "case_spark_native",
         "≥ 0.95"),
    Case(15, "small transactions: Iceberg table scan after the small-file rewrite vs one file", "case_iceberg_small",
         "≥ 0.8 (pyiceberg and Spark)"),
]}
