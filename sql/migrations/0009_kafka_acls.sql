-- 0009: Kafka's ACLs, enforced by every `txn-broker serve` of the database (txn_broker/kafka/acls.py):
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
