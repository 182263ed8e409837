-- peakload schema: a run imported from another tool's results (`peakload import TOOL PATH`,
-- written by workers/imports/store.py in the transaction that writes the run): the tool, its
-- version, the file, and what was imported and what the tool did not record (read back by
-- analysis/store/imports.py for `report` and the Run page).
CREATE TABLE IF NOT EXISTS run_imports (
    run_id       uuid        PRIMARY KEY REFERENCES runs (run_id) ON DELETE CASCADE,
    imported_at  timestamptz NOT NULL DEFAULT now(),
    tool         text        NOT NULL,
    tool_version text,
    source       text        NOT NULL,   -- the file (or folder) imported, as given
    notes        jsonb       NOT NULL    -- latency_from, imported[], missing[], config{}
);
