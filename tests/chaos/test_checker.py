"""The checker finds every anomaly class: a hand-made valid history passes with zero of
each, and the same history with one anomaly put in is reported with that class."""

from __future__ import annotations

import copy
import json

import pytest
from chaos.checker import ANOMALIES, check, main, read_history
from chaos.history import History

RC, RU = "read_committed", "read_uncommitted"


def valid_history() -> list[dict]:
    """Transactions that committed, aborted and ended unknown (both ways), plain sends,
    a transfer, a copier, and readers at both isolation levels: all consistent."""
    h = History(process="w1")
    h.invoke("txn", "T1", [["q", 0, "a1"], ["q", 1, "a2"]])
    h.ok("txn", "T1", [["q", 0, 0, "a1"], ["q", 1, 0, "a2"]])
    h.invoke("send", "S1", [["q", 0, "s1"]])
    h.ok("send", "S1", [["q", 0, 1, "s1"]])
    h.invoke("txn", "T2", [["q", 0, "x1"]])
    h.fail("txn", "T2", "aborted by the workload")
    h.invoke("txn", "T3", [["q", 1, "u1"], ["q", 0, "u2"]])  # killed: unknown, committed
    h.invoke("txn", "T4", [["q", 1, "z1"]])  # unknown, aborted
    h.info("txn", "T4", "DatabaseUnavailableError")
    h.invoke("txn", "TR1", [["bank", 0, "tr1a", -5], ["bank", 1, "tr1b", 5]], kind="transfer")
    h.ok("txn", "TR1", [["bank", 0, 0, "tr1a"], ["bank", 1, 0, "tr1b"]])
    h.invoke("send", "I", [["in", 0, "i1"], ["in", 0, "i2"]])
    h.ok("send", "I", [["in", 0, 0, "i1"], ["in", 0, 1, "i2"]])
    h.invoke("txn", "C1", [["out", 0, "i1|c@C1"], ["out", 0, "i2|c@C1"]], kind="copy",
             reads=[["in", 0, 0, "i1"], ["in", 0, 1, "i2"]], offsets=[["g", "in", 0, 2]])
    h.ok("txn", "C1", [["out", 0, 0, "i1|c@C1"], ["out", 0, 1, "i2|c@C1"]])
    h.assign("R1", RC, [["q", 0, 0], ["q", 1, 0]])
    h.poll("R1", RC, [["q", 0, 0, "a1"], ["q", 0, 1, "s1"], ["q", 1, 0, "a2"]])
    h.poll("R1", RC, [["q", 0, 3, "u2"], ["q", 1, 1, "u1"]])  # skips the aborted x1 at q-0@2
    h.assign("R2", RU, [["q", 0, 0], ["q", 1, 0]])
    h.poll("R2", RU, [["q", 0, 0, "a1"], ["q", 0, 1, "s1"], ["q", 0, 2, "x1"], ["q", 0, 3, "u2"],
                      ["q", 1, 0, "a2"], ["q", 1, 1, "u1"], ["q", 1, 2, "z1"]])
    h.final("q", 0, 4, 4, [[0, "a1"], [1, "s1"], [3, "u2"]], [[0, "a1"], [1, "s1"], [2, "x1"], [3, "u2"]])
    h.final("q", 1, 3, 3, [[0, "a2"], [1, "u1"]], [[0, "a2"], [1, "u1"], [2, "z1"]])
    h.final("bank", 0, 1, 1, [[0, "tr1a"]], [[0, "tr1a"]])
    h.final("bank", 1, 1, 1, [[0, "tr1b"]], [[0, "tr1b"]])
    h.final("in", 0, 2, 2, [[0, "i1"], [1, "i2"]], [[0, "i1"], [1, "i2"]])
    h.final("out", 0, 2, 2, [[0, "i1|c@C1"], [1, "i2|c@C1"]], [[0, "i1|c@C1"], [1, "i2|c@C1"]])
    h.final_group("g", [["in", 0, 2]])
    h.meta(copy=[{"input": "in", "output": "out", "group": "g", "suffix": "|c@"}])
    return h.events


