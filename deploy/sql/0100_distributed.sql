-- peakload schema, distributed runs (owned by workers/coordinator, workers/leases, workers/schedules).
-- Additive only: columns on runs/shards for the coordinated start, abort and per-shard network
-- probes, and the tables of nightly schedules. Reference-clock values are ns since the Unix
-- epoch on the reference clock (Redis TIME); *_rtt_ns are round trips measured by warm-up probes.

ALTER TABLE runs ADD COLUMN IF NOT EXISTS start_at_ref_ns    bigint;       -- coordinated start
ALTER TABLE runs ADD COLUMN IF NOT EXISTS abort_requested_at timestamptz;  -- set by abort
ALTER TABLE runs ADD COLUMN IF NOT EXISTS abort_reason       text;
ALTER TABLE runs ADD COLUMN IF NOT EXISTS shards_expected    integer;

ALTER TABLE shards ADD COLUMN IF NOT EXISTS network_rtt_ns  bigint;   -- min TCP connect round trip
ALTER TABLE shards ADD COLUMN IF NOT EXISTS connect_ns      bigint;   -- median TCP connect time
ALTER TABLE shards ADD COLUMN IF NOT EXISTS clock_suspect   boolean NOT NULL DEFAULT false;
ALTER TABLE shards ADD COLUMN IF NOT EXISTS ready_at        timestamptz;
ALTER TABLE shards ADD COLUMN IF NOT EXISTS extra           jsonb   NOT NULL DEFAULT '{}'::jsonb;

CREATE TABLE IF NOT EXISTS schedules (
    name         text        PRIMARY KEY,
    cron         text        NOT NULL,               -- 5-field cron, evaluated in UTC
    spec         jsonb       NOT NULL,               -- RunSpec.public_dict(): no secrets
    spec_path    text,
    enabled      boolean     NOT NULL DEFAULT true,
    created_at   timestamptz NOT NULL DEFAULT now(),
    last_checked timestamptz                          -- the latest slot time already examined
);

-- One row per (schedule, slot). The INSERT claiming a slot is the lock: with two beat processes
-- only one INSERT succeeds, so each slot fires (or is recorded missed) exactly once.
CREATE TABLE IF NOT EXISTS schedule_slots (
    name       text        NOT NULL REFERENCES schedules (name) ON DELETE CASCADE,
    slot       timestamptz NOT NULL,
    state      text        NOT NULL,                 -- fired | missed | failed
    run_id     uuid,
    claimed_by text,
    claimed_at timestamptz NOT NULL DEFAULT now(),
    detail     text,
    CONSTRAINT schedule_slots_uq UNIQUE (name, slot),
    CONSTRAINT schedule_slots_state_ck CHECK (state IN ('fired', 'missed', 'failed'))
);
