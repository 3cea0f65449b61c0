-- Case 6: a topic's history generated straight into the broker's tables, as if
-- producers had run for a long time. One transaction per segment (every tenth aborted);
-- half of all segments in partition 0 (the hot partition the fetch plans read), the rest
-- spread over the other partitions; 100 records per segment; offsets contiguous.
-- Placeholders: {with_series} and {series} (a row per i in 0..:segments-1: PostgreSQL's
-- generate_series, SQLite's recursive CTE).

-- scale_transactions --
-- The transaction instances
{with_series}
INSERT INTO transactions (txn_id, transactional_id, producer_id, producer_epoch, timeout_ms, start_ms, end_ms,
                          outcome)
SELECT :base_txn + i, 'gen-' || (i % 100), :base_pid + (i % 100), 0, 60000, i, i + 5,
       CASE WHEN i % 10 = 9 THEN 'ABORT' ELSE 'COMMIT' END
FROM {series};

-- scale_segments --
-- The segments, hot partition 0 taking every other one
{with_series}
INSERT INTO segments (topic_id, partition_no, base_offset, record_count, size_bytes, object_key, producer_id,
                      producer_epoch, base_sequence, txn_id, max_timestamp_ms, created_ms)
SELECT :topic_id, g.partition_no, g.idx * 100, 100, 4096, 'gen/' || :topic_id || '/' || g.i,
       :base_pid + (g.i % 100), 0, -1, :base_txn + g.i, g.i, g.i
FROM (SELECT i,
             CASE WHEN i % 2 = 0 THEN 0 ELSE 1 + (i / 2) % (:partitions - 1) END AS partition_no,
             CASE WHEN i % 2 = 0 THEN i / 2 ELSE (i / 2) / (:partitions - 1) END AS idx
      FROM {series}) g;

-- scale_txn_partitions --
-- Each transaction's partition entry with its marker
INSERT INTO txn_partitions (txn_id, topic_id, partition_no, first_offset, last_offset, record_count, size_bytes,
                            marker, marker_offset, marker_ms)
SELECT s.txn_id, s.topic_id, s.partition_no, s.base_offset, s.base_offset + s.record_count - 1, s.record_count,
       s.size_bytes, CASE WHEN (s.txn_id - :base_txn) % 10 = 9 THEN 'ABORT' ELSE 'COMMIT' END,
       s.base_offset + s.record_count, s.created_ms
FROM segments s WHERE s.topic_id = :topic_id;

-- scale_high_watermarks --
-- Each partition's high watermark at the end of its generated log
UPDATE partitions
SET high_watermark = COALESCE((SELECT MAX(s.base_offset + s.record_count) FROM segments s
                               WHERE s.topic_id = partitions.topic_id
                                 AND s.partition_no = partitions.partition_no), 0)
WHERE topic_id = :topic_id;

-- scale_counters --
-- Move the id counters past the generated ids (on PostgreSQL the txn_id row is gone:
-- transaction ids come from the sequence txn_ids, moved by bench/case_scale.py)
UPDATE counters SET value = CASE name WHEN 'txn_id' THEN :base_txn + :segments
                                      WHEN 'producer_id' THEN :base_pid + 100 ELSE value END
WHERE name IN ('txn_id', 'producer_id');
