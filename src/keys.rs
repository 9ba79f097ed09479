//! Every Redis key and RabbitMQ name, under the deployment's namespace.
//!
//! All keys of one voucher share the hash tag `{v<id>}` so that the order script,
//! which touches several of them, runs unchanged on Redis Cluster.

/// The Redis Cluster hash slot of a key: CRC16 (XMODEM) of its hash tag (the part
/// between the first `{` and the next `}`, if not empty) or of the whole key, mod 16384.
pub fn slot(key: &[u8]) -> u16 {
    crc16::State::<crc16::XMODEM>::calculate(hash_tag(key).unwrap_or(key)) % 16384
}

fn hash_tag(key: &[u8]) -> Option<&[u8]> {
    let open = key.iter().position(|&b| b == b'{')?;
    let rest = &key[open + 1..];
    let close = rest.iter().position(|&b| b == b'}')?;
    (close > 0).then(|| &rest[..close])
}

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

    /// The newest fencing token a Redis key protected by a lock has seen; in the
    /// key's hash slot (a key without a hash tag becomes the tag), so that
    /// `fenced_set.lua` runs on Redis Cluster too (a key with an empty tag `{}` and
    /// no other is not supported: it has no tag to share).
    pub fn fence_seen(&self, key: &str) -> String {
        match hash_tag(key.as_bytes()) {
            Some(_) => format!("{key}:fence-seen"),
            None => format!("{{{key}}}:fence-seen"),
        }
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

    #[test]
    fn slots_follow_the_hash_tag_as_redis_cluster_does() {
        // Values from `CLUSTER KEYSLOT` of Redis 7.
        assert_eq!(slot(b"foo"), 12182);
        assert_eq!(slot(b"{user1000}.following"), slot(b"{user1000}.followers"));
        assert_eq!(slot(b"{user1000}.following"), slot(b"user1000"));
        // An empty tag is no tag: the whole key is hashed.
        assert_eq!(
            slot(b"foo{}{bar}"),
            crc16::State::<crc16::XMODEM>::calculate(b"foo{}{bar}") % 16384
        );
        let k = Keys::new("ns");
        assert_eq!(slot(k.stock(7).as_bytes()), slot(k.outbox(7).as_bytes()));
        for key in ["ns:plain", "ns:{tag}:x"] {
            assert_eq!(slot(key.as_bytes()), slot(k.fence_seen(key).as_bytes()), "{key}");
        }
    }
}
