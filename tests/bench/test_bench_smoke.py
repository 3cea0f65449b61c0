"""The benchmark harness end to end on tiny sizes: every case runs, the JSON results and
the markdown report with its plots are written. (No timing is asserted: the figures of a
tiny run on a shared machine mean nothing; ``make bench`` measures.)"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.integration]

ROOT = Path(__file__).resolve().parents[2]
TINY = ["--quick", "--reps", "1", "--produce-mb", "2", "--txn-mb", "1", "--small-appends", "2", "--large-rows", "2000",
        "--large-reps", "1", "--commit-samples", "2", "--consume-mb", "2", "--user-rows", "20000",
        "--scale-partitions", "20", "--scale-segments", "400", "--scale-points", "2", "--scale-samples", "2",
        "--max-producers", "2", "--concurrency-seconds", "1", "--spark-rows", "2000", "--kafka-mb", "1",
        "--max-txn-mb", "1", "--compact-txns", "40", "--evolve-rows", "20000",
        "--metrics-partitions", "20", "--metrics-groups", "4", "--iceberg-mb", "2", "--iceberg-lag-seconds", "3"]


def run_bench(tmp_path: Path, *args: str) -> dict:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    proc = subprocess.run([sys.executable, "-m", "bench", *TINY, "--out", str(tmp_path), "--workdir", str(tmp_path),
                           "--doc", str(tmp_path / "benchmarks.md"), *args],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    files = list(tmp_path.glob("*-quick.json"))
    assert len(files) == 1, files
    run = json.loads(files[0].read_text())
    assert "figure" in proc.stdout and str(files[0]) in proc.stdout  # the summary table for people
    return run


def check_figures(run: dict, cases: set[int]) -> None:
    assert {r["case"] for r in run["results"]} == cases
    for r in run["results"]:
        if r["case"] == 8 and r["status"] == "not available":
            continue
        assert r["status"] == "ok", r
        assert r["figures"] and r["sizes"], r
        for f in r["figures"]:
            assert math.isfinite(f["value"]) and f["value"] > 0, f
            assert f["unit"] in ("×", "ms")
            if f["target"] is not None:
                assert f["met"] is (f["value"] >= f["target"]["bound"] if f["target"]["op"] == ">="
                                    else f["value"] <= f["target"]["bound"])


def test_every_case_on_the_embedded_backend(tmp_path):
    """Cases 1-7 and 10-13 (case 8 starts Spark, which the Spark tests cover; its adapter is checked
    below against the real stage module's signature)."""
    run = run_bench(tmp_path, "--backends", "sqlite", "--cases", "1,2,3,4,5,6,7,10,11,12,13")
    check_figures(run, {1, 2, 3, 4, 5, 6, 7, 10, 11, 12, 13})
    doc = (tmp_path / "benchmarks.md").read_text()
    assert "<!-- BEGIN GENERATED" in doc and "<!-- END GENERATED -->" in doc and "### Summary" in doc
    for image in ("throughput", "case3", "case4", "case6", "case7"):
        assert (tmp_path / "benchmarks" / f"{image}.png").stat().st_size > 1000
        assert f"benchmarks/{image}.png" in doc
    scale = next(r for r in run["results"] if r["case"] == 6)
    assert set(scale["plans"]) == {"partition_offsets", "fetch_plan", "write_markers", "add_txn_append"}
    # rewriting keeps what was written by hand around the generated part
    (tmp_path / "benchmarks.md").write_text("intro by hand\n" + doc + "\nanalysis by hand\n")
    from bench import report

    report.write_markdown(run, tmp_path / "benchmarks.md", next(tmp_path.glob("*-quick.json")))
    again = (tmp_path / "benchmarks.md").read_text()
    assert again.startswith("intro by hand\n") and again.endswith("\nanalysis by hand\n")
    assert again.count("<!-- BEGIN GENERATED") == 1


def test_postgres_and_s3_with_the_peers(tmp_path):
    """PostgreSQL + moto: the broker, pyiceberg's SqlCatalog on PostgreSQL with its warehouse
    in the bucket, and delta-rs on the same bucket."""
    run = run_bench(tmp_path, "--backends", "postgres", "--cases", "3,7")
    check_figures(run, {3, 7})
    peers = next(r for r in run["results"] if r["case"] == 3)
    assert {"txn-broker", "pyiceberg", "delta-rs"} <= set(peers["series"]["small_latency_ms"])
    # case 7's baseline: PostgreSQL's own scaling for one broker commit's database work
    producers = next(r for r in run["results"] if r["case"] == 7)
    assert any(f["name"].endswith("broker / PostgreSQL's own") and f["target"] for f in producers["figures"])
    shape = json.loads(producers["series"]["postgres_baseline"]["shape"])
    assert shape["transactions"] >= 1 and shape["statements"]["insert"] >= 1
    assert any("pg_stat_statements" in note for note in producers["notes"])


def test_the_spark_stage_adapter_fits_the_stage_module(tmp_path):
    """Every argument bench/spark_stage.py's run() requires is one the harness provides,
    and its documented result becomes a ratio figure against the target."""
    stage = pytest.importorskip("bench.spark_stage")
    from bench.case_spark import TARGET, _arguments, _figures
    from bench.harness import CaseResult
    from bench.servers import Backend
    from bench.sizes import Sizes

    backend = Backend("sqlite", tmp_path, f"sqlite:///{tmp_path}/b.db", (tmp_path / "segments").as_uri())
    args = _arguments(stage.run, backend, Sizes.quick(), print)
    assert args["rows"] == Sizes.quick().spark_rows and args["database_url"] == backend.database_url
    result = CaseResult(8, "spark", "sqlite")
    _figures(result, {"seconds": {"parquet": [1.0, 1.0, 1.0], "txn_topic": [2.0, 2.0, 1.0]}, "ratio": 0.5,
                      "sizes": "10 rows", "notes": ["a note"]})
    (figure,) = result.figures  # the median of per-repetition parquet / txn_topic seconds
    assert figure.value == pytest.approx(0.5) and figure.spread == (0.5, 1.0)
    assert figure.target == TARGET and figure.met is False
    assert result.notes == ["a note"] and result.sizes.startswith("10 rows")
    # with the breakdown's CPU ratio, a second figure without a target
    result = CaseResult(8, "spark", "sqlite")
    _figures(result, {"seconds": {"parquet": [1.0], "txn_topic": [2.0]}, "breakdown": {"cpu_ratio": 0.8}})
    ratio, cpu = result.figures
    assert ratio.target == TARGET and cpu.target is None and cpu.value == pytest.approx(0.8) and cpu.unit == "×"


def test_the_kafka_protocol_case(tmp_path):
    """Case 9: confluent-kafka through a real `txn-broker serve` against the Python API."""
    run = run_bench(tmp_path, "--backends", "sqlite", "--cases", "9")
    check_figures(run, {9})
    names = {f["name"] for r in run["results"] for f in r["figures"]}
    assert {"idempotent produce, Kafka client / Python API", "read_committed consume, Kafka client / Python API",
            "commit p99 through the protocol (10 records)",
            "idempotent produce: client ceiling (2 cores, listener free)",
            "read_committed consume: 2-core ceiling at these CPU costs",
            "transactional produce: Kafka client / its 2-core ceiling",
            "read_committed consume: listener CPU per MB / Kafka client's",
            "2 transactional producers, aggregate commits/s, Kafka client / Python API"} <= names
