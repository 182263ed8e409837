-- peakload schema: people and what they say about runs (workers/store/users.py writes `users`,
-- workers/store/run_notes.py writes `run_tags` and `run_notes`; analysis/store reads them).
-- `users.password_hash` is a scrypt string (workers/store/passwords.py: `scrypt$...`), never a
-- password; NULL for a person who signs in through the organisation's OIDC provider only.
-- `runs.launched_by` names the person who started a run (`peakload run --owner`, the UI's
-- logged-in user, else the OS user); it is not `runs.owner`, the process holding a local run's
-- lease (0150). Additive only.

CREATE TABLE IF NOT EXISTS users (
    name          text        PRIMARY KEY,
    role          text        NOT NULL,                  -- viewer | runner | admin
    password_hash text,                                  -- NULL: OIDC sign-in only
    created_at    timestamptz NOT NULL DEFAULT now(),
    updated_at    timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT users_role_ck CHECK (role IN ('viewer', 'runner', 'admin'))
);

ALTER TABLE runs ADD COLUMN IF NOT EXISTS launched_by text;
CREATE INDEX IF NOT EXISTS runs_launched_by_idx ON runs (launched_by, created_at DESC);

CREATE TABLE IF NOT EXISTS run_tags (
    run_id    uuid        NOT NULL REFERENCES runs (run_id) ON DELETE CASCADE,
    tag       text        NOT NULL,
    tagged_by text,
    tagged_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (run_id, tag)
);
CREATE INDEX IF NOT EXISTS run_tags_tag_idx ON run_tags (tag);

CREATE TABLE IF NOT EXISTS run_notes (
    note_id    bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    run_id     uuid        NOT NULL REFERENCES runs (run_id) ON DELETE CASCADE,
    author     text,
    body       text        NOT NULL,                     -- scrubbed (loadgen.scrub) on write
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS run_notes_run_idx ON run_notes (run_id, created_at);
