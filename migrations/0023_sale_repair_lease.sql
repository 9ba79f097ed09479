-- Who repairs a sale now, and until when its lease lasts (src/recovery/repair.rs):
-- taken without waiting, renewed at each step of the repair; another process takes
-- the sale over once it ran out. Every step of a repair is fenced in Redis (the
-- generation, the exact sequence the previous step left), so a repairer that lost
-- its lease writes nothing; and a lease, unlike a session lock, does not outlive a
-- repairer that froze on a live connection.
--
-- `sale_states` also orders relays and repairs: a relay records an intent only
-- while the sale's generation is the one it read the orders in, holding the row
-- shared for that one statement; a repair takes the next generation by an UPDATE
-- of the row, so an intent is either committed before it (and the repair counts
-- its orders) or refused (and the relay settles each order itself:
-- src/outbox/relay/late.rs).
ALTER TABLE sale_states
    ADD COLUMN repairer     TEXT,
    ADD COLUMN repair_until TIMESTAMPTZ;
