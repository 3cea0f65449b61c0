-- Every query the broker runs, by name. Loaded once by txn_broker.sql.
-- Placeholders filled per dialect at load time: {now_ms} (the database clock in
-- milliseconds), {for_update} (row lock; nothing on SQLite, whose writers are
-- serialised by BEGIN IMMEDIATE) and {skip_locked} (claim rows other sweepers hold).

-- next_id --
-- Allocate the next value of a counter (producer ids, topic ids, transaction ids)
UPDATE counters SET value = value + 1 WHERE name = :name RETURNING value;

-- now_ms --
-- The database clock, the only clock the coordinator trusts
SELECT {now_ms} AS now_ms;

-- insert_topic --
-- Register a topic; no row back when the name is taken
INSERT INTO topics (topic_id, name, partition_count, arrow_schema, config, created_ms, schema_version,
                    last_field_id)
VALUES (:topic_id, :name, :partition_count, :arrow_schema, :config, {now_ms}, 1, :last_field_id)
ON CONFLICT (name) DO NOTHING
RETURNING topic_id;

-- insert_partition --
-- One row per partition of a new topic
INSERT INTO partitions (topic_id, partition_no) VALUES (:topic_id, :partition_no);

-- get_topic --
-- A topic's metadata by name
SELECT topic_id, name, partition_count, arrow_schema, config, created_ms, schema_version, last_field_id
FROM topics WHERE name = :name;

-- get_topic_by_id --
-- A topic's metadata by id
SELECT topic_id, name, partition_count, arrow_schema, config, created_ms, schema_version, last_field_id
FROM topics WHERE topic_id = :topic_id;

-- insert_topic_schema --
-- Keep one version of a topic's schema (version 1 at creation, the next at each change)
INSERT INTO topic_schemas (topic_id, version, arrow_schema, created_ms, created_by)
VALUES (:topic_id, :version, :arrow_schema, {now_ms}, :created_by);

-- topic_schema_versions --
-- Every version of a topic's schema, oldest first
SELECT version, arrow_schema, created_ms, created_by FROM topic_schemas
WHERE topic_id = :topic_id ORDER BY version;

-- lock_topic --
-- A topic's row, locked while it is altered (SQLite: writers are serialised already)
SELECT topic_id, name, partition_count, arrow_schema, config, created_ms, schema_version, last_field_id
FROM topics WHERE name = :name {for_update};

-- set_topic_schema --
-- Make a new schema version the latest
UPDATE topics SET arrow_schema = :arrow_schema, schema_version = :schema_version,
                  last_field_id = :last_field_id
WHERE topic_id = :topic_id;

-- set_topic_config --
-- Replace a topic's configs (the whole JSON object)
UPDATE topics SET config = :config WHERE topic_id = :topic_id;

-- set_partition_count --
-- Grow a topic's partition count (its new partitions' rows are inserted with insert_partition)
UPDATE topics SET partition_count = :partition_count
WHERE topic_id = :topic_id AND partition_count < :partition_count;

-- insert_topic_alteration --
-- Record an alteration of a topic: who, when, and what changed (JSON)
INSERT INTO topic_alterations (topic_id, seq, altered_ms, altered_by, changes)
VALUES (:topic_id, (SELECT COALESCE(MAX(a.seq), 0) + 1 FROM topic_alterations a WHERE a.topic_id = :topic_id),
        {now_ms}, :altered_by, :changes)
RETURNING seq, altered_ms;

-- topic_alterations_of --
-- A topic's alterations, oldest first
SELECT seq, altered_ms, altered_by, changes FROM topic_alterations
WHERE topic_id = :topic_id ORDER BY seq;

-- list_topics --
-- All topic names
SELECT name FROM topics ORDER BY name;

-- delete_topic --
-- Drop a topic and, by cascade, its partitions, segments, markers and group offsets
DELETE FROM topics WHERE topic_id = :topic_id;

-- topic_object_keys --
-- Objects to delete after a topic is dropped
SELECT object_key FROM segments WHERE topic_id = :topic_id;

-- partition_offsets --
-- Log start, high watermark and last stable offset of one partition, in one snapshot
SELECT p.log_start_offset,
       p.high_watermark,
       COALESCE((SELECT MIN(o.first_offset) FROM txn_partitions o
                 WHERE o.topic_id = p.topic_id AND o.partition_no = p.partition_no
                   AND o.marker IS NULL AND o.first_offset IS NOT NULL),
                p.high_watermark) AS last_stable_offset
FROM partitions p
WHERE p.topic_id = :topic_id AND p.partition_no = :partition_no;

-- topic_partition_offsets --
-- Offsets, segment counts and bytes (of segments not purged by gc) of every partition of a topic
SELECT p.partition_no,
       p.log_start_offset,
       p.high_watermark,
       COALESCE((SELECT MIN(o.first_offset) FROM txn_partitions o
                 WHERE o.topic_id = p.topic_id AND o.partition_no = p.partition_no
                   AND o.marker IS NULL AND o.first_offset IS NOT NULL),
                p.high_watermark) AS last_stable_offset,
       (SELECT COUNT(*) FROM segments s
        WHERE s.topic_id = p.topic_id AND s.partition_no = p.partition_no
          AND s.purged_ms IS NULL) AS segment_count,
       (SELECT CAST(COALESCE(SUM(s.size_bytes), 0) AS BIGINT) FROM segments s
        WHERE s.topic_id = p.topic_id AND s.partition_no = p.partition_no
          AND s.purged_ms IS NULL) AS size_bytes
FROM partitions p
WHERE p.topic_id = :topic_id
ORDER BY p.partition_no;

-- fetch_plan --
-- The segments overlapping [start_offset, end_offset) with their transaction's marker
-- (purged_ms set: gc deleted the object of an aborted segment; every reader skips it)
SELECT s.base_offset, s.record_count, s.size_bytes, s.object_key, s.txn_id,
       s.producer_id, s.max_timestamp_ms, m.marker, s.purged_ms, s.schema_version, s.row_count
FROM segments s
LEFT JOIN txn_partitions m
       ON m.txn_id = s.txn_id AND m.topic_id = s.topic_id AND m.partition_no = s.partition_no
