-- A queue or raffle sale may cap the places and entries one client address takes
-- (`address_cap`; NULL: no cap). The address is the TCP peer, or the client a
-- trusted proxy names in X-Forwarded-For (SECKILL_TRUSTED_PROXIES).
ALTER TABLE seckill_vouchers ADD COLUMN address_cap INT CHECK (address_cap > 0);

-- Places and entries taken per address and sale, counted in the transaction that
-- makes the place or the entry (a row lock per address: concurrent joins from one
-- address are counted one after the other, so together they cannot pass the cap).
CREATE TABLE admission_addresses (
    voucher_id BIGINT NOT NULL REFERENCES vouchers (id),
    addr       TEXT NOT NULL,
    n          INT NOT NULL CHECK (n > 0),
    PRIMARY KEY (voucher_id, addr)
);
