-- 0003: transaction ids from a PostgreSQL sequence.
-- Every transaction start took the row lock of counters' txn_id row and held it until its
-- database transaction ended, so concurrent transaction starts queued behind each other.
-- On PostgreSQL the ids now come from the sequence txn_ids (nextval takes no row lock and
-- is never rolled back); SQLite, whose writers are serialised anyway, keeps the counter.
-- The sequence continues where the counter stopped, and the counter row is dropped on
-- PostgreSQL so that a client of an older version fails instead of allocating an id the
-- sequence also hands out (stop older clients before upgrading, as for every migration).

-- only on postgresql
CREATE SEQUENCE txn_ids AS BIGINT;

-- only on postgresql
SELECT setval('txn_ids', (SELECT COALESCE(MAX(value), 0) + 1 FROM counters WHERE name = 'txn_id'), false);

-- only on postgresql
DELETE FROM counters WHERE name = 'txn_id';
