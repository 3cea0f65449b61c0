"""aiokafka (a pure-Python Kafka client no one here wrote) against `txn-broker serve`, on
both backends: a transactional producer with offsets, abort, read_committed, fencing.

The client runs in its own process: on CPython 3.11.7 something in aiokafka's compiled
modules leaves the interpreter's recursion counter off, after which ``ast.parse`` (pytest's
assertion rewriting) fails with "AST constructor recursion depth mismatch"."""

from __future__ import annotations

import asyncio
import subprocess
import sys

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import InvalidProducerEpoch, ProducerFenced

from txn_broker import TopicPartition as TP

pytestmark = [pytest.mark.integration, pytest.mark.slow]


async def _read(consumer: AIOKafkaConsumer, expected: int, timeout: float = 15.0) -> list:
    got: list = []
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while len(got) < expected and loop.time() < deadline:
        batch = await consumer.getmany(timeout_ms=300)
        for messages in batch.values():
            got.extend(messages)
    await asyncio.sleep(0.5)  # nothing more may come
    for messages in (await consumer.getmany(timeout_ms=300)).values():
        got.extend(messages)
    return got


async def _scenario(bootstrap: str) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    await admin.create_topics([NewTopic("a-in", 1, 1), NewTopic("a-out", 1, 1)])
    await admin.close()

    plain = AIOKafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=True)
    await plain.start()
    for i in range(10):
        await plain.send_and_wait("a-in", b"in-%d" % i, partition=0)
    await plain.stop()

    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id="aio-copier")
    await producer.start()
    async with producer.transaction():
        for i in range(10):
            await producer.send("a-out", b"copied-%d" % i, partition=0)
        await producer.send_offsets_to_transaction({TopicPartition("a-in", 0): 10}, "aio-group")
    await producer.begin_transaction()
    await producer.send_and_wait("a-out", b"aborted", partition=0)
    await producer.abort_transaction()

    # a second instance with the same transactional id fences the first
    successor = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id="aio-copier")
    await successor.start()
    with pytest.raises((ProducerFenced, InvalidProducerEpoch)):
        async with producer.transaction():
            await producer.send_and_wait("a-out", b"zombie", partition=0)
    async with successor.transaction():
        await successor.send_and_wait("a-out", b"successor", partition=0)
    await successor.stop()
    await producer.stop()

    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, isolation_level="read_committed",
                                auto_offset_reset="earliest", enable_auto_commit=False)
    await consumer.start()
    consumer.assign([TopicPartition("a-out", 0)])
    values = [m.value for m in await _read(consumer, 11)]
    await consumer.stop()
    assert values == [b"copied-%d" % i for i in range(10)] + [b"successor"]


def test_aiokafka_transactions(kafka, backend):
    run = subprocess.run([sys.executable, __file__, kafka.bootstrap], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "scenario passed" in run.stdout
    broker = backend.connect()
    assert broker.committed_offsets("aio-group", [TP("a-in", 0)]) == {TP("a-in", 0): 10}
    broker.close()


if __name__ == "__main__":
    asyncio.run(_scenario(sys.argv[1]))
    print("scenario passed")
