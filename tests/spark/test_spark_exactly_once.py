"""Exactly once through Spark, on both backends and a real local SparkSession:

* task failure: tasks fail on their first attempt after uploading segments; Spark retries
  them; the output holds every input record exactly once;
* driver crash: the driver process (Python, JVM and Python workers) is killed after the
  executors uploaded their segments, before (or after) the driver registered them, and
  before the commit; a rerun with the same transactional id gives the output exactly once
  and the first run's segments are never visible;
* the stage helper: offsets commit with the output; a failed stage moves nothing; a
  fenced stage neither commits nor aborts.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pytest
from spark_helpers import consume_all, produce, registered_keys, stored_keys

from txn_broker import TopicPartition
from txn_broker.errors import ProducerFencedError
from txn_broker.spark import txn_stage

pytestmark = [pytest.mark.spark, pytest.mark.integration]

IN = pa.schema([("n", pa.int64()), ("label", pa.string())])
OUT = pa.schema([("n", pa.int64()), ("twice", pa.int64())])
HERE = Path(__file__).resolve().parent


def prepare(broker, topic_in: str, topic_out: str, count: int) -> None:  # type: ignore[no-untyped-def]
    broker.create_topic(topic_in, partitions=4, schema=IN)
    broker.create_topic(topic_out, partitions=3, schema=OUT)
    produce(broker, topic_in, [{"n": i, "label": f"r{i}"} for i in range(count)], key="label",
            flush_every=count // 3)


def output_ns(broker, topic: str) -> list[int]:  # type: ignore[no-untyped-def]
    return sorted(consume_all(broker, topic).column("n").to_pylist())


def test_failed_task_attempts_leave_the_output_exactly_once(spark, broker, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from pyspark.sql import functions as F

    prepare(broker, "tf_in", "tf_other", 1200)
    # a wide output, so the transform's output leaves the Python worker's 64 KiB write
    # buffer (and reaches the writer) long before the transform fails
    broker.create_topic("tf_out", partitions=3, schema=OUT.append(pa.field("pad", pa.string())))

    out_id = broker._topics.get("tf_out").topic_id
    storage_url, storage_options = broker._store.url, broker._store.options()

    def fail_first_attempt(batches):  # type: ignore[no-untyped-def]
        import time

        from pyspark import TaskContext

        from txn_broker.storage import open_store

        ctx = TaskContext.get()
        doomed = ctx.attemptNumber() == 0 and ctx.partitionId() in (0, 2)
        for i, batch in enumerate(batches):
            if doomed and i == 4:
                # fail only once the writer of this attempt uploaded some of its segments
                mine = f"-{ctx.partitionId()}-{ctx.taskAttemptId()}-"
                store, deadline = open_store(storage_url, **storage_options), time.monotonic() + 120
                while not any(mine in o.key for o in store.list(f"topics/{out_id}/")):
                    assert time.monotonic() < deadline, "the writer never uploaded"
                    time.sleep(0.05)
                raise RuntimeError("injected: first attempt of this task fails midway")
            yield from (batch.slice(0, batch.num_rows // 2), batch.slice(batch.num_rows // 2))

    # small Arrow batches between the transform and the writer, so that a failing attempt
    # has handed the writer some batches (and the writer uploaded segments) before it fails
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "40")
    try:
        with txn_stage(spark, broker, transactional_id="tf.stage", group_id="tf", inputs=["tf_in"]) as stage:
            df = stage.read().select("n", (F.col("n") * 2).alias("twice"), F.lit("x" * 1000).alias("pad"))
            stage.write(df.mapInArrow(fail_first_attempt, df.schema), topic="tf_out", key="n", segment_bytes=1)
    finally:
        spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")
    assert stage.summary.outcome == "committed"
    assert stage.summary.records_in == 1200 and stage.summary.records_out == 1200
    assert output_ns(broker, "tf_out") == list(range(1200))
    twice = consume_all(broker, "tf_out")
    assert twice.column("twice").to_pylist() == [2 * n for n in twice.column("n").to_pylist()]
    # the failed attempts did upload segments: never registered, left for gc
    assert len(stored_keys(broker, "tf_out") - registered_keys(broker, "tf_out")) > 0
    assert broker.describe_group("tf").lag == 0


def _kill_tree(pid: int) -> None:
    import psutil

    try:
        root = psutil.Process(pid)
    except psutil.NoSuchProcess:
        return
    procs = [root, *root.children(recursive=True)]
    for p in procs:
        try:
            p.send_signal(signal.SIGKILL)
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(procs, timeout=30)


# each crash point on one backend (a driver run costs half a minute): both points and both
# backends are covered, and the coordinator code they exercise is the same on either
@pytest.mark.parametrize(("backend", "point"), [("sqlite", "spark.before_register"),
                                                ("postgres", "spark.after_register")], indirect=["backend"])
def test_driver_crash_then_rerun_is_exactly_once(spark, broker, backend, tmp_path: Path, point: str) -> None:  # type: ignore[no-untyped-def]
    prepare(broker, "crash_in", "crash_out", 900)
    paused = tmp_path / "paused"
    env = {**os.environ, **backend.env, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable,
           "TXN_BROKER_FAULTS": f"{point}=pause:{paused}", "TXN_BROKER_HOME": str(tmp_path / "home")}
    log = (tmp_path / "driver.log").open("w")
    driver = subprocess.Popen([sys.executable, str(HERE / "crash_driver.py"), "crash.stage"], env=env,
                              stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 300
        while not paused.exists():
            assert driver.poll() is None, (tmp_path / "driver.log").read_text()[-4000:]
            assert time.monotonic() < deadline, "the driver never reached " + point
            time.sleep(0.2)
        uploaded = stored_keys(broker, "crash_out")
        assert uploaded, "the executors uploaded nothing before the driver's commit step"
        assert consume_all(broker, "crash_out").num_rows == 0
    finally:
        _kill_tree(driver.pid)
        driver.wait(60)
        log.close()
    assert "COMMITTED" not in (tmp_path / "driver.log").read_text()

    # after the crash: nothing of the first run is visible, registered or not
    registered = registered_keys(broker, "crash_out") & uploaded
    assert registered == (uploaded if point == "spark.after_register" else set())
    assert consume_all(broker, "crash_out").num_rows == 0
    assert broker.describe_transaction("crash.stage").state == "Ongoing"

    with txn_stage(spark, broker, transactional_id="crash.stage", group_id="crash", inputs=["crash_in"]) as stage:
        sys.path.insert(0, str(HERE))
        try:
            from crash_driver import stage_function
        finally:
            sys.path.remove(str(HERE))
        stage_function(spark, stage)
    assert stage.summary.outcome == "committed"
    assert output_ns(broker, "crash_out") == list(range(900))
    visible = set(consume_all(broker, "crash_out").column("_offset").to_pylist())
    assert visible  # and none of the first run's records:
    txn = broker.describe_transaction("crash.stage")
    outcomes = [t["outcome"] for t in txn.transactions]
    assert outcomes[:2] == ["COMMIT", "ABORT"]  # the rerun's init aborted the crashed run's transaction
    if point == "spark.after_register":
        first_run = sum(p.high_watermark for p in broker.describe_topic("crash_out").partitions)
        assert first_run == 2 * 900  # both runs' records are in the log; only the rerun's are visible
        assert consume_all(broker, "crash_out", "read_uncommitted").num_rows == 2 * 900
    assert stage.summary.producer_epoch == txn.producer_epoch


def test_stage_commits_offsets_with_its_output_and_a_failed_stage_moves_nothing(spark, broker, caplog) -> None:  # type: ignore[no-untyped-def]
    caplog.set_level("INFO", logger="txn_broker.spark.stage")
    prepare(broker, "st_in", "st_out", 300)

    def copy(stage) -> None:  # type: ignore[no-untyped-def]
        from pyspark.sql import functions as F

        stage.write(stage.read().select("n", (F.col("n") * 2).alias("twice")), topic="st_out", key="n")

    with txn_stage(spark, broker, transactional_id="st.copy", group_id="st", inputs=["st_in"]) as stage:
        copy(stage)
    ends = broker.end_offsets([TopicPartition("st_in", p) for p in range(4)])
    assert {tp: o for tp, o in broker.committed_offsets("st", ends).items()} == ends
    assert stage.summary.input_offsets == {f"st_in-{tp.partition}": {"start": 0, "end": o} for tp, o in ends.items()}

    produce(broker, "st_in", [{"n": i, "label": f"r{i}"} for i in range(300, 350)], key="label")
    with pytest.raises(RuntimeError, match="transform exploded"):
        with txn_stage(spark, broker, transactional_id="st.copy", group_id="st", inputs=["st_in"]) as failed:
            copy(failed)
            raise RuntimeError("transform exploded")
    assert failed.summary.outcome == "aborted"
    # the abort's log line says what the attempt wrote before it failed, and that it was
    # aborted (issue 28: it used to say "0 record(s) in, 0 out")
    assert failed.summary.records_in == 50 and failed.summary.records_out_by_topic == {"st_out": 50}
    written = failed.summary.bytes_out_by_topic["st_out"]
    assert written > 0
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("stage st.copy: aborted")]
    assert lines == [f"stage st.copy: aborted, 50 record(s) in, 50 out (written: st_out: 50 record(s), "
                     f"{written:,} bytes; aborted: none of it is visible)"], lines
    assert broker.committed_offsets("st", ends) == ends  # did not move
    assert output_ns(broker, "st_out") == list(range(300))

    with txn_stage(spark, broker, transactional_id="st.copy", group_id="st", inputs=["st_in"]) as again:
        copy(again)
    assert again.summary.records_in == 50 and again.summary.records_out == 50
    assert output_ns(broker, "st_out") == list(range(350))

    with txn_stage(spark, broker, transactional_id="st.copy", group_id="st", inputs=["st_in"]) as idle:
        copy(idle)
    assert idle.summary.records_in == 0 and idle.summary.outcome == "committed"


def test_a_fenced_stage_neither_commits_nor_aborts(spark, broker) -> None:  # type: ignore[no-untyped-def]
    prepare(broker, "fz_in", "fz_out", 100)
    with pytest.raises(ProducerFencedError):
        with txn_stage(spark, broker, transactional_id="fz.stage", group_id="fz", inputs=["fz_in"]) as zombie:
            df = zombie.read()
            # a newer instance takes over (an Airflow retry while this one hangs)
            with txn_stage(spark, broker, transactional_id="fz.stage", group_id="fz", inputs=["fz_in"]) as newer:
                again = newer.read()
                newer.write(again.select("n", (again["n"] * 2).alias("twice")), topic="fz_out")
            zombie.write(df.select("n", (df["n"] * 2).alias("twice")), topic="fz_out")
    assert newer.summary.outcome == "committed"
    assert zombie.summary.outcome == "fenced"
    assert output_ns(broker, "fz_out") == list(range(100))
