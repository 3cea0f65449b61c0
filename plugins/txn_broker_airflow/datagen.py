"""Small, realistic input data for the example pipelines (``dags/orders_pipeline.py`` and
``dags/bank_transfers.py``), deterministic for a given seed.

* :func:`write_orders_csv`: an order export as a shop's backend would drop it: mostly good
  rows, plus the trouble real exports have: the same order sent twice (verbatim, or again
  later with a newer timestamp), rows with a missing customer, amount or timestamp,
  negative or zero amounts, country codes in lower case or padded with spaces (fixable),
  country names instead of codes and unknown currencies (not fixable). Columns are those
  of the ``orders_raw`` topic (``spark_apps/pipeline.py``). It returns what a correct
  cleaning stage must produce, computed here independently of Spark, so tests and the
  demo can check the pipeline's output exactly.
* :func:`transfer_requests`: payment orders between accounts, some of which the bank will
  reject (the credit account is closed): the ``bank_transfers`` DAG executes each as one
  transaction across two partitions, and aborts the rejected ones.

    python -m txn_broker_airflow.datagen orders out.csv --rows 2000 --seed 7
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import hashlib
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa

#: country -> (currency, relative weight)
COUNTRIES = {"DE": ("EUR", 30), "FR": ("EUR", 20), "US": ("USD", 25), "GB": ("GBP", 12),
             "CH": ("CHF", 5), "SE": ("SEK", 8)}
CURRENCIES = ("EUR", "USD", "GBP", "CHF", "SEK")
ORDER_COLUMNS = ("order_id", "customer_id", "country", "amount", "currency", "ts")
TRANSFER_REQUESTS = pa.schema([
    pa.field("transfer_id", pa.string(), nullable=False), pa.field("debit_account", pa.string(), nullable=False),
    pa.field("credit_account", pa.string(), nullable=False), pa.field("amount", pa.int64(), nullable=False),
    pa.field("currency", pa.string(), nullable=False), pa.field("credit_account_closed", pa.bool_(), nullable=False),
])


def _rng(seed: object) -> random.Random:
    """A generator seeded from any value (a DAG run id, an int), stable across processes."""
    return random.Random(int(hashlib.sha256(str(seed).encode()).hexdigest()[:16], 16))


@dataclass
class OrdersExpectation:
    """What cleaning the generated file must give: one row per distinct valid order id,
    the earliest of its valid versions."""

    rows_written: int = 0
    duplicates: int = 0
    dirty: int = 0
    #: order_id -> (country, currency, amount, ts) of the order that must survive cleaning
    clean: dict[str, tuple[str, str, Decimal, dt.datetime]] = field(default_factory=dict)

    def revenue(self) -> dict[tuple[str, str, str], Decimal]:
        """(UTC day ISO, country, currency) -> revenue of the clean orders."""
        out: dict[tuple[str, str, str], Decimal] = {}
        for country, currency, amount, ts in self.clean.values():
            key = (ts.date().isoformat(), country, currency)
            out[key] = out.get(key, Decimal("0")) + amount
        return out

    def as_dict(self) -> dict[str, Any]:
        """JSON-able: counts and the expected totals."""
        return {"rows_written": self.rows_written, "duplicates": self.duplicates, "dirty": self.dirty,
                "clean_orders": len(self.clean),
                "clean_revenue": str(sum((v[2] for v in self.clean.values()), Decimal("0")))}


def _valid(row: dict[str, str]) -> tuple[str, str, Decimal, dt.datetime] | None:
    """The cleaning rule of ``spark_apps/clean_orders.py``, restated in plain Python."""
    if not row["order_id"] or not row["customer_id"] or not row["amount"] or not row["ts"]:
        return None
    amount = Decimal(row["amount"])
    country = row["country"].strip().upper()
    currency = (row["currency"].strip().upper() or "EUR")
    if amount <= 0 or len(country) != 2 or not country.isalpha() or not country.isascii() \
            or currency not in CURRENCIES:
        return None
    return country, currency, amount, dt.datetime.fromisoformat(row["ts"].replace("Z", "+00:00"))


def _order(rng: random.Random, order_id: str, day: dt.date) -> dict[str, str]:
    countries = list(COUNTRIES)
    country = rng.choices(countries, weights=[COUNTRIES[c][1] for c in countries])[0]
    amount = Decimal(str(round(min(rng.lognormvariate(3.6, 0.9), 9_999.0), 2))).quantize(Decimal("0.01"))
    ts = dt.datetime.combine(day, dt.time(), dt.UTC) + dt.timedelta(seconds=rng.randrange(86_400),
                                                                    milliseconds=rng.randrange(1000))
    return {"order_id": order_id, "customer_id": f"C{rng.randrange(1, 5000):05d}", "country": country,
            "amount": str(max(amount, Decimal("0.50"))), "currency": COUNTRIES[country][0],
            "ts": ts.isoformat(timespec="milliseconds").replace("+00:00", "Z")}


def _dirty(rng: random.Random, row: dict[str, str]) -> dict[str, str]:
    row = dict(row)
    kind = rng.randrange(8)
    if kind == 0:
        row["customer_id"] = ""
    elif kind == 1:
        row["amount"] = ""
    elif kind == 2:
        row["amount"] = str(-Decimal(row["amount"]))
    elif kind == 3:
        row["amount"] = "0.00"
    elif kind == 4:
        row["ts"] = ""
    elif kind == 5:
        row["country"] = {"DE": "Germany", "FR": "France", "US": "USA"}.get(row["country"], "N/A")
    elif kind == 6:
        row["currency"] = "XYZ"
    else:  # fixable: cleaning upper-cases and trims
        row["country"] = f" {row['country'].lower()} "
    return row


def write_orders_csv(path: str | Path, rows: int = 1000, seed: object = 0, day: dt.date | str | None = None,
                     days: int = 3, dirty_rate: float = 0.06, duplicate_rate: float = 0.05,
                     id_prefix: str | None = None) -> OrdersExpectation:
    """Write about ``rows`` orders over ``days`` UTC days ending ``day`` (default: today)
    into a CSV at ``path``; order ids are ``{id_prefix}-{n}`` (default prefix: from the seed,
    so files of different seeds never share an order id). Returns the expectation."""
    rng = _rng(seed)
    if isinstance(day, str):
        day = dt.date.fromisoformat(day[:10])
    last = day or dt.datetime.now(dt.UTC).date()
    prefix = id_prefix or "O" + hashlib.sha256(str(seed).encode()).hexdigest()[:8]
    expect = OrdersExpectation()
    out: list[dict[str, str]] = []
    for n in range(rows):
        row = _order(rng, f"{prefix}-{n:06d}", last - dt.timedelta(days=rng.randrange(days)))
        if rng.random() < dirty_rate:
            row = _dirty(rng, row)
            expect.dirty += 1
        out.append(row)
        if rng.random() < duplicate_rate:  # sent again: verbatim, or later with a newer timestamp
            again = dict(row)
            if again["ts"] and rng.random() < 0.5:
                ts = dt.datetime.fromisoformat(again["ts"].replace("Z", "+00:00")) + dt.timedelta(minutes=5)
                again["ts"] = ts.isoformat(timespec="milliseconds").replace("+00:00", "Z")
            out.insert(rng.randrange(len(out) + 1), again)
            expect.duplicates += 1
    for row in out:
        valid = _valid(row)
        if valid is None:
            continue
        kept = expect.clean.get(row["order_id"])
        if kept is None or valid[3] < kept[3]:
            expect.clean[row["order_id"]] = valid
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".partial")
    with tmp.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=ORDER_COLUMNS)
        writer.writeheader()
        writer.writerows(out)
    tmp.replace(path)  # a reader never sees a half-written file
    expect.rows_written = len(out)
    return expect


def accounts_by_partition(accounts: Sequence[str], partitions: int) -> dict[int, list[str]]:
    """The accounts of each partition of a topic keyed by account (the broker's key hash)."""
    from txn_broker import key_partitions

    parts = key_partitions(pa.array(list(accounts), pa.string()), partitions)
    out: dict[int, list[str]] = {}
    for account, p in zip(accounts, parts.tolist(), strict=True):
        out.setdefault(int(p), []).append(account)
    return out


def transfer_requests(count: int | str = 100, seed: object = 0, accounts: int = 40, partitions: int = 4,
                      reject_rate: float = 0.1, currency: str = "EUR") -> pa.Table:
    """``count`` transfer requests between ``accounts`` accounts, the debit and the credit
    account always in different partitions of a ``partitions``-partition topic keyed by
    account. ``reject_rate`` of them (rounded, at least one when the rate is positive) name
    a closed credit account. Amounts in cents. ``count`` may be a string (a rendered template)."""
    count = int(count)
    rng = _rng(seed)
    rejects = round(count * reject_rate) or (1 if reject_rate > 0 and count else 0)
    rejected = set(rng.sample(range(count), rejects))
    names = [f"ACC{n:04d}" for n in range(accounts)]
    by_partition = accounts_by_partition(names, partitions)
    if len(by_partition) < 2:
        raise ValueError("the accounts must spread over at least two partitions")
    token = hashlib.sha256(str(seed).encode()).hexdigest()[:8]
    rows = []
    for n in range(count):
        debit_p, credit_p = rng.sample(sorted(by_partition), 2)
        rows.append({
            "transfer_id": f"T{token}-{n:05d}",
            "debit_account": rng.choice(by_partition[debit_p]),
            "credit_account": rng.choice(by_partition[credit_p]),
            "amount": rng.randrange(100, 500_000),
            "currency": currency,
            "credit_account_closed": n in rejected,
        })
    return pa.Table.from_pylist(rows, schema=TRANSFER_REQUESTS)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Write an example orders CSV (see the module docstring).")
    parser.add_argument("kind", choices=["orders"])
    parser.add_argument("path")
    parser.add_argument("--rows", type=int, default=1000)
    parser.add_argument("--seed", default="0")
    parser.add_argument("--day", default=None, help="last UTC day of the orders (YYYY-MM-DD; default today)")
    args = parser.parse_args(argv)
    expect = write_orders_csv(args.path, rows=args.rows, seed=args.seed, day=args.day)
    print(expect.as_dict())


if __name__ == "__main__":
    main()
