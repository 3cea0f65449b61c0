"""The bank workload of the Iceberg tests: each transfer is one transaction moving an
amount from an account in partition 0 to one in partition 1 of the topic ``bank``, so
every set of whole transactions sums to zero, and a snapshot holding part of a transfer
does not. Aborted transfers carry the account ``aborted``. Also run as a script (a
producer process: ``python _bank.py N SEED``)."""

from __future__ import annotations

import os
import random
import sys
import time
from collections import Counter

import pyarrow as pa

SCHEMA = pa.schema([("account", pa.string()), ("amount", pa.int64())])
TOPIC = "bank"


def create(broker, **config):
    return broker.create_topic(TOPIC, partitions=2, schema=SCHEMA,
                               config={"iceberg.enabled": "true", **config})


def open_bank(backend, **config):
    """A broker of ``backend`` with the bank topic created (``config``: more topic configs)
    and the transactional producer ``bank`` initialised: ``(broker, bank)``."""
    broker = backend.connect()
    create(broker, **config)
    bank = broker.producer(transactional_id="bank")
    bank.init_transactions()
    return broker, bank


def transfer(producer, amount: int, *, abort: bool = False) -> None:
    producer.begin_transaction()
    account = "aborted" if abort else "acct"
    producer.send(TOPIC, pa.table({"account": [account], "amount": [-amount]}, schema=SCHEMA), partition=0)
    producer.send(TOPIC, pa.table({"account": [account], "amount": [amount]}, schema=SCHEMA), partition=1)
    if abort:
        producer.flush()  # the records are in segments; the abort must keep them out
        producer.abort_transaction()
    else:
        producer.commit_transaction()


def check_snapshot(rows: pa.Table) -> None:
    """A snapshot's rows: whole transfers only, none aborted, none twice."""
    amounts = rows.column("amount").to_pylist()
    assert sum(amounts) == 0, f"a snapshot holds part of a transfer: sum {sum(amounts)}"
    assert "aborted" not in rows.column("account").to_pylist()
    places = Counter(zip(rows.column("_partition").to_pylist(), rows.column("_offset").to_pylist(), strict=True))
    assert not [p for p, n in places.items() if n > 1], "a record is in the table twice"


def check_history(table) -> int:
    """Every snapshot of the table's history, read with pyiceberg; returns how many."""
    snapshots = table.snapshots()
    for snapshot in snapshots:
        check_snapshot(table.scan(snapshot_id=snapshot.snapshot_id).to_arrow())
    return len(snapshots)


def committed_rows(broker) -> list[tuple[int, int, str, int]]:
    """A read_committed read of the whole topic: (partition, offset, account, amount)."""
    consumer = broker.consumer(isolation_level="read_committed")
    consumer.subscribe([TOPIC])
    rows = []
    while (batch := consumer.poll(max_records=10_000)).num_rows:
        rows += [(r["_partition"], r["_offset"], r["account"], r["amount"]) for r in batch.to_pylist()]
    consumer.close()
    return sorted(rows)


def table_rows(table) -> list[tuple[int, int, str, int]]:
    t = table.scan().to_arrow()
    return sorted(zip(t.column("_partition").to_pylist(), t.column("_offset").to_pylist(),
                      t.column("account").to_pylist(), t.column("amount").to_pylist(), strict=True))


def polars_storage_options(table) -> dict[str, str] | None:
    """What polars' own S3 client needs that the table does not say: the endpoint of the
    test's S3 server (credentials come from the AWS variables, as for pyarrow)."""
    endpoint = table.io.properties.get("s3.endpoint")
    if endpoint is None:
        return None
    return {"aws_endpoint_url": endpoint, "aws_region": table.io.properties.get("s3.region", "us-east-1"),
            "aws_allow_http": "true"}


def main(count: int, seed: int) -> None:
    import txn_broker

    rng = random.Random(seed)
    broker = txn_broker.connect(os.environ["TXN_BROKER_DATABASE_URL"], os.environ["TXN_BROKER_STORAGE_URL"])
    from txn_broker.errors import TxnBrokerError

    producer = broker.producer(transactional_id=f"bank-{seed}")
    producer.init_transactions()
    for _ in range(count):
        amount, abort = rng.randint(1, 100), rng.random() < 0.2
        try:
            transfer(producer, amount, abort=abort)
        except TxnBrokerError as error:  # the database restarting (the postgres fault test)
            if not error.retriable:
                raise
            print(f"transfer failed, starting over: {error}", file=sys.stderr)
            while True:  # a new session aborts whatever the failed one left open
                time.sleep(0.5)
                try:
                    producer = broker.producer(transactional_id=f"bank-{seed}")
                    producer.init_transactions()
                    break
                except TxnBrokerError as again:
                    if not again.retriable:
                        raise
    broker.close()


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]))
