"""A broker-only demo on the embedded default: create topics, produce idempotently and
transactionally (one transaction aborted), copy exactly once, consume, publish the clean
topic to its Iceberg table and read it with pyiceberg, print a summary.

    python -m txn_broker.demo
"""

from __future__ import annotations

import time

import pyarrow as pa

import txn_broker
from txn_broker import TopicPartition

ORDERS = pa.schema([("order_id", pa.string()), ("country", pa.string()), ("amount", pa.float64())])


def main() -> None:
    broker = txn_broker.connect()
    print(f"broker: {broker!r}")
    suffix = time.strftime("%Y%m%d%H%M%S")
    raw, clean = f"demo.orders.{suffix}", f"demo.orders_clean.{suffix}"
    broker.create_topic(raw, partitions=4, schema=ORDERS)
    broker.create_topic(clean, partitions=4, schema=ORDERS, config={"iceberg.enabled": "true"})

    started = time.perf_counter()
    producer = broker.producer()
    countries = ["DE", "FR", "US", "JP"]
    for batch in range(20):
        rows = [{"order_id": f"o{batch}-{i}", "country": countries[i % 4], "amount": float(i % 50)}
                for i in range(5000)]
        producer.send(raw, rows, key="order_id")
    producer.flush()
    produced = 20 * 5000
    produce_s = time.perf_counter() - started

    # a stage: read raw, keep orders >= 10, write clean and the offsets in one transaction
    stage = broker.producer(transactional_id=f"demo.clean.{suffix}")
    stage.init_transactions()
    stage.begin_transaction()
    stage.send(clean, [{"order_id": "poison", "country": "XX", "amount": -1.0}])
    stage.flush()
    stage.abort_transaction()  # an aborted attempt: never visible to read_committed readers

    consumer = broker.consumer(group_id="demo.clean")
    consumer.subscribe([raw])
    started = time.perf_counter()
    consumed = kept = 0
    stage.begin_transaction()
    while (table := consumer.poll(max_records=20_000)).num_rows:
        consumed += table.num_rows
        keep = table.filter(pa.compute.greater_equal(table["amount"], 10.0)).select(ORDERS.names)
        kept += keep.num_rows
        stage.send(clean, keep, key="order_id")
    offsets = {TopicPartition(raw, p): o for (_, p), o in
               broker.end_offsets(consumer.assignment()).items()}
    stage.send_offsets_to_transaction(offsets, "demo.clean")
    stage.commit_transaction()
    consume_s = time.perf_counter() - started

    reader = broker.consumer(isolation_level="read_committed")
    reader.subscribe([clean])
    visible = 0
    while (table := reader.poll(max_records=50_000)).num_rows:
        visible += table.num_rows
        assert "poison" not in table.column("order_id").to_pylist()

    print(f"produced {produced} records to {raw} in {produce_s:.2f}s "
          f"({produced / produce_s:,.0f} records/s)")
    print(f"stage consumed {consumed}, kept {kept}, committed in one transaction "
          f"({consumed / consume_s:,.0f} records/s)")
    print(f"read_committed readers of {clean} see {visible} records (the aborted attempt is invisible)")
    for p in broker.describe_topic(clean).partitions:
        print(f"  {clean}[{p.partition}] high watermark {p.high_watermark}, "
              f"last stable offset {p.last_stable_offset}, {p.segment_count} segments, {p.size_bytes} bytes")
    [published] = broker.publish_iceberg([clean])
    table = broker.iceberg_table(clean).scan().to_arrow()  # pyiceberg reads the table
    assert table.num_rows == visible and "poison" not in table.column("order_id").to_pylist()
    print(f"Iceberg table {published.table}: {table.num_rows} rows in {published.files} Parquet files, "
          f"read with pyiceberg; snapshot offsets {published.offsets}")
    group = broker.describe_group("demo.clean")
    print(f"group demo.clean: lag {group.lag}")
    states: dict[str, int] = {}
    for run in broker.recent_transactions(limit=1000):
        states[run["outcome"] or "OPEN"] = states.get(run["outcome"] or "OPEN", 0) + 1
    print(f"transactions: {states}")
    broker.close()


if __name__ == "__main__":
    main()
