//! Every Redis key and RabbitMQ name, under the deployment's namespace.
//!
//! All keys of one voucher share the hash tag `{v<id>}` so that the order script,
//! which touches several of them, runs unchanged on Redis Cluster.

/// Builds names under one namespace (`SECKILL_NAMESPACE`).
#[derive(Clone, Debug)]
pub struct Keys {
    ns: String,
}

impl Keys {
    pub fn new(ns: &str) -> Self {
        Self { ns: ns.to_owned() }
    }

    pub fn namespace(&self) -> &str {
        &self.ns
    }

    fn voucher(&self, id: i64, what: &str) -> String {
        format!("{}:{{v{}}}:{}", self.ns, id, what)
    }

    /// Remaining stock of a flash-sale voucher (an integer).
    pub fn stock(&self, voucher_id: i64) -> String {
        self.voucher(voucher_id, "stock")
    }

    /// Hash user id -> order id of the shopper's current order (one per shopper).
    pub fn buyers(&self, voucher_id: i64) -> String {
        self.voucher(voucher_id, "buyers")
    }

    /// Hash order id -> "user_id:created_ms" of every order accepted for the voucher.
    pub fn orders(&self, voucher_id: i64) -> String {
        self.voucher(voucher_id, "orders")
    }

    /// Set of order ids whose unit was put back on sale (returns are idempotent).
    pub fn returned(&self, voucher_id: i64) -> String {
        self.voucher(voucher_id, "returned")
    }

    /// Set of top-up ids whose units were added to the stock (top-ups are idempotent).
    pub fn topups(&self, voucher_id: i64) -> String {
        self.voucher(voucher_id, "topups")
    }

    /// The voucher's outbox stream, read by the relay's consumer group.
    pub fn outbox(&self, voucher_id: i64) -> String {
        self.voucher(voucher_id, "outbox")
    }

    /// The epoch of the newest repair that rewrote the voucher's state (a fence that
    /// a stalled repairer's late writes cannot pass).
    pub fn repair_fence(&self, voucher_id: i64) -> String {
        self.voucher(voucher_id, "repair")
    }

    /// Set of the voucher ids that have an outbox stream: the relays read these even
    /// when their voucher cache is empty (Postgres down at start).
    pub fn outboxes(&self) -> String {
        format!("{}:outboxes", self.ns)
    }

    /// The epoch whose state this Redis holds (written by the last repair); it
    /// must equal the epoch Postgres records for the server.
    pub fn epoch(&self) -> String {
        format!("{}:epoch", self.ns)
    }

    /// Pub/sub channel that tells every instance a voucher or its stock changed.
    pub fn events(&self) -> String {
        format!("{}:events", self.ns)
    }

    /// The value and ceiling keys of one durable daily counter in one epoch: a new
    /// epoch (after Redis went back in time) starts new keys, which start from the
    /// durable mark, above every value issued before.
    pub fn counter(&self, scope: &str, epoch: i64) -> (String, String) {
        (
            format!("{}:ctr:{{{}}}:e{}:value", self.ns, scope, epoch),
            format!("{}:ctr:{{{}}}:e{}:ceiling", self.ns, scope, epoch),
        )
    }

    /// A distributed lock's hash (one hash tag per lock).
    pub fn lock(&self, name: &str) -> String {
        format!("{}:lock:{{{}}}", self.ns, name)
    }

    /// The counter of a lock's grants in one Redis epoch (same hash tag as the lock).
    pub fn lock_fence(&self, name: &str, epoch: i64) -> String {
        format!("{}:lock:{{{}}}:fence:e{}", self.ns, name, epoch)
    }

    /// Pub/sub channel on which a release wakes the lock's waiters (payload: name).
    pub fn lock_released(&self) -> String {
        format!("{}:lock-released", self.ns)
    }

    /// The newest fencing token a Redis key protected by a lock has seen.
    pub fn fence_seen(&self, key: &str) -> String {
        format!("{key}:fence-seen")
    }

    /// Exchange the relay publishes order batches to.
    pub fn orders_exchange(&self) -> String {
        format!("{}.orders", self.ns)
    }

    /// Durable queue the worker consumes.
    pub fn orders_queue(&self) -> String {
        format!("{}.orders", self.ns)
    }

    /// Dead-letter exchange and queue for messages that cannot be persisted.
    pub fn dead_exchange(&self) -> String {
        format!("{}.orders.dlx", self.ns)
    }

    pub fn dead_queue(&self) -> String {
        format!("{}.orders.dead", self.ns)
    }

    /// Payment timeouts: messages wait in the delay queue until they expire, then
    /// the timeout exchange routes them to the timeout queue.
    pub fn delay_queue(&self) -> String {
        format!("{}.orders.delay", self.ns)
    }

    pub fn timeout_exchange(&self) -> String {
        format!("{}.orders.timeout", self.ns)
    }

    pub fn timeout_queue(&self) -> String {
        format!("{}.orders.timeout", self.ns)
    }
}

/// The consumer group every relay reads outbox streams with.
pub const RELAY_GROUP: &str = "relay";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn voucher_keys_share_one_hash_tag() {
        let k = Keys::new("ns");
        for key in [k.stock(7), k.buyers(7), k.orders(7), k.outbox(7), k.topups(7)] {
            assert!(key.starts_with("ns:{v7}:"), "{key}");
        }
        assert_ne!(k.stock(7), k.stock(70));
    }
}