WHERE s.topic_id = :topic_id AND s.partition_no = :partition_no
  AND s.base_offset >= COALESCE((SELECT MAX(f.base_offset) FROM segments f
                                 WHERE f.topic_id = :topic_id AND f.partition_no = :partition_no
                                   AND f.base_offset <= :start_offset), 0)
  AND s.base_offset < :end_offset
ORDER BY s.base_offset
LIMIT :max_segments;

-- producer_state_for_update --
-- The last sequence accepted from a producer on a partition, locked for the append
SELECT producer_epoch, last_sequence FROM producer_state
WHERE producer_id = :producer_id AND topic_id = :topic_id AND partition_no = :partition_no
{for_update};

-- segment_by_sequence --
-- The segment an earlier attempt of a retried append stored
SELECT base_offset, record_count, object_key FROM segments
WHERE producer_id = :producer_id AND topic_id = :topic_id AND partition_no = :partition_no
  AND base_sequence = :base_sequence AND producer_epoch = :producer_epoch;

-- allocate_offsets --
-- Assign offsets to a batch: moves the high watermark and locks the partition row
UPDATE partitions SET high_watermark = high_watermark + :record_count
WHERE topic_id = :topic_id AND partition_no = :partition_no
RETURNING high_watermark, log_start_offset;

-- insert_segment --
-- Register a completely written segment object
INSERT INTO segments (topic_id, partition_no, base_offset, record_count, size_bytes, object_key,
                      producer_id, producer_epoch, base_sequence, txn_id, max_timestamp_ms,
                      created_ms, schema_version)
VALUES (:topic_id, :partition_no, :base_offset, :record_count, :size_bytes, :object_key,
        :producer_id, :producer_epoch, :base_sequence, :txn_id, :max_timestamp_ms, {now_ms},
        :schema_version);

-- upsert_producer_state --
-- Remember the last accepted sequence
INSERT INTO producer_state (producer_id, topic_id, partition_no, producer_epoch, last_sequence,
                            updated_ms)
VALUES (:producer_id, :topic_id, :partition_no, :producer_epoch, :last_sequence, {now_ms})
ON CONFLICT (producer_id, topic_id, partition_no) DO UPDATE
SET producer_epoch = excluded.producer_epoch,
    last_sequence = excluded.last_sequence,
    updated_ms = excluded.updated_ms;

-- advance_producer_sequence --
-- The common case of an append in one statement: the batch is the next one of the producer
-- on the partition, in the epoch it last wrote with. Moves the last sequence on (locking the
-- row); no row changes otherwise (no state yet, another epoch, a retry, a gap), and the
-- caller decides from the stored state instead
UPDATE producer_state SET last_sequence = :last_sequence, updated_ms = {now_ms}
WHERE producer_id = :producer_id AND topic_id = :topic_id AND partition_no = :partition_no
  AND producer_epoch = :producer_epoch AND last_sequence = :previous_sequence;

-- expire_producer_state --
-- Forget sequence state of producers idle longer than producer_id_expiration_ms
DELETE FROM producer_state
WHERE updated_ms < {now_ms} - :expiration_ms
  AND NOT EXISTS (SELECT 1 FROM transactional_ids t
                  WHERE t.producer_id = producer_state.producer_id AND t.state <> 'CompleteCommit'
                    AND t.state <> 'CompleteAbort' AND t.state <> 'Empty');

-- transactional_id_for_update --
-- The coordinator's row for a transactional id, locked
SELECT transactional_id, producer_id, producer_epoch, state, timeout_ms, txn_id, txn_start_ms,
       last_update_ms, state_seq, {now_ms} AS now_ms
FROM transactional_ids WHERE transactional_id = :transactional_id
{for_update};

-- transactional_id_claim --
-- The same row for a sweep: skip it if another sweeper holds it
SELECT transactional_id, producer_id, producer_epoch, state, timeout_ms, txn_id, txn_start_ms,
       last_update_ms, state_seq, {now_ms} AS now_ms
FROM transactional_ids WHERE transactional_id = :transactional_id
{skip_locked};

-- transactional_id_fence_check --
-- The current epoch and state, read without a lock (a cheap fencing check before a send)
SELECT producer_id, producer_epoch, state, txn_id FROM transactional_ids
WHERE transactional_id = :transactional_id;

-- insert_transactional_id --
-- First init of a transactional id; no row back when another process created it first
INSERT INTO transactional_ids (transactional_id, producer_id, producer_epoch, state, timeout_ms,
                               last_update_ms, created_ms)
VALUES (:transactional_id, :producer_id, 0, 'Empty', :timeout_ms, {now_ms}, {now_ms})
ON CONFLICT (transactional_id) DO NOTHING
RETURNING producer_id;

-- update_transactional_id --
-- Write a state transition of a transactional id (the row is locked by the caller)
UPDATE transactional_ids
SET producer_id = :producer_id, producer_epoch = :producer_epoch, state = :state,
    timeout_ms = :timeout_ms, txn_id = :txn_id, txn_start_ms = :txn_start_ms,
    last_update_ms = {now_ms}, state_seq = :state_seq
WHERE transactional_id = :transactional_id;

-- delete_transactional_id --
-- Remove an expired transactional id
DELETE FROM transactional_ids WHERE transactional_id = :transactional_id AND state = 'Dead';

-- insert_state_log --
-- Append to the transaction log's history
INSERT INTO txn_state_log (producer_id, seq, transactional_id, producer_epoch, txn_id,
                           from_state, to_state, at_ms, reason)
VALUES (:producer_id, :seq, :transactional_id, :producer_epoch, :txn_id, :from_state, :to_state,
        {now_ms}, :reason);

-- insert_state_log_pair --
-- Two entries of the history in one statement (a transition and the one that follows it
-- in the same database transaction: PrepareCommit then CompleteCommit)
INSERT INTO txn_state_log (producer_id, seq, transactional_id, producer_epoch, txn_id,
                           from_state, to_state, at_ms, reason)
VALUES (:producer_id, :seq, :transactional_id, :producer_epoch, :txn_id, :from_state, :to_state,
        {now_ms}, :reason),
       (:producer_id_2, :seq_2, :transactional_id_2, :producer_epoch_2, :txn_id_2, :from_state_2,
        :to_state_2, {now_ms}, :reason_2);

-- insert_transaction --
-- Start a transaction instance
INSERT INTO transactions (txn_id, transactional_id, producer_id, producer_epoch, timeout_ms,
                          start_ms)