def find(events, **match):
    return next(e for e in events if all(e.get(k) == v for k, v in match.items()))


def finals(events, topic, partition):
    return find(events, f="final", topic=topic, partition=partition)


def only(report, anomaly, at_least=1):
    """``anomaly`` was found, and nothing else."""
    assert report.counts[anomaly] >= at_least, report.to_json()
    others = {k: v for k, v in report.counts.items() if v and k != anomaly}
    assert not others, report.to_json()


def test_valid_history_has_no_anomaly():
    report = check(valid_history())
    assert report.ok, report.to_json()
    assert report.counts == dict.fromkeys(ANOMALIES, 0)
    assert report.stats["unknown_committed"] == 1 and report.stats["unknown_aborted"] == 1
    assert report.stats["transfer_balance"] == 0


def test_aborted_read_by_a_poller():
    events = valid_history()
    find(events, f="poll", session="R1")["records"].append(["q", 0, 2, "x1"])
    only(check(events), "aborted_read")


def test_aborted_read_in_the_final_state():
    events = valid_history()
    f = finals(events, "q", 0)
    f["rc"] = f["ru"]  # the transaction we aborted became visible
    report = check(events)
    assert report.counts["aborted_read"] == 1
    assert report.counts["nonmonotonic_poll"] == 1  # and R1 skipped it though it is "committed"
    assert sum(report.counts.values()) == 2


def test_aborted_read_of_an_unknown_transaction_that_aborted():
    events = valid_history()
    [e for e in events if e.get("session") == "R1"][-1]["records"].append(["q", 1, 2, "z1"])
    only(check(events), "aborted_read")


def test_lost_write_of_a_plain_send():
    events = valid_history()
    for e in events:
        if e.get("f") == "poll":
            e["records"] = [r for r in e["records"] if r[3] != "s1"]
    e = find(events, f="assign", session="R1")
    e["positions"] = [["q", 0, 2], ["q", 1, 0]]
    e = find(events, f="assign", session="R2")
    e["positions"] = [["q", 0, 2], ["q", 1, 0]]
    for e in events:
        if e.get("f") == "poll":
            e["records"] = [r for r in e["records"] if not (r[0] == "q" and r[1] == 0 and r[2] < 2)]
    f = finals(events, "q", 0)
    f["rc"] = [r for r in f["rc"] if r[1] != "s1"]
    f["ru"] = [r for r in f["ru"] if r[1] != "s1"]
    only(check(events), "lost_write")


def test_lost_write_of_a_committed_transaction_that_ended_aborted():
    events = valid_history()
    for name in ("bank",):
        for p in (0, 1):
            finals(events, name, p)["rc"] = []
            finals(events, name, p)["lso"] = 1
    only(check(events), "lost_write", at_least=2)


def test_lost_write_by_a_copier():
    events = valid_history()
    f = finals(events, "out", 0)
    f["rc"] = f["ru"] = [[0, "i1|c@C1"]]
    f["hw"] = f["lso"] = 1
    find(events, id="C1", type="ok")["sent"] = [["out", 0, 0, "i1|c@C1"]]
    find(events, id="C1", type="invoke")["writes"] = [["out", 0, "i1|c@C1"]]
    only(check(events), "lost_write")


def test_duplicate():
    events = valid_history()
    f = finals(events, "q", 0)
    f["rc"].append([4, "u2"])
    f["ru"].append([4, "u2"])
    f["hw"] = f["lso"] = 5
    only(check(events), "duplicate")


def test_duplicate_output_of_a_copier():
    """The same input copied by two committed transactions (their outputs differ)."""
    events = valid_history()
    h = History(process="c2")
    h.invoke("txn", "C2", [["out", 0, "i2|c@C2"]], kind="copy", reads=[["in", 0, 1, "i2"]],
             offsets=[["g", "in", 0, 2]])
    h.ok("txn", "C2", [["out", 0, 2, "i2|c@C2"]])
    events[-2:-2] = h.events
    f = finals(events, "out", 0)
    f["rc"].append([2, "i2|c@C2"])
    f["ru"].append([2, "i2|c@C2"])
    f["hw"] = f["lso"] = 3
    only(check(events), "duplicate")


