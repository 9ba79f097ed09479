//! [`Keys`]: the name of every Redis key and RabbitMQ object under one namespace.
use super::hash_slot::hash_tag;
use super::shard::shard_tag;

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
        self.shard(id, 0, 1, what)
    }

    fn shard(&self, id: i64, shard: u32, shards: u32, what: &str) -> String {
        format!("{}:{{{}}}:{}", self.ns, shard_tag(id, shard, shards), what)
    }

    /// [`Keys::stock`] of one shard of a sharded sale (shard 0 is [`Keys::stock`]).
    pub fn stock_at(&self, voucher_id: i64, shard: u32, shards: u32) -> String {
        self.shard(voucher_id, shard, shards, "stock")
    }

    /// [`Keys::buyers`] of one shard: the marks of the shoppers of that shard.
    pub fn buyers_at(&self, voucher_id: i64, shard: u32, shards: u32) -> String {
        self.shard(voucher_id, shard, shards, "buyers")
    }

    /// [`Keys::orders`] of one shard (the index versions before the `admitted`
    /// counter wrote; see there).
    pub fn orders_at(&self, voucher_id: i64, shard: u32, shards: u32) -> String {
        self.shard(voucher_id, shard, shards, "orders")
    }

    /// [`Keys::admitted`] of one shard.
    pub fn admitted_at(&self, voucher_id: i64, shard: u32, shards: u32) -> String {
        self.shard(voucher_id, shard, shards, "admitted")
    }

    /// [`Keys::returned`] of one shard.
    pub fn returned_at(&self, voucher_id: i64, shard: u32, shards: u32) -> String {
        self.shard(voucher_id, shard, shards, "returned")
    }

    /// [`Keys::topups`] of one shard (each shard adds its part of a top-up once).
    pub fn topups_at(&self, voucher_id: i64, shard: u32, shards: u32) -> String {
        self.shard(voucher_id, shard, shards, "topups")
    }

    /// [`Keys::outbox`] of one shard.
    pub fn outbox_at(&self, voucher_id: i64, shard: u32, shards: u32) -> String {
        self.shard(voucher_id, shard, shards, "outbox")
    }

    /// The sequence of one shard: `gen * 2^32 + writes`, bumped by every script that
    /// writes the shard and compared with what its callers saw (see
    /// [`crate::recovery`]).
    pub fn seq_at(&self, voucher_id: i64, shard: u32, shards: u32) -> String {
        self.shard(voucher_id, shard, shards, "seq")
    }

    /// The names of one shard's writes of its current generation, 8 bytes each at
    /// the write's place (see `lua/history.lua` and [`crate::recovery::history`]).
    pub fn hist_at(&self, voucher_id: i64, shard: u32, shards: u32) -> String {
        self.shard(voucher_id, shard, shards, "hist")
    }

    /// Key `what` of the shard whose hash tag is `tag` (`stock`, `buyers`, ...): the
    /// same names as the `*_at` builders give.
    pub fn of_tag(&self, tag: &str, what: &str) -> String {
        format!("{}:{{{}}}:{}", self.ns, tag, what)
    }

    /// The hash tag of the shard a key of this namespace belongs to (`v7` of
    /// `ns:{v7}:outbox`), if it is a shard's key.
    pub fn tag_of<'k>(&self, key: &'k str) -> Option<&'k str> {
        let rest = key.strip_prefix(self.ns.as_str())?.strip_prefix(":{")?;
        let (tag, _) = rest.split_once('}')?;
        tag.starts_with('v').then_some(tag)
    }

    /// Outbox entries of one shard a repair could not read as entries (corrupt),
    /// moved out of its outbox; each names the most orders it may hold (`bound`),
    /// units every later repair keeps off sale (see `crate::recovery`).
    pub fn quarantine_at(&self, voucher_id: i64, shard: u32, shards: u32) -> String {
        self.shard(voucher_id, shard, shards, "quarantine")
    }

    /// Move ledger of a donor shard: hash transfer id -> "dest:n" of the units it
    /// gave that the receiver may not have taken yet (units in transit).
    pub fn given_at(&self, voucher_id: i64, shard: u32, shards: u32) -> String {
        self.shard(voucher_id, shard, shards, "given")
    }

    /// Move ledger of a donor shard: set of the transfer ids completed (never given again).
    pub fn moved_at(&self, voucher_id: i64, shard: u32, shards: u32) -> String {
        self.shard(voucher_id, shard, shards, "moved")
    }

    /// Move ledger of a receiving shard: set of the transfer ids whose units it took.
    pub fn taken_at(&self, voucher_id: i64, shard: u32, shards: u32) -> String {
        self.shard(voucher_id, shard, shards, "taken")
    }

    /// The member of the registry of outboxes ([`Keys::outboxes`]) naming one
    /// shard's outbox: the voucher id for shard 0, `<id>.<k>.<shards>` for shard k.
    pub fn outbox_member(voucher_id: i64, shard: u32, shards: u32) -> String {
        match shard {
            0 => voucher_id.to_string(),
            k => format!("{voucher_id}.{k}.{shards}"),
        }
    }

    /// The outbox stream a registry member names (None if it is not one).
    pub fn outbox_of_member(&self, member: &str) -> Option<String> {
        let mut parts = member.split('.');
        let id: i64 = parts.next()?.parse().ok()?;
        match (parts.next(), parts.next(), parts.next()) {
            (None, _, _) => Some(self.outbox(id)),
            (Some(k), Some(shards), None) => Some(self.outbox_at(id, k.parse().ok()?, shards.parse().ok()?)),
            _ => None,
        }
    }

    /// Remaining stock of a flash-sale voucher (an integer).
    pub fn stock(&self, voucher_id: i64) -> String {
        self.voucher(voucher_id, "stock")
    }

    /// Hash user id -> "order_id:created_ms" of the shopper's live order (one per
    /// shopper; a mark written before the `admitted` counter is the order id alone).
    pub fn buyers(&self, voucher_id: i64) -> String {
        self.voucher(voucher_id, "buyers")
    }

    /// The orders Redis admitted for the voucher: an integer, grown by every call of
    /// the order script that admits any, set by a repair.
    pub fn admitted(&self, voucher_id: i64) -> String {
        self.voucher(voucher_id, "admitted")
    }

    /// Hash order id -> "user_id:created_ms" of every order admitted, as versions
    /// before the [`Keys::admitted`] counter wrote it (one more hash entry per
    /// order). Nothing writes it now: its count still adds to the admitted orders
    /// of a sale that was selling across the upgrade, and a repair deletes it.
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

    /// Set of the voucher ids that have an outbox stream: the relays read these even
    /// when their voucher cache is empty (Postgres down at start).
    pub fn outboxes(&self) -> String {
        format!("{}:outboxes", self.ns)
    }

    /// Hash of the moves between shards under way that versions before
    /// [`Keys::moves_of`] wrote, one for the whole namespace (read, never written:
    /// what they left is completed).
    pub fn moves(&self) -> String {
        format!("{}:moves", self.ns)
    }

    /// Hash of one sale's moves between shards under way (shard 0's hash tag):
    /// transfer id -> "voucher:shards:from:to:units", written before a move's first
    /// step and removed after its last (`voucher::refill`). A sale's own key: no
    /// master but the sale's own shards' stops its refills.
    pub fn moves_of(&self, voucher_id: i64) -> String {
        self.voucher(voucher_id, "moves")
    }

    /// A sale's refill lease (shard 0's hash tag): one refill of the sale at a time
    /// across instances (`voucher::refill`).
    pub fn refill_lease(&self, voucher_id: i64) -> String {
        self.voucher(voucher_id, "refill")
    }

    /// Pub/sub channel that tells every instance a voucher or its stock changed.
    pub fn events(&self) -> String {
        format!("{}:events", self.ns)
    }

    /// A distributed lock's hash (one hash tag per lock).
    pub fn lock(&self, name: &str) -> String {
        format!("{}:lock:{{{}}}", self.ns, name)
    }

    /// The counter of a lock's grants (same hash tag as the lock): its fencing
    /// tokens.
    pub fn lock_fence(&self, name: &str) -> String {
        format!("{}:lock:{{{}}}:fence", self.ns, name)
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

    /// The ranges of counter `scope` reserved so far, as this Redis saw them
    /// (`crate::numbers::witness`).
    pub fn counter_witness(&self, scope: &str) -> String {
        format!("{}:counter-witness:{{{}}}", self.ns, scope)
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
