-- 0008: a committed offset's metadata string and leader epoch, as Kafka's OffsetCommit and
-- TxnOffsetCommit send them and OffsetFetch answers them (docs/kafka-protocol.md). The
-- metadata is kept as a JSON string literal (PostgreSQL's text cannot hold the NUL that
-- librdkafka ends it with). NULL: none was given (answered as "" and -1, as Kafka does).

ALTER TABLE group_offsets ADD COLUMN metadata TEXT;

ALTER TABLE group_offsets ADD COLUMN leader_epoch INTEGER;

ALTER TABLE txn_offsets ADD COLUMN metadata TEXT;

ALTER TABLE txn_offsets ADD COLUMN leader_epoch INTEGER;

-- Kafka's ACLs, enforced by every `txn-broker serve` of the database (txn_broker/kafka/acls.py):
-- Kafka's codes for the resource type, pattern type (3 literal, 4 prefixed), operation and
-- permission (2 deny, 3 allow).
CREATE TABLE kafka_acls (
    resource_type  INTEGER NOT NULL,
    resource_name  TEXT NOT NULL,
    pattern_type   INTEGER NOT NULL,
    principal      TEXT NOT NULL,
    host           TEXT NOT NULL,
    operation      INTEGER NOT NULL,
    permission     INTEGER NOT NULL,
    created_ms     BIGINT NOT NULL,
    PRIMARY KEY (resource_type, resource_name, pattern_type, principal, host, operation, permission)
);
