-- Cheaper index entries for every persisted order (issue 23: Postgres's cost per
-- order). A profile of the worker's drain found more than half of Postgres's time
-- in inserting the orders' index entries, and the worker inserts every accepted
-- order. Inserting 200,000 orders with psql on a copy of the schema, three runs
-- each (docs/PERFORMANCE.md): 2.43 s before, 2.13 s with the one index of 2.
-- below, 1.65 s with 1. as well (medians).
--
-- The file runs as one transaction. Its first statement takes voucher_orders'
-- ACCESS EXCLUSIVE lock, which the rest would take anyway: a migration that
-- started with a weaker lock and raised it later could deadlock with a
-- cancellation that reads the table and then updates it.

-- 1. Business numbers compared byte by byte. Under a database collation such as
--    C.UTF-8 or en_US.UTF-8, every comparison in the unique index on order_no went
--    through strcoll(). Uniqueness does not change: a deterministic collation, as
--    every libc one is, calls two strings equal only when their bytes are. Nothing
--    sorts orders by number. The index is rebuilt; the rows stay as they are.
ALTER TABLE voucher_orders ALTER COLUMN order_no TYPE TEXT COLLATE "C";

-- 2. One index on a voucher's orders where there were two. Every order had an
--    entry in both
--      voucher_orders_one_per_shopper (user_id, voucher_id) WHERE status IN ('created', 'paid'), unique
--      voucher_orders_voucher_idx     (voucher_id, status)
--    This one is unique over (voucher_id, user_id, 0) for a live order and over
--    (voucher_id, user_id, id) for a cancelled or failed one, so:
--    * a shopper still has at most one live order per voucher: two live orders of
--      one shopper have the same key; an order that is not live has a key of its
--      own (its id, never 0), and a cancelled order frees its shopper's key;
--    * every order of a voucher, whatever its status, is in it under the voucher's
--      id first, with its status (INCLUDE): the counts by voucher and status (the
--      stats, the audit's books) and the check for a shopper's live order read
--      the index alone, as they read the two old ones;
--    * a shopper's order for a voucher is found by its two leading columns.
--    `INSERT ... ON CONFLICT DO NOTHING` (no target) skips a row any unique index
--    refuses, this one as the old one.
CREATE UNIQUE INDEX voucher_orders_live_per_shopper
    ON voucher_orders (voucher_id, user_id, (CASE WHEN status IN ('created', 'paid') THEN 0 ELSE id END))
    INCLUDE (status);
DROP INDEX voucher_orders_one_per_shopper;
DROP INDEX voucher_orders_voucher_idx;
-- The count of a sale's timed-out orders (src/voucher/live.rs, polled by the live
-- console) reads cancelled orders only. No order is inserted cancelled, so this
-- index costs the worker nothing; a cancellation (an update that writes index
-- entries anyway) adds one.
CREATE INDEX voucher_orders_cancelled_idx ON voucher_orders (voucher_id) WHERE status = 'cancelled';