VALUES (:txn_id, :transactional_id, :producer_id, :producer_epoch, :timeout_ms, {now_ms});

-- end_transaction --
-- Record a transaction's outcome
UPDATE transactions SET outcome = :outcome, end_ms = {now_ms}
WHERE txn_id = :txn_id AND outcome IS NULL;

-- add_txn_partition --
-- AddPartitionsToTxn
INSERT INTO txn_partitions (txn_id, topic_id, partition_no)
VALUES (:txn_id, :topic_id, :partition_no)
ON CONFLICT (txn_id, topic_id, partition_no) DO NOTHING;

-- write_markers --
-- Write the COMMIT or ABORT marker into every partition of the transaction
UPDATE txn_partitions
SET marker = :marker,
    marker_ms = {now_ms},
    marker_offset = (SELECT p.high_watermark FROM partitions p
                     WHERE p.topic_id = txn_partitions.topic_id
                       AND p.partition_no = txn_partitions.partition_no)
WHERE txn_id = :txn_id AND marker IS NULL;

-- upsert_txn_offset --
-- TxnOffsetCommit: stage a group offset inside the transaction
INSERT INTO txn_offsets (txn_id, group_id, topic_id, partition_no, committed_offset, metadata, leader_epoch)
VALUES (:txn_id, :group_id, :topic_id, :partition_no, :committed_offset, :metadata, :leader_epoch)
ON CONFLICT (txn_id, group_id, topic_id, partition_no) DO UPDATE
SET committed_offset = excluded.committed_offset,
    metadata = excluded.metadata,
    leader_epoch = excluded.leader_epoch;

-- apply_txn_offsets --
-- Make a committed transaction's group offsets the groups' committed offsets
INSERT INTO group_offsets (group_id, topic_id, partition_no, committed_offset, commit_ms, txn_id,
                           metadata, leader_epoch)
SELECT group_id, topic_id, partition_no, committed_offset, {now_ms}, txn_id, metadata, leader_epoch
FROM txn_offsets WHERE txn_id = :txn_id
ORDER BY group_id, topic_id, partition_no
ON CONFLICT (group_id, topic_id, partition_no) DO UPDATE
SET committed_offset = excluded.committed_offset,
    commit_ms = excluded.commit_ms,
    txn_id = excluded.txn_id,
    metadata = excluded.metadata,
    leader_epoch = excluded.leader_epoch;

-- upsert_group_offset --
-- A plain (non-transactional) offset commit
INSERT INTO group_offsets (group_id, topic_id, partition_no, committed_offset, commit_ms, txn_id,
                           metadata, leader_epoch)
VALUES (:group_id, :topic_id, :partition_no, :committed_offset, {now_ms}, NULL, :metadata, :leader_epoch)
ON CONFLICT (group_id, topic_id, partition_no) DO UPDATE
SET committed_offset = excluded.committed_offset,
    commit_ms = excluded.commit_ms,
    txn_id = NULL,
    metadata = excluded.metadata,
    leader_epoch = excluded.leader_epoch;

-- group_offsets_for_topic --
-- A group's committed offsets in one topic
SELECT partition_no, committed_offset, metadata, leader_epoch FROM group_offsets
WHERE group_id = :group_id AND topic_id = :topic_id;

-- list_groups --
-- Every group that has committed offsets
SELECT DISTINCT group_id FROM group_offsets ORDER BY group_id;

-- describe_group --
-- A group's committed offsets with each partition's ends
SELECT t.name AS topic, g.partition_no, g.committed_offset, g.commit_ms,
       p.log_start_offset, p.high_watermark,
       COALESCE((SELECT MIN(o.first_offset) FROM txn_partitions o
                 WHERE o.topic_id = p.topic_id AND o.partition_no = p.partition_no
                   AND o.marker IS NULL AND o.first_offset IS NOT NULL),
                p.high_watermark) AS last_stable_offset
FROM group_offsets g
JOIN topics t ON t.topic_id = g.topic_id
JOIN partitions p ON p.topic_id = g.topic_id AND p.partition_no = g.partition_no
WHERE g.group_id = :group_id
ORDER BY t.name, g.partition_no;

-- expired_transactions --
-- Ongoing transactions past their timeout
SELECT transactional_id FROM transactional_ids
WHERE state = 'Ongoing' AND txn_start_ms + timeout_ms < {now_ms}
ORDER BY txn_start_ms
LIMIT :limit;

-- prepared_transactions --
-- Transactions whose outcome is decided but not yet completed
SELECT transactional_id FROM transactional_ids
WHERE state IN ('PrepareCommit', 'PrepareAbort', 'PrepareEpochFence')
  AND last_update_ms <= {now_ms} - :grace_ms
ORDER BY last_update_ms
LIMIT :limit;

-- expirable_transactional_ids --
-- Idle transactional ids whose last transaction ended longer ago than the expiration
SELECT transactional_id FROM transactional_ids
WHERE state IN ('Empty', 'CompleteCommit', 'CompleteAbort')
  AND last_update_ms < {now_ms} - :expiration_ms
ORDER BY last_update_ms
LIMIT :limit;

-- list_transactional_ids --
-- The coordinator's rows with their current transaction's size, outcome and end
SELECT i.transactional_id, i.producer_id, i.producer_epoch, i.state, i.timeout_ms, i.txn_id,
       i.txn_start_ms, i.last_update_ms, {now_ms} AS now_ms, x.outcome, x.end_ms,
       (SELECT COUNT(*) FROM txn_partitions tp WHERE tp.txn_id = i.txn_id) AS partition_count,
       (SELECT CAST(COALESCE(SUM(tp.record_count), 0) AS BIGINT) FROM txn_partitions tp
        WHERE tp.txn_id = i.txn_id) AS record_count,
       (SELECT CAST(COALESCE(SUM(tp.size_bytes), 0) AS BIGINT) FROM txn_partitions tp
        WHERE tp.txn_id = i.txn_id) AS size_bytes
FROM transactional_ids i LEFT JOIN transactions x ON x.txn_id = i.txn_id
ORDER BY i.transactional_id;

