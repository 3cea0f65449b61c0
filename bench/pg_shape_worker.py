"""One client of case 7's PostgreSQL baseline, in its own process. Run by the benchmark as

    python -m bench.pg_shape_worker DATABASE_URL WORKER DURATION_S SHAPE_JSON

It speaks the same stdin/stdout protocol as ``bench.producer_worker`` (``ready``, a start
time, one JSON line) and repeats one broker commit's database work (``bench.pg_shape``)
against its own rows of the scratch tables, through the same driver as the broker."""

from __future__ import annotations

import json
import sys
import time

import sqlalchemy as sa

from .pg_shape import STATEMENTS, Shape, plan
from .producer_worker import timed_window


def main(argv: list[str]) -> int:
    url, worker, duration, shape = argv[0], int(argv[1]), float(argv[2]), Shape.from_json(argv[3])
    work = plan(shape)
    statements = {kind: sa.text(sql) for kind, sql in STATEMENTS.items()}
    engine = sa.create_engine(url, pool_size=1)

    def one_commit(conn: sa.Connection) -> None:
        for txn in work:
            with conn.begin():
                for kind, rows in txn:
                    conn.execute(statements[kind], {"w": worker, "rows": rows, "now": int(time.time() * 1000)})

    with engine.connect() as conn:
        one_commit(conn)
        result = timed_window(lambda: one_commit(conn), duration)
    engine.dispose()
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
