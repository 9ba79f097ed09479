-- Every change of voucher_orders is announced on the channel `seckill_orders`
-- when its transaction commits (NOTIFY is transactional: a rolled-back change
-- announces nothing), so that each instance's status board forgets the answers it
-- holds for those orders (src/order/status/board.rs). One notification per 80
-- rows of a statement, each row as "id,issued_id,user_id,voucher_id" (issued_id
-- empty when none), rows joined by ';': under the 8,000-byte payload limit.
CREATE FUNCTION seckill_orders_changed() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    payload text;
BEGIN
    FOR payload IN
        SELECT string_agg(concat_ws(',', id, coalesce(issued_id::text, ''), user_id, voucher_id), ';')
          FROM (SELECT id, issued_id, user_id, voucher_id, (row_number() OVER ()) / 80 AS part FROM changed) rows
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
CREATE TRIGGER voucher_orders_deleted AFTER DELETE ON voucher_orders
    REFERENCING OLD TABLE AS changed FOR EACH STATEMENT EXECUTE FUNCTION seckill_orders_changed();
