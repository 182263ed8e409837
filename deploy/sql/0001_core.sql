-- peakload schema, part 1: the tables every store has (plain PostgreSQL 15+ or TimescaleDB).
-- This file is the contract between workers/ (which writes) and analysis/ (which reads).
-- Offsets named *_ns are nanoseconds on the measuring host's monotonic clock from the request's
-- scheduled time; chunk_offsets_us are microseconds from the moment the request was sent.

CREATE TABLE IF NOT EXISTS runs (
    run_id            uuid PRIMARY KEY,
    name              text        NOT NULL,
    mode              text        NOT NULL DEFAULT 'local',      -- local | distributed
    status            text        NOT NULL DEFAULT 'pending',
        -- pending | running | completed | partial | aborted | failed
    valid             boolean,                                   -- NULL until the run ends
    invalid_reasons   jsonb       NOT NULL DEFAULT '[]'::jsonb,
    status_reason     text,
    api               text        NOT NULL,
    target_url        text        NOT NULL,                      -- no credentials, no query
    model             text        NOT NULL,
    labels            jsonb       NOT NULL DEFAULT '{}'::jsonb,  -- the test matrix
    spec              jsonb       NOT NULL,                      -- validated spec, no secrets
    schedule_name     text,
    store_content     boolean     NOT NULL DEFAULT false,
    created_at        timestamptz NOT NULL DEFAULT now(),
    started_at        timestamptz,
    ended_at          timestamptz,
    requests_scheduled bigint,
    CONSTRAINT runs_status_ck CHECK
        (status IN ('pending', 'running', 'completed', 'partial', 'aborted', 'failed'))
);
CREATE INDEX IF NOT EXISTS runs_created_idx ON runs (created_at DESC);
CREATE INDEX IF NOT EXISTS runs_schedule_idx ON runs (schedule_name, created_at DESC);

CREATE TABLE IF NOT EXISTS run_levels (
    run_id       uuid    NOT NULL REFERENCES runs (run_id) ON DELETE CASCADE,
    level        integer NOT NULL,                  -- 0-based index in the run's load profile
    kind         text    NOT NULL,                  -- concurrency | rate | trace | ramp
    value        double precision NOT NULL,         -- users, or requests/s for the whole run
    duration_s   double precision NOT NULL,
    warmup_s     double precision NOT NULL DEFAULT 0,
    cooldown_s   double precision NOT NULL DEFAULT 0,
    started_at   timestamptz,
    ended_at     timestamptz,
    PRIMARY KEY (run_id, level)
);

CREATE TABLE IF NOT EXISTS shards (
    run_id               uuid    NOT NULL REFERENCES runs (run_id) ON DELETE CASCADE,
    shard_id             text    NOT NULL,
    region               text    NOT NULL,
    slot                 integer NOT NULL DEFAULT 0,
    state                text    NOT NULL DEFAULT 'planned',
        -- planned | claimed | ready | running | completed | interrupted | timed_out | aborted | failed
    state_reason         text,
    plan                 jsonb   NOT NULL,
    host                 text,
    pid                  integer,
    fencing_token        bigint  NOT NULL DEFAULT 0,
    lease_owner          text,
    lease_expires_at     timestamptz,
    clock_offset_ns      bigint,          -- reference clock minus this worker's wall clock
    clock_uncertainty_ns bigint,          -- half the round trip of the best probe
    start_skew_ns        bigint,          -- actual start minus the coordinated start
    started_at           timestamptz,
    ended_at             timestamptz,
    requests_scheduled   bigint  NOT NULL DEFAULT 0,
    records_written      bigint  NOT NULL DEFAULT 0,
    valid                boolean,
    invalid_reasons      jsonb   NOT NULL DEFAULT '[]'::jsonb,
    PRIMARY KEY (run_id, shard_id)
);

CREATE TABLE IF NOT EXISTS requests (
    request_id        uuid        NOT NULL,
    scheduled_at      timestamptz NOT NULL,
    run_id            uuid        NOT NULL,
    shard_id          text        NOT NULL,
    region            text        NOT NULL,
    level             integer     NOT NULL,
    idx               bigint      NOT NULL,
    phase             text        NOT NULL,
    attempt           smallint    NOT NULL DEFAULT 0,
    session_id        integer,
    turn              integer,
    outcome           text        NOT NULL,
    http_status       smallint,
    error_phase       text,
    error_detail      text,
    sent_ns           bigint,
    headers_ns        bigint,
    first_token_ns    bigint,
    first_answer_ns   bigint,
    end_ns            bigint,
    prompt_tokens     integer,
    max_tokens        integer,
    output_tokens     integer     NOT NULL DEFAULT 0,
    reasoning_tokens  integer     NOT NULL DEFAULT 0,
    usage_prompt_tokens     integer,
    usage_completion_tokens integer,
    client_tokens     integer     NOT NULL DEFAULT 0,
    token_source      text        NOT NULL,
    chunk_offsets_us  integer[]   NOT NULL DEFAULT '{}',
    chunk_tokens      smallint[]  NOT NULL DEFAULT '{}',
    retry_after_s     real,
    prompt_text       text,
    response_text     text,
    PRIMARY KEY (request_id, scheduled_at)
);
CREATE INDEX IF NOT EXISTS requests_run_idx ON requests (run_id, scheduled_at);

CREATE TABLE IF NOT EXISTS ticks (
    t                     timestamptz NOT NULL,
    run_id                uuid        NOT NULL,
    shard_id              text        NOT NULL,
    region                text        NOT NULL,
    level                 integer     NOT NULL,
    in_flight             integer     NOT NULL,
    started               integer     NOT NULL,
    completed             integer     NOT NULL,
    errors                integer     NOT NULL,
    output_tokens         bigint      NOT NULL,
    loop_lag_ms_max       real        NOT NULL,
    loop_lag_ms_p99       real        NOT NULL,
    dispatch_delay_ms_max real        NOT NULL,
    cpu_percent           real        NOT NULL,
    rss_bytes             bigint      NOT NULL,
    PRIMARY KEY (run_id, shard_id, t)
);
CREATE INDEX IF NOT EXISTS ticks_run_idx ON ticks (run_id, t);

CREATE TABLE IF NOT EXISTS server_metrics (
    t       timestamptz      NOT NULL,
    run_id  uuid             NOT NULL,
    source  text             NOT NULL,   -- the scraped endpoint, without credentials
    name    text             NOT NULL,
    labels  jsonb            NOT NULL DEFAULT '{}'::jsonb,
    value   double precision NOT NULL
);
CREATE INDEX IF NOT EXISTS server_metrics_run_idx ON server_metrics (run_id, name, t);
