-- Admin POSTs (create a voucher, top up its stock) sent with an Idempotency-Key:
-- the first request and its answer, so that a retry after a lost answer or a
-- double click gets that answer again instead of a second voucher or the units
-- added twice.
--
-- The row is inserted in the transaction that makes the change. A concurrent
-- request with the same key blocks on the primary key until that transaction
-- ends; then it finds the row (the change committed) or takes the key itself (it
-- rolled back). So two requests with one key never both apply.
--
-- `request` is the method, path and body of the first request, as canonical JSON
-- text (members sorted, so spelling aside from order counts); a key reused for a
-- different request is refused. Text, not jsonb: jsonb cannot hold the NUL
-- character (`\u0000`) that an extra member of a body may carry.
-- `response` is null until the answer is known: a top-up's answer is read after
-- its commit, and a retry that finds it null (the first request still finishing,
-- or gone) rebuilds it from `top_up_id`.
CREATE TABLE idempotency_keys (
    admin_id   BIGINT      NOT NULL,
    key        TEXT        NOT NULL,
    request    TEXT        NOT NULL,
    status     SMALLINT,
    response   JSONB,
    top_up_id  BIGINT      REFERENCES stock_topups (id) ON DELETE CASCADE,
    created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (admin_id, key)
);
