-- Least privilege on PostgreSQL: three NOLOGIN group roles; login users are made members.
--
--   txn_broker_owner    owns the schema's tables; runs the migrations (`txn-broker db upgrade`)
--   txn_broker_client   producers, consumers, the copier, the sweeps and gc: the DML that
--                       sql/queries.sql runs, on those tables only. No DDL, no TRUNCATE,
--                       no UPDATE or DELETE of the transaction log's history.
--   txn_broker_monitor  the UI and dashboards: SELECT only.
--
-- Idempotent; re-running it resets the privileges to exactly these. Run it as an
-- administrator once (it creates the roles if they are missing; no passwords here: login
-- users and their passwords are the deployment's, see txn_broker.roles.create_login and
-- docker/postgres/init-databases.sh), then after every migration as the owner or an
-- administrator: txn_broker.migrations.upgrade_db does this itself once the roles exist.
-- Before the migrations ran, the table grants are skipped (a table not yet there).
--
-- txn_broker.roles.apply_roles() may rename the three roles; psql runs the file as is:
--   psql -v ON_ERROR_STOP=1 -d txn_broker -f sql/roles.sql
-- (no colons in this file: it also runs through SQLAlchemy's text()).

DO $$
DECLARE
    role_name text;
BEGIN
    FOREACH role_name IN ARRAY ARRAY['txn_broker_owner', 'txn_broker_client', 'txn_broker_monitor'] LOOP
        IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = role_name) THEN
            EXECUTE format('CREATE ROLE %I NOLOGIN', role_name);
        END IF;
    END LOOP;
    -- only the database's owner (or a superuser) may grant CONNECT; others skip it
    IF pg_has_role(current_user, (SELECT datdba FROM pg_database WHERE datname = current_database()), 'MEMBER') THEN
        EXECUTE format('GRANT CONNECT ON DATABASE %I TO txn_broker_owner, txn_broker_client, txn_broker_monitor',
                       current_database());
    END IF;
END
$$;

-- Nobody creates objects in the schema but its owner (PostgreSQL 15's default, made explicit).
REVOKE CREATE ON SCHEMA public FROM PUBLIC;
GRANT USAGE ON SCHEMA public TO txn_broker_client, txn_broker_monitor;

-- Per-table privileges, derived from sql/queries.sql (tests/integration/test_roles.py
-- fails when a query needs a privilege missing here, or a privilege here is unused).
-- INSERT ... RETURNING and UPDATE ... WHERE read the table, so SELECT comes with them;
-- SELECT ... FOR UPDATE and INSERT ... ON CONFLICT DO UPDATE need UPDATE.
DO $$
DECLARE
    g record;
BEGIN
    FOR g IN SELECT * FROM (VALUES
        ('schema_migrations', 'SELECT'),
        ('counters',          'SELECT, UPDATE'),
        ('topics',            'SELECT, INSERT, UPDATE, DELETE'),
        ('topic_schemas',     'SELECT, INSERT'),
        ('topic_alterations', 'SELECT, INSERT'),
        ('partitions',        'SELECT, INSERT, UPDATE'),
        ('transactions',      'SELECT, INSERT, UPDATE'),
        ('segments',          'SELECT, INSERT, UPDATE, DELETE'),
        ('producer_state',    'SELECT, INSERT, UPDATE, DELETE'),
        ('transactional_ids', 'SELECT, INSERT, UPDATE, DELETE'),
        ('txn_state_log',     'SELECT, INSERT'),
        ('txn_partitions',    'SELECT, INSERT, UPDATE'),
        ('txn_offsets',       'SELECT, INSERT, UPDATE'),
        ('group_offsets',     'SELECT, INSERT, UPDATE, DELETE'),
        ('object_deletions',  'SELECT, INSERT, DELETE'),
        ('kafka_listeners',   'SELECT, INSERT, UPDATE, DELETE'),
        -- the default Iceberg catalog (pyiceberg SqlCatalog runs these, not queries.sql)
        ('iceberg_tables',    'SELECT, INSERT, UPDATE, DELETE'),
        ('iceberg_namespace_properties', 'SELECT, INSERT, UPDATE, DELETE')
    ) AS v(table_name, privileges)
    LOOP
        IF to_regclass(format('public.%I', g.table_name)) IS NOT NULL THEN
            EXECUTE format('REVOKE ALL ON TABLE public.%I FROM txn_broker_client, txn_broker_monitor',
                           g.table_name);
            EXECUTE format('GRANT %s ON TABLE public.%I TO txn_broker_client', g.privileges, g.table_name);
            EXECUTE format('GRANT SELECT ON TABLE public.%I TO txn_broker_monitor', g.table_name);
        END IF;
    END LOOP;
    -- transaction ids (migration 0003), whose nextval needs USAGE
    IF to_regclass('public.txn_ids') IS NOT NULL THEN
        EXECUTE 'REVOKE ALL ON SEQUENCE public.txn_ids FROM txn_broker_client, txn_broker_monitor';
        EXECUTE 'GRANT USAGE ON SEQUENCE public.txn_ids TO txn_broker_client';
    END IF;
    -- the monitor reads every table the owner creates, now and later
    EXECUTE 'GRANT SELECT ON ALL TABLES IN SCHEMA public TO txn_broker_monitor';
    IF pg_has_role(current_user, 'txn_broker_owner', 'MEMBER') THEN
        EXECUTE 'ALTER DEFAULT PRIVILEGES FOR ROLE txn_broker_owner IN SCHEMA public '
                'GRANT SELECT ON TABLES TO txn_broker_monitor';
    END IF;
END
$$;