-- transactional_id_summary --
-- One coordinator row with its current transaction's size, outcome and end
SELECT i.transactional_id, i.producer_id, i.producer_epoch, i.state, i.timeout_ms, i.txn_id,
       i.txn_start_ms, i.last_update_ms, {now_ms} AS now_ms, x.outcome, x.end_ms,
       (SELECT COUNT(*) FROM txn_partitions tp WHERE tp.txn_id = i.txn_id) AS partition_count,
       (SELECT CAST(COALESCE(SUM(tp.record_count), 0) AS BIGINT) FROM txn_partitions tp
        WHERE tp.txn_id = i.txn_id) AS record_count,
       (SELECT CAST(COALESCE(SUM(tp.size_bytes), 0) AS BIGINT) FROM txn_partitions tp
        WHERE tp.txn_id = i.txn_id) AS size_bytes
FROM transactional_ids i LEFT JOIN transactions x ON x.txn_id = i.txn_id
WHERE i.transactional_id = :transactional_id;

-- txn_partitions_of --
-- The partitions a transaction touched, with offsets and markers
SELECT t.name AS topic, tp.partition_no, tp.first_offset, tp.last_offset, tp.record_count,
       tp.size_bytes, tp.marker, tp.marker_offset, tp.marker_ms
FROM txn_partitions tp JOIN topics t ON t.topic_id = tp.topic_id
WHERE tp.txn_id = :txn_id
ORDER BY t.name, tp.partition_no;

-- txn_offsets_of --
-- The group offsets a transaction sent
SELECT o.group_id, t.name AS topic, o.partition_no, o.committed_offset
FROM txn_offsets o JOIN topics t ON t.topic_id = o.topic_id
WHERE o.txn_id = :txn_id
ORDER BY o.group_id, t.name, o.partition_no;

-- txn_segments_of --
-- The segments a transaction wrote
SELECT t.name AS topic, s.partition_no, s.base_offset, s.record_count, s.size_bytes,
       s.object_key
FROM segments s JOIN topics t ON t.topic_id = s.topic_id
WHERE s.txn_id = :txn_id
ORDER BY t.name, s.partition_no, s.base_offset;

-- state_log_of --
-- The state history of a transactional id, oldest first
SELECT producer_id, seq, producer_epoch, txn_id, from_state, to_state, at_ms, reason
FROM txn_state_log WHERE transactional_id = :transactional_id
ORDER BY at_ms, producer_id, seq
LIMIT :limit;

-- transactions_of --
-- The transaction instances of a transactional id, newest first
SELECT txn_id, producer_id, producer_epoch, timeout_ms, start_ms, end_ms, outcome
FROM transactions WHERE transactional_id = :transactional_id
ORDER BY txn_id DESC
LIMIT :limit;

-- hanging_transactions --
-- Open transactions older than a threshold that hold back a partition's last stable offset
SELECT i.transactional_id, i.producer_id, i.producer_epoch, i.txn_id, i.txn_start_ms,
       i.timeout_ms, t.name AS topic, tp.partition_no, tp.first_offset, {now_ms} AS now_ms
FROM transactional_ids i
JOIN txn_partitions tp ON tp.txn_id = i.txn_id
JOIN topics t ON t.topic_id = tp.topic_id
WHERE i.state = 'Ongoing' AND tp.marker IS NULL AND tp.first_offset IS NOT NULL
  AND i.txn_start_ms + COALESCE(:older_than_ms, i.timeout_ms) < {now_ms}
ORDER BY i.txn_start_ms, t.name, tp.partition_no;

-- recent_transactions --
-- Transaction instances, newest first, with their size (the monitoring list)
SELECT x.txn_id, x.transactional_id, x.producer_id, x.producer_epoch, x.timeout_ms, x.start_ms,
       x.end_ms, x.outcome, {now_ms} AS now_ms,
       (SELECT COUNT(*) FROM txn_partitions tp WHERE tp.txn_id = x.txn_id) AS partition_count,
       (SELECT CAST(COALESCE(SUM(tp.record_count), 0) AS BIGINT) FROM txn_partitions tp
        WHERE tp.txn_id = x.txn_id) AS record_count,
       (SELECT CAST(COALESCE(SUM(tp.size_bytes), 0) AS BIGINT) FROM txn_partitions tp
        WHERE tp.txn_id = x.txn_id) AS size_bytes
FROM transactions x
ORDER BY x.txn_id DESC
LIMIT :limit;

-- segment_by_object_key --
-- Whether an upload whose registration had no answer was registered after all
SELECT base_offset, record_count, base_sequence FROM segments WHERE object_key = :object_key;

-- partitions_page --
-- Area: garbage collection and fsck (txn_broker/gc.py, orphans.py, fsck.py), to the end of this group.
-- Partitions with their topic, in (topic_id, partition_no) order, one page after a key
SELECT p.topic_id, t.name AS topic, t.config, p.partition_no, p.log_start_offset,
       p.high_watermark
FROM partitions p JOIN topics t ON t.topic_id = p.topic_id
WHERE p.topic_id > :after_topic_id
   OR (p.topic_id = :after_topic_id AND p.partition_no > :after_partition_no)
ORDER BY p.topic_id, p.partition_no
LIMIT :limit;

-- lock_partition --
-- A partition's log start and high watermark, its row locked (retention moves the log start)
SELECT log_start_offset, high_watermark FROM partitions
WHERE topic_id = :topic_id AND partition_no = :partition_no
{for_update};

-- segments_page --
-- One page of a partition's segments in offset order, with their transaction entry's marker
SELECT s.base_offset, s.record_count, s.size_bytes, s.object_key, s.txn_id,
       s.max_timestamp_ms, s.purged_ms, m.txn_id AS entry_txn_id, m.marker, s.row_count
FROM segments s
LEFT JOIN txn_partitions m
       ON m.txn_id = s.txn_id AND m.topic_id = s.topic_id AND m.partition_no = s.partition_no
WHERE s.topic_id = :topic_id AND s.partition_no = :partition_no AND s.base_offset > :after_offset
ORDER BY s.base_offset
LIMIT :limit;

-- partition_live_bytes --
-- Bytes of a partition's segments from an offset on whose objects are still stored
SELECT CAST(COALESCE(SUM(size_bytes), 0) AS BIGINT) FROM segments
WHERE topic_id = :topic_id AND partition_no = :partition_no AND base_offset >= :start_offset
  AND purged_ms IS NULL;