def test_torn_transaction_in_the_final_state():
    events = valid_history()
    for e in events:
        if e.get("f") == "poll":
            e["records"] = [r for r in e["records"] if r[3] != "u1"]
    finals(events, "q", 1)["rc"] = [[0, "a2"]]
    report = check(events)
    assert report.counts["torn_transaction"] == 1
    # the RC reader skipped offset 1 of q-1, which the final read says is not committed: fine
    assert report.counts["nonmonotonic_poll"] == 1  # but the RU reader skipped u1 at q-1@1
    assert sum(report.counts.values()) == 2


def test_torn_read_by_a_reader_that_read_past_the_transaction():
    events = valid_history()
    h = History(process="r3")
    h.assign("R3", RC, [["q", 0, 0], ["q", 1, 0]])
    h.poll("R3", RC, [["q", 1, 0, "a2"], ["q", 0, 1, "s1"]])  # saw a2 of T1 but not a1 at q-0@0
    events += h.events
    report = check(events)
    assert report.counts["torn_transaction"] == 1
    assert report.counts["nonmonotonic_poll"] == 1  # it skipped a committed record too


def test_torn_transfer_does_not_conserve_money():
    events = valid_history()
    find(events, id="TR1", type="invoke")["writes"][1][3] = 4
    only(check(events), "torn_transaction")


def test_torn_copy_outputs_visible_without_their_offsets():
    events = valid_history()
    find(events, f="final-group")["offsets"] = [["in", 0, 1]]
    only(check(events), "torn_transaction")


def test_inconsistent_offsets_between_two_readers():
    events = valid_history()
    find(events, f="poll", session="R2")["records"][1] = ["q", 0, 1, "u2"]
    report = check(events)
    assert report.counts["inconsistent_offsets"] >= 1
    assert report.counts["aborted_read"] == report.counts["lost_write"] == 0


def test_group_offset_beyond_the_log():
    events = valid_history()
    find(events, f="final-group")["offsets"] = [["in", 0, 7]]
    report = check(events)
    assert report.counts["inconsistent_offsets"] == 1


def test_nonmonotonic_send():
    events = valid_history()
    t1 = find(events, id="T1", type="ok")
    s1 = find(events, id="S1", type="ok")
    i, j = events.index(t1), events.index(s1)
    events[i], events[j] = events[j], events[i]  # w1 got offset 1 of q-0 before offset 0
    only(check(events), "nonmonotonic_send")


def test_nonmonotonic_poll_going_backwards():
    events = valid_history()
    records = find(events, f="poll", session="R2")["records"]
    records[0], records[1] = records[1], records[0]
    only(check(events), "nonmonotonic_poll")


def test_nonmonotonic_poll_skipping_at_read_uncommitted():
    events = valid_history()
    records = find(events, f="poll", session="R2")["records"]
    records.remove(["q", 0, 2, "x1"])  # an RU reader must not skip an aborted record
    only(check(events), "nonmonotonic_poll")


def two_txns(order0, order1, reads=None):
    h = History(process="w9")
    h.invoke("txn", "A", [["k", 0, "a0"], ["k", 1, "a1"]], reads=(reads or {}).get("A", []))
    h.invoke("txn", "B", [["k", 0, "b0"], ["k", 1, "b1"]], reads=(reads or {}).get("B", []))
    h.final("k", 0, 2, 2, list(enumerate(order0)), list(enumerate(order0)))
    h.final("k", 1, 2, 2, list(enumerate(order1)), list(enumerate(order1)))
    return h.events


def test_no_cycle_when_partitions_agree():
    assert check(two_txns(["a0", "b0"], ["a1", "b1"])).ok


def test_g0_write_cycle():
    only(check(two_txns(["a0", "b0"], ["b1", "a1"])), "g0")


