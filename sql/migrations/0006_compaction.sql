-- 0006: segment compaction (txn_broker/compaction.py). A compacted segment merges a run of
-- committed segments, without their aborted records: its object stores an explicit
-- `_offset` column, and its row records the offset span (base_offset, record_count: the
-- offsets it covers, gaps included) and, in row_count, the records it holds. NULL: a
-- segment written by a producer, holding record_count records at consecutive offsets.
ALTER TABLE segments ADD COLUMN row_count BIGINT;
