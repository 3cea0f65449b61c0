from __future__ import annotations

from txn_broker.log.keys import SEGMENT_PREFIX, parse_segment_key, partition_prefix, segment_key


def test_segment_keys_round_trip():
    key = segment_key(12, 3, "7-0-5-abc")
    assert key == "topics/12/3/7-0-5-abc.arrow"
    assert key.startswith(SEGMENT_PREFIX) and key.startswith(partition_prefix(12, 3))
    assert parse_segment_key(key) == (12, 3)


def test_other_keys_are_not_segments():
    for key in ("topics/x/1/a.arrow", "other/1/2/a.arrow", "topics/1", "topics/1/2", "topicsx/1/2/a"):
        assert parse_segment_key(key) is None, key
    assert not partition_prefix(1, 2).startswith(partition_prefix(1, 20))
    assert not partition_prefix(1, 20).startswith(partition_prefix(1, 2))
