-- The outbox format fence (src/outbox/format.rs): which formats of outbox entry
-- the live processes read, and which one writers may write.
--
-- Every process that reads outbox entries (all of them: each relays or repairs)
-- announces the newest format it reads in `outbox_processes` before it reads one,
-- and takes its row away when it stops. `outbox_format` holds the one decision
-- writers follow: the newest format they may write. It is raised only to a format
-- every announced process reads, in a transaction that holds the decision's row;
-- an announcement holds the same row and is refused when the decision is already
-- past what the process reads. So no entry is ever written in a format a live,
-- announced process cannot read. A process that crashed keeps its row, and holds
-- the decision back, until an operator declares it gone
-- (`seckill outbox-formats forget PROCESS`).
CREATE TABLE outbox_format (
    only_row   BOOLEAN PRIMARY KEY DEFAULT true CHECK (only_row),
    writes     INTEGER NOT NULL CHECK (writes >= 1),
    decided_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    decided_by TEXT NOT NULL
);

INSERT INTO outbox_format (writes, decided_by) VALUES (1, 'migration 0024');

CREATE TABLE outbox_processes (
    process    TEXT PRIMARY KEY,
    reads      INTEGER NOT NULL CHECK (reads >= 1),
    mode       TEXT NOT NULL,
    host       TEXT NOT NULL,
    pid        INTEGER NOT NULL,
    started_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    seen_at    TIMESTAMPTZ NOT NULL DEFAULT now()
);
