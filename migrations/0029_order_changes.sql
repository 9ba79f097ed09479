-- Every change of voucher_orders is announced on the channel `seckill_orders`
-- when its transaction commits (NOTIFY is transactional: a rolled-back change
-- announces nothing), so that each instance's status board drops, or replaces,
-- the answers it holds for those orders (src/order/status/board.rs). One
-- notification per 25 rows of a statement, as JSON: {"op": TG_OP, "rows": [[id,
-- issued_id, user_id, voucher_id, status, order_no, created_at, paid_at,
-- cancelled_at], ...]} (a row as the statement left it, or as it was for a
-- DELETE): under the 8,000-byte payload limit.
CREATE FUNCTION seckill_orders_changed() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    payload text;
BEGIN
    FOR payload IN
        SELECT json_build_object('op', TG_OP, 'rows', json_agg(json_build_array(
                   id, issued_id, user_id, voucher_id, status, order_no, created_at, paid_at, cancelled_at)))::text
          FROM (SELECT *, (row_number() OVER ()) / 25 AS part FROM changed) rows
         GROUP BY part
    LOOP
        PERFORM pg_notify('seckill_orders', payload);
    END LOOP;
    RETURN NULL;
END $$;

-- An UPDATE that changes a row's ids, shopper or sale (no path of the service
-- does) also announces the row as it was, as deleted: what named it goes too.
CREATE FUNCTION seckill_orders_rekeyed() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    payload text;
BEGIN
    FOR payload IN
        SELECT json_build_object('op', 'DELETE', 'rows', json_agg(json_build_array(
                   id, issued_id, user_id, voucher_id, status, order_no, created_at, paid_at, cancelled_at)))::text
          FROM (SELECT o.*, (row_number() OVER ()) / 25 AS part FROM old_rows o
                 WHERE NOT EXISTS (SELECT 1 FROM changed n
                                    WHERE (n.id, n.issued_id, n.user_id, n.voucher_id)
                                          IS NOT DISTINCT FROM (o.id, o.issued_id, o.user_id, o.voucher_id))) rows
         GROUP BY part
    LOOP
        PERFORM pg_notify('seckill_orders', payload);
    END LOOP;
    RETURN NULL;
END $$;

CREATE TRIGGER voucher_orders_inserted AFTER INSERT ON voucher_orders
    REFERENCING NEW TABLE AS changed FOR EACH STATEMENT EXECUTE FUNCTION seckill_orders_changed();
CREATE TRIGGER voucher_orders_updated AFTER UPDATE ON voucher_orders
    REFERENCING NEW TABLE AS changed FOR EACH STATEMENT EXECUTE FUNCTION seckill_orders_changed();
CREATE TRIGGER voucher_orders_rekeyed AFTER UPDATE ON voucher_orders
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS changed FOR EACH STATEMENT EXECUTE FUNCTION seckill_orders_rekeyed();
CREATE TRIGGER voucher_orders_deleted AFTER DELETE ON voucher_orders
    REFERENCING OLD TABLE AS changed FOR EACH STATEMENT EXECUTE FUNCTION seckill_orders_changed();
