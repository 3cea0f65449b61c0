"""``make bench`` / ``python -m bench``: run the benchmark cases of issue 9 on the embedded
default (SQLite + local directory) and on PostgreSQL + S3 (moto), then write
``bench/results/<date>.json`` and, for a full run, ``docs/benchmarks.md`` with its plots.

    python -m bench                       # full run (about 15 minutes on 2 cores)
    python -m bench --quick               # smaller sizes (a few minutes)
    python -m bench --cases 1,4 --backends postgres --commit-samples 500
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
import traceback
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from .cases import CASES
from .harness import CaseResult, Progress
from .servers import AWS_ENV, BACKENDS, ROOT, started
from .sizes import Sizes

RESULTS_DIR = ROOT / "bench" / "results"
DOC = ROOT / "docs" / "benchmarks.md"


def _numbers(text: str, known: Any, what: str) -> list[Any]:
    items = [t.strip() for t in text.split(",") if t.strip()]
    out = []
    for item in items:
        value = int(item) if item.isdigit() else item
        if value not in known:
            raise SystemExit(f"unknown {what} {item!r}; known: {', '.join(map(str, known))}")
        out.append(value)
    return out


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="the quick preset of sizes")
    parser.add_argument("--cases", default=",".join(map(str, CASES)),
                        help="comma-separated case numbers (default: all)")
    parser.add_argument("--backends", default=",".join(BACKENDS), help="sqlite,postgres (default: both)")
    parser.add_argument("--out", type=Path, default=RESULTS_DIR, help="directory for the JSON results")
    parser.add_argument("--doc", type=Path, default=None,
                        help="markdown report to update (default: docs/benchmarks.md for a full run of every "
                             "case on both backends, none otherwise)")
    parser.add_argument("--no-doc", action="store_true", help="do not update any markdown report")
    parser.add_argument("--pg-durability", choices=("durable", "fast"), default="durable",
                        help="PostgreSQL with its durable defaults (default), or fsync, synchronous_commit and "
                             "full_page_writes off as in the test suite")
    parser.add_argument("--workdir", type=Path, default=None, help="where servers and data live (default: /tmp)")
    parser.add_argument("--json", action="store_true", help="print the results as JSON instead of a table")
    parser.add_argument("--fail-on-miss", action="store_true", help="exit 3 when a target is missed")
    Sizes.add_arguments(parser)
    args = parser.parse_args(argv)
    args.case_numbers = _numbers(args.cases, CASES, "case")
    args.backend_names = _numbers(args.backends, BACKENDS, "backend")
    args.sizes = Sizes.from_arguments(args)
    return args


def run_cases(args: argparse.Namespace, progress: Progress) -> list[CaseResult]:
    results: list[CaseResult] = []
    if "postgres" in args.backend_names:
        # moto's test credentials, before anything starts a child process that keeps its
        # environment (Spark's JVM outlives its SparkSession and launches the Python workers)
        os.environ.update(AWS_ENV)
    for backend_name in args.backend_names:
        cases = [CASES[n] for n in args.case_numbers if backend_name in CASES[n].backends]
        if not cases:
            continue
        progress.prefix = f"{backend_name}: "
        progress("starting servers")
        with started(backend_name, args.workdir, pg_durable=args.pg_durability == "durable") as backend:
            for case in cases:
                progress.prefix = f"case {case.number} · {backend_name}: "
                progress(case.title)
                start = time.monotonic()
                try:
                    result = case.runner()(backend, args.sizes, progress)
                except Exception as error:  # one broken case must not hide the others' figures
                    traceback.print_exc()
                    result = CaseResult(case.number, case.title, backend_name, status="failed",
                                        notes=[f"failed: {type(error).__name__}: {error}"])
                result.seconds = time.monotonic() - start
                if backend_name not in case.target_backends:
                    for figure in result.figures:
                        figure.target = None
                    result.notes.append(f"The target applies on {' and '.join(case.target_backends)}; "
                                        "shown here for comparison.")
                progress(f"done in {result.seconds:.0f} s")
                results.append(result)
        progress.prefix = ""
    from .case_spark import stop_spark

    stop_spark()
    return results


def environment() -> dict[str, Any]:
    import deltalake
    import pyarrow
    import pyiceberg

    return {"python": platform.python_version(), "platform": platform.platform(), "cpus": os.cpu_count(),
            "load_average": os.getloadavg(), "pyarrow": pyarrow.__version__, "pyiceberg": pyiceberg.__version__,
            "deltalake": deltalake.__version__}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    progress = Progress(quiet=False)
    started_at = datetime.now(UTC)
    env_before = environment()
    results = run_cases(args, progress)
    finished = datetime.now(UTC)
    run = {
        "started": started_at.isoformat(timespec="seconds"), "finished": finished.isoformat(timespec="seconds"),
        "duration_s": round((finished - started_at).total_seconds(), 1), "mode": "quick" if args.quick else "full",
        "command": " ".join(["python -m bench", *(argv if argv is not None else sys.argv[1:])]),
        "sizes": vars(args.sizes), "postgres_durability": args.pg_durability, "environment": env_before,
        "load_average_after": os.getloadavg(),
        "results": [r.to_json() for r in results],
    }
    args.out.mkdir(parents=True, exist_ok=True)
    stamp = started_at.strftime("%Y-%m-%dT%H%M%S") + ("-quick" if args.quick else "")
    path = args.out / f"{stamp}.json"
    path.write_text(json.dumps(run, indent=2, default=str) + "\n")
    from . import report

    doc = args.doc
    complete = set(args.case_numbers) == set(CASES) and set(args.backend_names) == set(BACKENDS)
    if doc is None and not args.no_doc and not args.quick and complete:
        doc = DOC
    if doc is not None and not args.no_doc:
        report.write_markdown(run, doc, results_path=path)
        progress(f"report: {doc}")
    if args.json:
        print(json.dumps(run, indent=2, default=str))
    else:
        print(report.summary_table(run))
        print(f"\nresults: {path} ({run['duration_s']:.0f} s)")
    if any(r.status == "failed" for r in results):
        return 1
    if args.fail_on_miss and any(f.met is False for r in results for f in r.figures):
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
