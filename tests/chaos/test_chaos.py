"""Randomized histories under faults, checked by a program (docs/semantics.md, "How correctness is checked").

* The short version runs with ``make test``: three seeds, about three minutes.
* The long version is marked ``chaos`` (``make chaos``): ``CHAOS_SEEDS`` seeds (default
  10, alternating backends, each ``CHAOS_DURATION`` seconds of faults, default 75), about
  twenty minutes. ``CHAOS_SEED_BASE`` picks other seeds; ``CHAOS_OUT`` keeps every run's
  histories and report there; ``CHAOS_SUMMARY`` appends one JSON line per run.

A run passes only with zero anomalies of every class, and only if faults really happened.
"""

from __future__ import annotations

import json
import os

import pytest
from chaos.conftest import chaos_out
from chaos.runner import ALL_NEMESES, ChaosConfig, ChaosRun

SHORT = [
    pytest.param("sqlite", 1, ("kill", "commit-kill", "pause", "compact"), 15, id="sqlite-seed1"),
    pytest.param("postgres", 2, ALL_NEMESES, 25, id="postgres-seed2"),
    pytest.param("postgres", 3, ALL_NEMESES, 25, id="postgres-seed3"),
]


def long_seeds() -> list[int]:
    base = int(os.environ.get("CHAOS_SEED_BASE", "1000"))
    return list(range(base, base + int(os.environ.get("CHAOS_SEEDS", "10"))))


def execute(make_backend, tmp_path, request, kind: str, seed: int, nemeses, duration: float):
    backend = make_backend(kind)
    pg = request.getfixturevalue("chaos_pg") if kind == "postgres" else None
    s3 = request.getfixturevalue("s3_server") if kind == "postgres" else None
    config = ChaosConfig(seed=seed, duration_s=duration, nemeses=tuple(nemeses))
    result = ChaosRun(config, backend, chaos_out(tmp_path, f"{kind}-seed{seed}"), pg=pg, s3=s3).execute()
    summary = result.summary()
    if os.environ.get("CHAOS_SUMMARY"):
        with open(os.environ["CHAOS_SUMMARY"], "a") as f:
            f.write(json.dumps(summary, default=str) + "\n")
    print(json.dumps({k: v for k, v in summary.items() if k != "examples"}, default=str))
    assert result.report.ok, f"anomalies found; history in {result.out_dir}: " + json.dumps(
        result.report.to_json(), default=str)[:4000]
    # the run proved something: faults happened, clients died, work got done
    assert result.exits["killed"] > 0, summary
    crashes = {k: n for k, n in result.exits.items() if k.startswith("exit")}
    assert not crashes, f"clients crashed (untyped or unexpected errors); see {result.out_dir}/client-*.log"
    ops = result.report.stats["operations"]
    # (lenient: on a loaded two-core machine one client may be killed before its first write)
    assert ops.get("txn:ok", 0) + ops.get("send:ok", 0) >= 10, ops
    assert ops.get("txn:fail", 0) + ops.get("txn:unknown", 0) > 0, ops  # not every transaction just committed
    assert result.report.stats["fsck_problems"] == [], "fsck found inconsistencies after the run"
    assert result.report.stats["records_polled"] > 0
    for kind in nemeses:  # every nemesis of the run struck at least once
        if kind != "commit-kill":
            assert any(k.startswith(kind) for k in result.faults), (kind, result.faults)
    return result


@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.parametrize(("kind", "seed", "nemeses", "duration"), SHORT)
def test_chaos_short(kind, seed, nemeses, duration, make_backend, tmp_path, request):
    execute(make_backend, tmp_path, request, kind, seed, nemeses, duration)


@pytest.mark.chaos
@pytest.mark.parametrize("seed", long_seeds())
def test_chaos_long(seed, make_backend, tmp_path, request):
    kind = "postgres" if seed % 2 else "sqlite"
    nemeses = ALL_NEMESES if kind == "postgres" else ("kill", "commit-kill", "pause", "compact")
    execute(make_backend, tmp_path, request, kind, seed, nemeses, float(os.environ.get("CHAOS_DURATION", "75")))
