-- 0002: garbage collection.
-- Segments of aborted transactions can be purged: their objects are deleted while their
-- rows stay, so their offsets remain occupied; readers at every isolation level skip them.
-- Objects whose metadata is gone (purged, or truncated by retention) wait in
-- object_deletions until readers that planned a fetch before the change are done
-- (Kafka's file.delete.delay.ms).

ALTER TABLE segments ADD COLUMN purged_ms BIGINT;

ALTER TABLE txn_partitions ADD COLUMN purged_ms BIGINT;

CREATE INDEX txn_partitions_unpurged_aborts ON txn_partitions (txn_id)
    WHERE marker = 'ABORT' AND purged_ms IS NULL;

CREATE TABLE object_deletions (
    object_key    TEXT PRIMARY KEY,
    reason        TEXT NOT NULL,
    requested_ms  BIGINT NOT NULL
);
CREATE INDEX object_deletions_by_age ON object_deletions (requested_ms);
