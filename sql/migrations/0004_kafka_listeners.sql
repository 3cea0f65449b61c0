-- 0004: the Kafka-protocol listeners that are up (`txn-broker serve`), each with a heartbeat.
-- Metadata and FindCoordinator answer with the live ones, so that several listeners on one
-- database and storage act as the brokers of one cluster (docs/kafka-protocol.md).
CREATE TABLE kafka_listeners (
    node_id       INTEGER PRIMARY KEY,
    host          TEXT NOT NULL,
    port          INTEGER NOT NULL,
    heartbeat_ms  BIGINT NOT NULL,
    started_ms    BIGINT NOT NULL,
    UNIQUE (host, port)
);