-- advance_log_start --
-- Retention: move the log start forward (compare-and-set; never past the high watermark)
UPDATE partitions SET log_start_offset = :new_start
WHERE topic_id = :topic_id AND partition_no = :partition_no
  AND log_start_offset = :old_start AND :new_start <= high_watermark;

-- queue_truncated_objects --
-- Retention: queue the objects of the segments below the new log start for deletion
INSERT INTO object_deletions (object_key, reason, requested_ms)
SELECT object_key, 'retention', {now_ms} FROM segments
WHERE topic_id = :topic_id AND partition_no = :partition_no AND base_offset < :new_start
  AND purged_ms IS NULL
ON CONFLICT (object_key) DO NOTHING;

-- delete_truncated_segments --
-- Retention: drop the segment rows below the new log start
DELETE FROM segments
WHERE topic_id = :topic_id AND partition_no = :partition_no AND base_offset < :new_start;

-- unpurged_aborts --
-- Partition entries of aborted transactions whose segments gc has not purged yet, one page
-- after a (txn_id, topic_id, partition_no) key
SELECT tp.txn_id, tp.topic_id, t.name AS topic, tp.partition_no
FROM txn_partitions tp
JOIN topics t ON t.topic_id = tp.topic_id
JOIN transactions x ON x.txn_id = tp.txn_id AND x.outcome = 'ABORT'
WHERE tp.marker = 'ABORT' AND tp.purged_ms IS NULL
  AND (tp.txn_id > :after_txn_id
       OR (tp.txn_id = :after_txn_id
           AND (tp.topic_id > :after_topic_id
                OR (tp.topic_id = :after_topic_id AND tp.partition_no > :after_partition_no))))
ORDER BY tp.txn_id, tp.topic_id, tp.partition_no
LIMIT :limit;

-- aborted_segment_totals --
-- Segments (count, bytes) of one aborted transaction in one partition, not yet purged
SELECT COUNT(*) AS segment_count, CAST(COALESCE(SUM(s.size_bytes), 0) AS BIGINT) AS size_bytes
FROM segments s
WHERE s.txn_id = :txn_id AND s.topic_id = :topic_id AND s.partition_no = :partition_no
  AND s.purged_ms IS NULL;

-- queue_aborted_objects --
-- Queue the objects of an aborted transaction's segments in one partition for deletion
INSERT INTO object_deletions (object_key, reason, requested_ms)
SELECT s.object_key, 'aborted', {now_ms} FROM segments s
WHERE s.txn_id = :txn_id AND s.topic_id = :topic_id AND s.partition_no = :partition_no
  AND s.purged_ms IS NULL
ON CONFLICT (object_key) DO NOTHING;

-- purge_aborted_segments --
-- Hide an aborted transaction's segments in one partition from every reader (rows stay)
UPDATE segments SET purged_ms = {now_ms}
WHERE txn_id = :txn_id AND topic_id = :topic_id AND partition_no = :partition_no
  AND purged_ms IS NULL;

-- mark_abort_purged --
-- Note that an aborted transaction's entry in one partition has been purged
UPDATE txn_partitions SET purged_ms = {now_ms}
WHERE txn_id = :txn_id AND topic_id = :topic_id AND partition_no = :partition_no
  AND marker = 'ABORT' AND purged_ms IS NULL;

-- due_object_deletions --
-- Queued objects whose delete delay has passed, oldest first
SELECT object_key FROM object_deletions
WHERE requested_ms <= {now_ms} - :delay_ms
ORDER BY requested_ms, object_key
LIMIT :limit;

-- due_object_deletion_count --
-- How many queued objects are past their delete delay
SELECT COUNT(*) FROM object_deletions WHERE requested_ms <= {now_ms} - :delay_ms;

-- waiting_object_deletions --
-- How many queued objects still wait for their delete delay
SELECT COUNT(*) FROM object_deletions WHERE requested_ms > {now_ms} - :delay_ms;

-- forget_object_deletion --
-- The object is deleted: drop it from the queue
DELETE FROM object_deletions WHERE object_key = :object_key;

-- partition_object_keys --
-- One page of the object keys a partition's segments reference, in offset order
SELECT base_offset, object_key FROM segments
WHERE topic_id = :topic_id AND partition_no = :partition_no AND base_offset > :after_offset
ORDER BY base_offset
LIMIT :limit;

-- object_key_known --
-- Whether a segment row or the deletion queue references an object key
SELECT 1 AS found FROM segments WHERE object_key = :object_key
UNION ALL
SELECT 1 AS found FROM object_deletions WHERE object_key = :object_key;

-- segment_state_by_key --
-- A segment by object key, with whether gc purged it (fsck re-checks a missing object)
SELECT topic_id, partition_no, base_offset, purged_ms FROM segments WHERE object_key = :object_key;

-- fsck_entries_without_transaction --
-- Transaction partition entries (markers) whose transaction row does not exist
SELECT tp.txn_id, tp.topic_id, tp.partition_no, tp.marker
FROM txn_partitions tp
WHERE NOT EXISTS (SELECT 1 FROM transactions x WHERE x.txn_id = tp.txn_id)
ORDER BY tp.txn_id, tp.topic_id, tp.partition_no
LIMIT :limit;

-- fsck_marker_outcome_mismatches --
-- Markers that disagree with their transaction's recorded outcome
SELECT tp.txn_id, x.transactional_id, tp.topic_id, tp.partition_no, tp.marker, x.outcome
FROM txn_partitions tp JOIN transactions x ON x.txn_id = tp.txn_id
WHERE (tp.marker IS NOT NULL AND (x.outcome IS NULL OR x.outcome <> tp.marker))
   OR (tp.marker IS NULL AND x.outcome IS NOT NULL)
ORDER BY tp.txn_id, tp.topic_id, tp.partition_no
LIMIT :limit;

