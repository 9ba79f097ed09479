-- The newest fencing token each protected resource has seen. A write protected by a
-- distributed lock raises it in the same transaction and is refused when its token
-- is older: a holder that stalled past its lease cannot overwrite its successor.
CREATE TABLE fencing_tokens (
    resource   TEXT        PRIMARY KEY,
    token      BIGINT      NOT NULL,
    updated_at TIMESTAMPTZ NOT NULL DEFAULT now()
);
