-- peakload schema, part 2: TimescaleDB where the server offers it; a no-op on plain PostgreSQL.
-- Hypertables and time_bucket are in every build; compression, retention and continuous
-- aggregates depend on the license and are switched on by the migrator, which reports them.
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_available_extensions WHERE name = 'timescaledb') THEN
        BEGIN
            CREATE EXTENSION IF NOT EXISTS timescaledb;
        EXCEPTION WHEN OTHERS THEN
            -- available but not preloaded (shared_preload_libraries): stay plain PostgreSQL
            RAISE NOTICE 'timescaledb not loadable: %', SQLERRM;
            RETURN;
        END;
        PERFORM create_hypertable('requests', 'scheduled_at',
            chunk_time_interval => interval '1 hour', if_not_exists => true, migrate_data => true);
        PERFORM create_hypertable('ticks', 't',
            chunk_time_interval => interval '1 day', if_not_exists => true, migrate_data => true);
        PERFORM create_hypertable('server_metrics', 't',
            chunk_time_interval => interval '1 day', if_not_exists => true, migrate_data => true);
    END IF;
END
$$;
