"""Test and demo data for the example pipeline, deterministic for a seed.

* ``orders(n, seed)``: ``orders_raw`` rows, with duplicates (the same order sent again)
  and dirty rows (null ids, non-positive amounts, bad country or currency codes), and
  ``expected_clean(rows)``: the rows ``clean_orders`` must keep.
* ``transfers(n, seed, partitions)``: ``transfers`` rows, two legs per transfer (a debit
  and a credit of the same amount) on accounts that hash to different partitions.
* ``produce_orders`` / ``produce_transfers``: write them with a transactional producer
  (each transfer's two legs always in the same transaction).

    python spark_apps/datagen.py orders --count 10000 --seed 1
    python spark_apps/datagen.py transfers --count 5000 --seed 1

uses the broker of the ``TXN_BROKER_*`` environment and creates the topics if needed.
"""

from __future__ import annotations

import argparse
import datetime
import random
from decimal import Decimal
from typing import Any

try:
    from spark_apps.pipeline import CURRENCIES, TOPICS, ensure_topics
except ImportError:  # run as a file
    from pipeline import CURRENCIES, TOPICS, ensure_topics  # type: ignore[no-redef]

COUNTRIES = ("DE", "FR", "NL", "SE", "GB", "US", "CH", "ES")
START = datetime.datetime(2024, 3, 1, tzinfo=datetime.UTC)


def orders(n: int, seed: int = 1, *, duplicate_rate: float = 0.1, dirty_rate: float = 0.08,
           start: datetime.datetime = START, days: int = 3) -> list[dict[str, Any]]:
    """``n`` distinct orders plus duplicates and dirty rows, shuffled."""
    rng = random.Random(seed)
    rows: list[dict[str, Any]] = []
    for i in range(n):
        ts = start + datetime.timedelta(milliseconds=rng.randrange(days * 86_400_000))
        rows.append({
            "order_id": f"o-{seed}-{i:07d}",
            "customer_id": f"c-{rng.randrange(max(n // 5, 1)):06d}",
            "country": rng.choice(COUNTRIES) if rng.random() > 0.1 else f" {rng.choice(COUNTRIES).lower()} ",
            "amount": Decimal(rng.randrange(100, 50_000)) / 100,
            "currency": rng.choice((*CURRENCIES, None)),
            "ts": ts,
        })
    dupes = [dict(rng.choice(rows)) for _ in range(int(n * duplicate_rate))]
    for d in dupes:  # a resend arrives later
        d["ts"] = d["ts"] + datetime.timedelta(seconds=rng.randrange(1, 600))
    dirty = []
    for k in range(int(n * dirty_rate)):
        bad = dict(rng.choice(rows), order_id=f"bad-{seed}-{k:06d}")
        flaw = k % 6
        if flaw == 0:
            bad["order_id"] = None
        elif flaw == 1:
            bad["customer_id"] = None
        elif flaw == 2:
            bad["amount"] = Decimal("-" + str(bad["amount"]))
        elif flaw == 3:
            bad["country"] = "Germany"
        elif flaw == 4:
            bad["currency"] = "XXX"
        else:
            bad["amount"] = None
        dirty.append(bad)
    out = rows + dupes + dirty
    rng.shuffle(out)
    return out


def expected_clean(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """order_id -> the cleaned row ``clean_orders`` keeps (the earliest of duplicates)."""
    keep: dict[str, dict[str, Any]] = {}
    for r in rows:
        country = (r["country"] or "").strip().upper()
        currency = (r["currency"] or "EUR").strip().upper()
        if (r["order_id"] is None or r["customer_id"] is None or r["ts"] is None or r["amount"] is None
                or r["amount"] <= 0 or len(country) != 2 or not country.isalpha() or not country.isascii()
                or currency not in CURRENCIES):
            continue
        clean = {**r, "country": country, "currency": currency}
        seen = keep.get(r["order_id"])
        if seen is None or clean["ts"] < seen["ts"]:
            keep[r["order_id"]] = clean
    return keep


def _partition(account: str, partitions: int) -> int:
    """The partition the broker puts ``account`` in (its key partitioner, never a copy)."""
    import pyarrow as pa

    from txn_broker import key_partitions

    return int(key_partitions(pa.array([account], pa.string()), partitions)[0])


def transfers(n: int, seed: int = 1, *, partitions: int = 4, accounts: int = 50,
              start: datetime.datetime = START) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """``n`` transfers as (debit, credit) pairs on accounts in different partitions."""
    rng = random.Random(seed)
    names = [f"acct-{i:04d}" for i in range(accounts)]
    out = []
    for i in range(n):
        src = rng.choice(names)
        dst = rng.choice([a for a in names if _partition(a, partitions) != _partition(src, partitions)])
        cents = rng.randrange(1, 1_000_000)
        ts = start + datetime.timedelta(seconds=i)
        tid = f"t-{seed}-{i:07d}"
        currency = rng.choice(CURRENCIES)
        out.append(({"transfer_id": tid, "account": src, "amount": -cents, "currency": currency, "ts": ts},
                    {"transfer_id": tid, "account": dst, "amount": cents, "currency": currency, "ts": ts}))
    return out


def produce_orders(broker: Any, rows: list[dict[str, Any]], *, transactional_id: str = "datagen.orders",
                   batch: int = 5_000) -> None:
    """Write ``rows`` to ``orders_raw``, ``batch`` rows per transaction."""
    ensure_topics(broker, ["orders_raw"])
    producer = broker.producer(transactional_id=transactional_id)
    producer.init_transactions()
    try:
        for i in range(0, len(rows), batch):
            with producer.transaction():
                producer.send("orders_raw", rows[i:i + batch], key=TOPICS["orders_raw"][2])
    finally:
        producer.close()


def produce_transfers(broker: Any, pairs: list[tuple[dict[str, Any], dict[str, Any]]], *,
                      transactional_id: str = "datagen.transfers", per_transaction: int = 100) -> None:
    """Write transfers, ``per_transaction`` whole transfers (both legs) per transaction."""
    ensure_topics(broker, ["transfers"])
    producer = broker.producer(transactional_id=transactional_id)
    producer.init_transactions()
    try:
        for i in range(0, len(pairs), per_transaction):
            with producer.transaction():
                legs = [leg for pair in pairs[i:i + per_transaction] for leg in pair]
                producer.send("transfers", legs, key="account")
    finally:
        producer.close()


def main(argv: list[str] | None = None) -> None:
    import txn_broker

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("what", choices=("orders", "transfers"))
    parser.add_argument("--count", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    with txn_broker.connect() as broker:
        if args.what == "orders":
            rows = orders(args.count, args.seed)
            produce_orders(broker, rows)
            print(f"orders_raw: {len(rows)} rows written ({len(expected_clean(rows))} clean orders)")
        else:
            pairs = transfers(args.count, args.seed, partitions=TOPICS["transfers"][1])
            produce_transfers(broker, pairs)
            print(f"transfers: {len(pairs)} transfers ({2 * len(pairs)} legs) written")


if __name__ == "__main__":
    main()