def test_g0_interleaved_segments_in_one_partition():
    h = History(process="w9")
    h.invoke("txn", "A", [["k", 0, "a0"], ["k", 0, "a2"]])
    h.invoke("txn", "B", [["k", 0, "b1"]])
    rows = [[0, "a0"], [1, "b1"], [2, "a2"]]
    h.final("k", 0, 3, 3, rows, rows)
    only(check(h.events), "g0")


def test_g1c_write_read_cycle():
    h = History(process="w9")
    # A writes x and read y, which B wrote; B writes y and read x, which A wrote
    h.invoke("txn", "A", [["k", 0, "x"]], reads=[["k", 1, 0, "y"]])
    h.invoke("txn", "B", [["k", 1, "y"]], reads=[["k", 0, 0, "x"]])
    h.final("k", 0, 1, 1, [[0, "x"]], [[0, "x"]])
    h.final("k", 1, 1, 1, [[0, "y"]], [[0, "y"]])
    only(check(h.events), "g1c")


def test_stuck_consumer():
    events = valid_history()
    f = finals(events, "q", 1)
    f["lso"] = 2  # z1's transaction never got its marker
    only(check(events), "stuck_consumer")


def test_phantom_read():
    events = valid_history()
    f = finals(events, "q", 1)
    f["rc"].append([3, "never-written"])
    f["ru"].append([3, "never-written"])
    f["hw"] = f["lso"] = 4
    only(check(events), "phantom_read")


def test_every_class_is_covered_by_a_test():
    names = {n for n in globals() if n.startswith("test_")}
    for anomaly in ANOMALIES:
        word = anomaly.replace("_consumer", "").replace("_offsets", "")
        assert any(word in n for n in names), f"no test for {anomaly}"


def test_cli_and_torn_last_line(tmp_path, capsys):
    good = tmp_path / "good.jsonl"
    good.write_text("".join(json.dumps(e) + "\n" for e in valid_history()) + '{"type": "inv')
    assert len(read_history([good])) == len(valid_history())
    assert main([str(good)]) == 0
    assert "VALID" in capsys.readouterr().out
    bad_events = valid_history()
    finals(bad_events, "q", 1)["lso"] = 2
    bad = tmp_path / "bad.jsonl"
    bad.write_text("".join(json.dumps(e) + "\n" for e in bad_events))
    assert main([str(bad), "--json"]) == 1
    assert json.loads(capsys.readouterr().out)["anomalies"]["stuck_consumer"] == 1


def test_history_writer_appends_lines(tmp_path):
    path = tmp_path / "h.jsonl"
    h = History(path, process="x")
    h.invoke("send", "S", [["t", 0, "v"]])
    h.ok("send", "S", [["t", 0, 0, "v"]])
    h.close()
    events = read_history([path])
    assert [e["type"] for e in events] == ["invoke", "ok"] and events[0]["process"] == "x"


@pytest.mark.parametrize("anomaly", ANOMALIES)
def test_report_lists_examples(anomaly):
    events = copy.deepcopy(valid_history())
    report = check(events)
    report.add(anomaly, {"x": 1})
    assert not report.ok and report.to_json()["examples"][anomaly] == [{"x": 1}]


def test_a_read_uncommitted_reader_may_skip_aborted_records_compaction_dropped():
    events = valid_history()
    # compaction merged q-0 and dropped the aborted x1 at q-0@2: gone from the final
    # read_uncommitted read too, so a read_uncommitted reader that skipped it is fine
    finals(events, "q", 0)["ru"] = [[0, "a1"], [1, "s1"], [3, "u2"]]
    h = History(process="r4")
    h.assign("R4", RU, [["q", 0, 0]])
    h.poll("R4", RU, [["q", 0, 0, "a1"], ["q", 0, 1, "s1"], ["q", 0, 3, "u2"]])
    events += h.events
    assert check(events).ok
    # an aborted record still there at the end, skipped: still an anomaly
    finals(events, "q", 0)["ru"] = [[0, "a1"], [1, "s1"], [2, "x1"], [3, "u2"]]
    only(check(events), "nonmonotonic_poll")