-- committed_txns_beyond --
-- A consistent cut (txn_broker/log/cut.py: the Spark source's atomic end of a read, the
-- Iceberg publisher's snapshots): the committed transactions with records at or after
-- :end_offset in one partition, and every partition each of them wrote with its first
-- offset there. A compacted segment (row_count set) belongs to no transaction: when one
-- ends past :end_offset (rare: an end lowered below where compaction reached), the
-- transactions whose records it holds are found by their partition entries instead (a scan
-- of txn_partitions, run only then)
SELECT tp.txn_id, tp.topic_id, tp.partition_no, tp.first_offset
FROM txn_partitions tp
WHERE tp.marker = 'COMMIT' AND tp.first_offset IS NOT NULL
  AND (tp.txn_id IN (SELECT s.txn_id FROM segments s
                     WHERE s.topic_id = :topic_id AND s.partition_no = :partition_no
                       AND s.base_offset >= :end_offset AND s.txn_id IS NOT NULL)
       OR (EXISTS (SELECT 1 FROM segments c
                   WHERE c.topic_id = :topic_id AND c.partition_no = :partition_no
                     AND c.row_count IS NOT NULL AND c.base_offset + c.record_count > :end_offset)
           AND tp.txn_id IN (SELECT x.txn_id FROM txn_partitions x
                             WHERE x.topic_id = :topic_id AND x.partition_no = :partition_no
                               AND x.marker = 'COMMIT' AND x.last_offset >= :end_offset)));

-- next_txn_id --
-- A new transaction id: nextval of the sequence txn_ids on PostgreSQL (takes no row lock,
-- so concurrent transaction starts do not queue; never rolled back, so ids may have gaps),
-- the counters row on SQLite (writers are serialised there anyway). {next_txn_id} is the
-- whole statement, per dialect (txn_broker/database.py).
{next_txn_id};

-- add_txn_append_added --
-- An append in a transaction to a partition AddPartitionsToTxn added (a Kafka client's
-- produce, KIP-890): notes it in the partition's entry; no row changed when the partition is
-- not in the transaction (a request its client gave up on, read after the client had moved on
-- to its next transaction) or its marker is written (the transaction ended): refused
UPDATE txn_partitions
SET first_offset = COALESCE(first_offset, :base_offset),
    last_offset = :last_offset,
    record_count = record_count + :record_count,
    size_bytes = size_bytes + :size_bytes
WHERE txn_id = :txn_id AND topic_id = :topic_id AND partition_no = :partition_no AND marker IS NULL;

-- add_txn_append --
-- An append in a transaction: notes the append in its partition's entry, adding the
-- partition if AddPartitionsToTxn did not (a Spark writer's registration, a reply lost);
-- no row changed when the entry's marker is written already (the transaction ended: the
-- append is refused)
INSERT INTO txn_partitions (txn_id, topic_id, partition_no, first_offset, last_offset, record_count,
                            size_bytes)
VALUES (:txn_id, :topic_id, :partition_no, :base_offset, :last_offset, :record_count, :size_bytes)
ON CONFLICT (txn_id, topic_id, partition_no) DO UPDATE
SET first_offset = COALESCE(txn_partitions.first_offset, excluded.first_offset),
    last_offset = excluded.last_offset,
    record_count = txn_partitions.record_count + excluded.record_count,
    size_bytes = txn_partitions.size_bytes + excluded.size_bytes
WHERE txn_partitions.marker IS NULL;

-- register_kafka_listener --
-- A Kafka-protocol listener starts: the node id of its address (kept across restarts), or the next one.
-- started_ms begins its term: it coordinates groups from :settle_ms later (txn_broker/kafka/cluster_view.py),
-- or at once (started_ms set back) when no other listener is up
INSERT INTO kafka_listeners (node_id, host, port, heartbeat_ms, started_ms)
SELECT COALESCE(MAX(node_id), -1) + 1, :host, :port, {now_ms},
       CASE WHEN EXISTS (SELECT 1 FROM kafka_listeners o
                         WHERE o.heartbeat_ms >= {now_ms} - :expiry_ms AND NOT (o.host = :host AND o.port = :port))
            THEN {now_ms} ELSE {now_ms} - :settle_ms END
FROM kafka_listeners WHERE 1 = 1
ON CONFLICT (host, port) DO UPDATE SET heartbeat_ms = excluded.heartbeat_ms, started_ms = excluded.started_ms
RETURNING node_id;

-- kafka_listener_heartbeat --
-- A listener is still up. One that was taken as down (silent for :expiry_ms) begins a new term, as
-- register_kafka_listener starts one
UPDATE kafka_listeners SET heartbeat_ms = {now_ms},
    started_ms = CASE WHEN heartbeat_ms >= {now_ms} - :expiry_ms THEN started_ms
                      WHEN EXISTS (SELECT 1 FROM kafka_listeners o
                                   WHERE o.node_id <> :node_id AND o.heartbeat_ms >= {now_ms} - :expiry_ms)
                      THEN {now_ms} ELSE {now_ms} - :settle_ms END
WHERE node_id = :node_id;

-- live_kafka_listeners --
-- The listeners whose last heartbeat is recent, with its age and the age of their term
SELECT node_id, host, port, {now_ms} - heartbeat_ms AS age_ms, {now_ms} - started_ms AS term_ms, started_ms
FROM kafka_listeners
WHERE heartbeat_ms >= {now_ms} - :max_age_ms
ORDER BY node_id;

-- kafka_listener_in_term --
-- A listener is still in the term that began at :started_ms and not taken as down (a row, else none)
SELECT node_id FROM kafka_listeners
WHERE node_id = :node_id AND started_ms = :started_ms AND heartbeat_ms >= {now_ms} - :expiry_ms;

-- delete_kafka_listener --
-- A listener stops
DELETE FROM kafka_listeners WHERE node_id = :node_id;

-- metrics_partitions --
-- Area: the Prometheus exporter (txn_broker/metrics), to the end of this group. Each query
-- answers for the whole broker in one set-based pass (a scrape runs them in one snapshot).
-- Every partition's offsets, segment count and bytes (segments not purged by gc), as
-- topic_partition_offsets reports them for one topic
SELECT t.name AS topic, p.partition_no, p.log_start_offset, p.high_watermark,
       COALESCE(o.first_open_offset, p.high_watermark) AS last_stable_offset,
       COALESCE(s.segment_count, 0) AS segment_count,
       CAST(COALESCE(s.size_bytes, 0) AS BIGINT) AS size_bytes
FROM partitions p
JOIN topics t ON t.topic_id = p.topic_id
LEFT JOIN (SELECT topic_id, partition_no, MIN(first_offset) AS first_open_offset
           FROM txn_partitions
           WHERE marker IS NULL AND first_offset IS NOT NULL
           GROUP BY topic_id, partition_no) o
       ON o.topic_id = p.topic_id AND o.partition_no = p.partition_no
LEFT JOIN (SELECT topic_id, partition_no, COUNT(*) AS segment_count, SUM(size_bytes) AS size_bytes
           FROM segments
           WHERE purged_ms IS NULL
           GROUP BY topic_id, partition_no) s
       ON s.topic_id = p.topic_id AND s.partition_no = p.partition_no
ORDER BY t.name, p.partition_no;

-- metrics_group_offsets --
-- Every group's committed offset per partition and, when the group is behind the last
-- stable offset, the newest timestamp (max_timestamp_ms) of the first committed, unpurged
-- segment below it holding a record the group has not consumed
SELECT g.group_id, t.name AS topic, g.partition_no, g.committed_offset,
       CASE WHEN g.committed_offset < COALESCE(o.first_open_offset, p.high_watermark) THEN
         (SELECT s.max_timestamp_ms FROM segments s
          LEFT JOIN txn_partitions m
                 ON m.txn_id = s.txn_id AND m.topic_id = s.topic_id AND m.partition_no = s.partition_no
          WHERE s.topic_id = g.topic_id AND s.partition_no = g.partition_no
            AND s.base_offset >= COALESCE((SELECT MAX(f.base_offset) FROM segments f
                                           WHERE f.topic_id = g.topic_id AND f.partition_no = g.partition_no
                                             AND f.base_offset <= g.committed_offset), 0)
            AND s.base_offset + s.record_count > g.committed_offset
            AND s.base_offset < COALESCE(o.first_open_offset, p.high_watermark)
            AND s.purged_ms IS NULL AND (s.txn_id IS NULL OR m.marker = 'COMMIT')
          ORDER BY s.base_offset
          LIMIT 1)
       END AS unconsumed_timestamp_ms
FROM group_offsets g
JOIN topics t ON t.topic_id = g.topic_id
JOIN partitions p ON p.topic_id = g.topic_id AND p.partition_no = g.partition_no
LEFT JOIN (SELECT topic_id, partition_no, MIN(first_offset) AS first_open_offset
           FROM txn_partitions
           WHERE marker IS NULL AND first_offset IS NOT NULL
           GROUP BY topic_id, partition_no) o
       ON o.topic_id = g.topic_id AND o.partition_no = g.partition_no
ORDER BY g.group_id, t.name, g.partition_no;

-- metrics_transactional_id_states --
-- Transactional ids per coordinator state, how many of them hang (Ongoing past their own
-- timeout, as txn_broker.states.is_hanging) and the start of the oldest open transaction
SELECT state, COUNT(*) AS ids,
       SUM(CASE WHEN state = 'Ongoing' AND txn_start_ms IS NOT NULL AND txn_start_ms <> 0
                     AND txn_start_ms + timeout_ms < {now_ms} THEN 1 ELSE 0 END) AS hanging,
       MIN(CASE WHEN state IN ('Ongoing', 'PrepareCommit', 'PrepareAbort', 'PrepareEpochFence')
                     AND txn_start_ms <> 0 THEN txn_start_ms END) AS oldest_open_start_ms,
       {now_ms} AS now_ms
FROM transactional_ids
GROUP BY state
ORDER BY state;

-- metrics_settled_transaction_id --
-- The newest transaction id below which every transaction is decided and was started more
-- than :settle_ms ago (so no transaction with a smaller id can still appear: ids are taken
-- just before their row is written). Counts up to it never change again
SELECT MAX(x.txn_id) FROM transactions x
WHERE x.txn_id > :after_txn_id AND x.start_ms < {now_ms} - :settle_ms
  AND x.txn_id < COALESCE((SELECT MIN(o.txn_id) FROM transactions o WHERE o.outcome IS NULL), x.txn_id + 1);

-- metrics_transaction_outcomes --
-- Committed and aborted transaction instances after :after_txn_id, those up to
-- :settled_txn_id apart (the transactions table keeps one row per instance, so every
-- process counts the same; the exporter adds settled counts up once)
SELECT COUNT(CASE WHEN outcome = 'COMMIT' AND txn_id <= :settled_txn_id THEN 1 END) AS settled_committed,
       COUNT(CASE WHEN outcome = 'ABORT' AND txn_id <= :settled_txn_id THEN 1 END) AS settled_aborted,
       COUNT(CASE WHEN outcome = 'COMMIT' AND txn_id > :settled_txn_id THEN 1 END) AS recent_committed,
       COUNT(CASE WHEN outcome = 'ABORT' AND txn_id > :settled_txn_id THEN 1 END) AS recent_aborted
FROM transactions
WHERE txn_id > :after_txn_id;

-- metrics_gc_backlog --
-- What gc has still to do, as the database knows it: aborted transactions' segments not
-- purged yet, and queued object deletions past (due) or within (waiting) the delete delay
SELECT a.aborted_segments, a.aborted_bytes,
       (SELECT COUNT(*) FROM object_deletions WHERE requested_ms <= {now_ms} - :delay_ms) AS due_objects,
       (SELECT COUNT(*) FROM object_deletions WHERE requested_ms > {now_ms} - :delay_ms) AS waiting_objects,
       (SELECT MIN(requested_ms) FROM object_deletions) AS oldest_requested_ms,
       {now_ms} AS now_ms
FROM (SELECT COUNT(s.base_offset) AS aborted_segments,
             CAST(COALESCE(SUM(s.size_bytes), 0) AS BIGINT) AS aborted_bytes
      FROM txn_partitions tp
      JOIN segments s ON s.txn_id = tp.txn_id AND s.topic_id = tp.topic_id
                     AND s.partition_no = tp.partition_no AND s.purged_ms IS NULL
      WHERE tp.marker = 'ABORT' AND tp.purged_ms IS NULL) a;
-- compaction_candidates --
-- Area: segment compaction (txn_broker/compaction.py), to the end of this group.
-- One page of a partition's segments from an offset, in offset order, with their
-- transaction entry's marker and their age by the database clock
SELECT s.base_offset, s.record_count, s.size_bytes, s.object_key, s.txn_id, s.producer_id,
       s.max_timestamp_ms, s.purged_ms, s.row_count, s.schema_version, m.marker,
       {now_ms} - s.created_ms AS age_ms
FROM segments s
LEFT JOIN txn_partitions m
       ON m.txn_id = s.txn_id AND m.topic_id = s.topic_id AND m.partition_no = s.partition_no
WHERE s.topic_id = :topic_id AND s.partition_no = :partition_no AND s.base_offset >= :from_offset
ORDER BY s.base_offset
LIMIT :limit;

-- count_partitions --
-- How many partitions there are (compaction's progress)
SELECT COUNT(*) FROM partitions;

-- compaction_inputs_check --
-- The segments of a partition within an offset range, with their purge state, read under
-- the partition's row lock: the swap's compare-and-set on its inputs
SELECT base_offset, record_count, object_key, purged_ms FROM segments
WHERE topic_id = :topic_id AND partition_no = :partition_no
  AND base_offset >= :start_offset AND base_offset < :end_offset
ORDER BY base_offset;

-- queue_compacted_objects --
-- The swap: queue the objects of the merged segments for deletion (purged ones are queued
-- already, by gc)
INSERT INTO object_deletions (object_key, reason, requested_ms)
SELECT object_key, 'compacted', {now_ms} FROM segments
WHERE topic_id = :topic_id AND partition_no = :partition_no
  AND base_offset >= :start_offset AND base_offset < :end_offset AND purged_ms IS NULL
ON CONFLICT (object_key) DO NOTHING;

-- delete_compacted_segments --
-- The swap: drop the rows of the merged segments
DELETE FROM segments
WHERE topic_id = :topic_id AND partition_no = :partition_no
  AND base_offset >= :start_offset AND base_offset < :end_offset;

-- insert_compacted_segment --
-- The swap: register the merged segment over the whole offset span of its inputs
-- (producer id -1, no sequence, no transaction: it holds committed records only)
INSERT INTO segments (topic_id, partition_no, base_offset, record_count, size_bytes, object_key,
                      producer_id, producer_epoch, base_sequence, txn_id, max_timestamp_ms,
                      created_ms, row_count, schema_version)
VALUES (:topic_id, :partition_no, :base_offset, :record_count, :size_bytes, :object_key,
        -1, -1, -1, NULL, :max_timestamp_ms, {now_ms}, :row_count, :schema_version);
-- segment_written_ms --
-- Area: Iceberg tables (txn_broker/iceberg), to the end of this group.
-- When a segment was registered (how long its records have waited to be published)
SELECT created_ms FROM segments
WHERE topic_id = :topic_id AND partition_no = :partition_no AND base_offset = :base_offset;

-- delete_group_offsets --
-- DeleteGroups: every committed offset of a group
DELETE FROM group_offsets WHERE group_id = :group_id;

-- delete_group_offset --
-- OffsetDelete: a group's committed offset of one partition
DELETE FROM group_offsets WHERE group_id = :group_id AND topic_id = :topic_id AND partition_no = :partition_no;

-- partition_producers --
-- DescribeProducers: the producers with sequence state on a partition, and the first offset
-- of the transaction each has open there (NULL: none)
SELECT s.producer_id, s.producer_epoch, s.last_sequence, s.updated_ms,
       (SELECT MIN(o.first_offset) FROM txn_partitions o JOIN transactions t ON t.txn_id = o.txn_id
        WHERE o.topic_id = s.topic_id AND o.partition_no = s.partition_no AND o.marker IS NULL
          AND t.producer_id = s.producer_id AND t.end_ms IS NULL) AS txn_start_offset
FROM producer_state s
WHERE s.topic_id = :topic_id AND s.partition_no = :partition_no
ORDER BY s.producer_id;

-- first_segment_at_time --
-- The first segment of a partition (by offset) holding a record at or after a time: its
-- max_timestamp_ms is at least :timestamp_ms (segments purged by gc skipped)
SELECT s.base_offset, s.record_count
FROM segments s
WHERE s.topic_id = :topic_id AND s.partition_no = :partition_no
  AND s.max_timestamp_ms >= :timestamp_ms AND s.purged_ms IS NULL
ORDER BY s.base_offset
LIMIT 1;

-- kafka_acls --
-- Every Kafka ACL (each listener holds them all, read again every few seconds)
SELECT resource_type, resource_name, pattern_type, principal, host, operation, permission
FROM kafka_acls
ORDER BY resource_type, resource_name, pattern_type, principal, host, operation, permission;

-- insert_kafka_acl --
-- CreateAcls, `txn-broker acls add`: an ACL (one already there stays as it is)
INSERT INTO kafka_acls (resource_type, resource_name, pattern_type, principal, host, operation, permission,
                        created_ms)
VALUES (:resource_type, :resource_name, :pattern_type, :principal, :host, :operation, :permission, {now_ms})
ON CONFLICT DO NOTHING;

-- delete_kafka_acl --
-- DeleteAcls, `txn-broker acls remove`: one ACL
DELETE FROM kafka_acls
WHERE resource_type = :resource_type AND resource_name = :resource_name AND pattern_type = :pattern_type
  AND principal = :principal AND host = :host AND operation = :operation AND permission = :permission;

-- set_log_start --
-- Area: deleting records (txn_broker/log/record_deletion.py; Kafka's DeleteRecords), to the end of this group.
-- Move a partition's log start forward to any offset up to the high watermark, possibly
-- inside a segment (its row locked by lock_partition first)
UPDATE partitions SET log_start_offset = :new_start
WHERE topic_id = :topic_id AND partition_no = :partition_no
  AND log_start_offset < :new_start AND :new_start <= high_watermark;

-- queue_records_deleted_objects --
-- Queue the objects of the segments wholly below the new log start for deletion
INSERT INTO object_deletions (object_key, reason, requested_ms)
SELECT object_key, 'delete-records', {now_ms} FROM segments
WHERE topic_id = :topic_id AND partition_no = :partition_no
  AND base_offset < :new_start AND base_offset + record_count <= :new_start AND purged_ms IS NULL
ON CONFLICT (object_key) DO NOTHING;

-- delete_segments_below --
-- Drop the rows of the segments wholly below the new log start (one holding it stays)
DELETE FROM segments
WHERE topic_id = :topic_id AND partition_no = :partition_no
  AND base_offset < :new_start AND base_offset + record_count <= :new_start;

-- segment_base_at --
-- The base offset of the segment holding an offset (the log start may lie inside one), or
-- NULL when no segment starts at or below it
SELECT MAX(base_offset) FROM segments
WHERE topic_id = :topic_id AND partition_no = :partition_no AND base_offset <= :offset;
