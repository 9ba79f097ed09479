-- The rule of the foreign key voucher_orders.voucher_id -> vouchers (id), checked
-- once per statement instead of once per row.
--
-- Postgres checks a foreign key by running a query of its own for every inserted
-- row: inserting 200,000 orders took 1.55-1.80 s with the key, 0.99-1.09 s without
-- it, and 1.16-1.19 s with the triggers below (docs/PERFORMANCE.md), and the worker
-- inserts every accepted order. The rule stays whole:
--   * an insert fails with foreign_key_violation if a row names a voucher that
--     does not exist; it locks each voucher its rows name FOR KEY SHARE, as the
--     key's own check does, so a concurrent deletion of that voucher waits for it;
--   * an order's voucher_id never changes (stricter than the key, which allowed a
--     move to another voucher; nothing here ever moved one);
--   * a voucher that has orders cannot be deleted nor have its id changed; that
--     check runs after the voucher's row is locked, so it sees every order whose
--     insert held the lock;
--   * vouchers cannot be truncated while orders exist.
ALTER TABLE voucher_orders DROP CONSTRAINT voucher_orders_voucher_id_fkey;

CREATE FUNCTION voucher_orders_vouchers_exist() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    wanted BIGINT;
    locked BIGINT;
    missing BIGINT;
BEGIN
    SELECT count(DISTINCT voucher_id) INTO wanted FROM new_orders;
    -- Locked in id order, as every transaction here locks vouchers.
    SELECT count(*) INTO locked FROM (
        SELECT 1 FROM vouchers v
         WHERE v.id IN (SELECT voucher_id FROM new_orders)
         ORDER BY v.id
           FOR KEY SHARE
    ) l;
    IF locked < wanted THEN
        SELECT n.voucher_id INTO missing FROM new_orders n
         WHERE NOT EXISTS (SELECT 1 FROM vouchers v WHERE v.id = n.voucher_id)
         LIMIT 1;
        RAISE EXCEPTION 'insert or update on table "voucher_orders" violates foreign key constraint "voucher_orders_voucher_id_fkey"'
            USING ERRCODE = 'foreign_key_violation',
                  DETAIL = format('Key (voucher_id)=(%s) is not present in table "vouchers".', missing),
                  TABLE = 'voucher_orders',
                  CONSTRAINT = 'voucher_orders_voucher_id_fkey';
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER voucher_orders_vouchers_exist_on_insert
    AFTER INSERT ON voucher_orders
    REFERENCING NEW TABLE AS new_orders
    FOR EACH STATEMENT EXECUTE FUNCTION voucher_orders_vouchers_exist();

-- An order never moves to another voucher (no statement here changes voucher_id).
-- A row trigger with this WHEN costs an update that leaves voucher_id alone
-- nothing, and takes no lock: paying an order must not lock its voucher.
CREATE FUNCTION voucher_orders_keep_voucher() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'an order''s voucher_id never changes (order %: % -> %)', OLD.id, OLD.voucher_id, NEW.voucher_id
        USING ERRCODE = 'foreign_key_violation',
              TABLE = 'voucher_orders',
              CONSTRAINT = 'voucher_orders_voucher_id_fkey';
END
$$;

CREATE TRIGGER voucher_orders_keep_voucher
    BEFORE UPDATE OF voucher_id ON voucher_orders
    FOR EACH ROW WHEN (OLD.voucher_id IS DISTINCT FROM NEW.voucher_id)
    EXECUTE FUNCTION voucher_orders_keep_voucher();

CREATE FUNCTION vouchers_keep_ordered() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM voucher_orders WHERE voucher_id = OLD.id) THEN
        RAISE EXCEPTION 'update or delete on table "vouchers" violates foreign key constraint "voucher_orders_voucher_id_fkey" on table "voucher_orders"'
            USING ERRCODE = 'foreign_key_violation',
                  DETAIL = format('Key (id)=(%s) is still referenced from table "voucher_orders".', OLD.id),
                  TABLE = 'vouchers',
                  CONSTRAINT = 'voucher_orders_voucher_id_fkey';
    END IF;
    IF TG_OP = 'DELETE' THEN
        RETURN OLD;
    END IF;
    RETURN NEW;
END
$$;

CREATE TRIGGER vouchers_keep_ordered_on_delete
    BEFORE DELETE ON vouchers
    FOR EACH ROW EXECUTE FUNCTION vouchers_keep_ordered();

CREATE TRIGGER vouchers_keep_ordered_on_update
    BEFORE UPDATE OF id ON vouchers
    FOR EACH ROW WHEN (OLD.id IS DISTINCT FROM NEW.id)
    EXECUTE FUNCTION vouchers_keep_ordered();

-- Nor may vouchers be emptied by TRUNCATE while orders exist (the key refused that
-- too; nothing here truncates).
CREATE FUNCTION vouchers_keep_ordered_on_truncate() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM voucher_orders) THEN
        RAISE EXCEPTION 'cannot truncate table "vouchers": voucher_orders references it'
            USING ERRCODE = 'foreign_key_violation',
                  TABLE = 'vouchers',
                  CONSTRAINT = 'voucher_orders_voucher_id_fkey';
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER vouchers_keep_ordered_on_truncate
    BEFORE TRUNCATE ON vouchers
    FOR EACH STATEMENT EXECUTE FUNCTION vouchers_keep_ordered_on_truncate();
