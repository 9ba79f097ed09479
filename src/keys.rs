//! Every Redis key and RabbitMQ name, under the deployment's namespace.
//!
//! All keys of one shard of a voucher share one hash tag so that the order script,
//! which touches several of them, runs unchanged on Redis Cluster: shard 0 (every
//! sale with `stock_shards` 1) uses `{v<id>}`, shard k >= 1 `{v<id>.<k>.<salt>}`
//! ([`shard_tag`]).

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

    /// [`Keys::orders`] of one shard: the orders of that shard's shoppers.
    pub fn orders_at(&self, voucher_id: i64, shard: u32, shards: u32) -> String {
        self.shard(voucher_id, shard, shards, "orders")
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

    /// The repair fence of the shard whose outbox stream is `outbox` (the same hash
    /// tag): for scripts that get an outbox's key and must refuse a stale caller.
    pub fn repair_fence_of_outbox(&self, outbox: &str) -> Option<String> {
        outbox.strip_suffix(":outbox").map(|base| format!("{base}:repair"))
    }

    /// [`Keys::repair_fence`] of one shard.
    pub fn repair_fence_at(&self, voucher_id: i64, shard: u32, shards: u32) -> String {
        self.shard(voucher_id, shard, shards, "repair")
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

    /// Hash of the moves between shards under way: transfer id ->
    /// "voucher:shards:from:to:units", written before a move's first step and
    /// removed after its last, so that the recovery pass reads one key per second
    /// whatever the number of sales and shards (`voucher::refill`).
    pub fn moves(&self) -> String {
        format!("{}:moves", self.ns)
    }

    /// A sale's refill lease (shard 0's hash tag): one refill of the sale at a time
    /// across instances (`voucher::refill`).
    pub fn refill_lease(&self, voucher_id: i64) -> String {
        self.voucher(voucher_id, "refill")
    }

    /// The epoch whose state this Redis holds (written by the last repair); it
    /// must equal the epoch Postgres records for the server.
    pub fn epoch(&self) -> String {
        format!("{}:epoch", self.ns)
    }

    /// The Redis clock: a number the epoch guard advances on every healthy check
    /// and Postgres records (`redis_clocks`); below the recorded value, Redis went
    /// back in time. Tagged with the epoch marker's name, so that both live in
    /// one slot (read together, on one master of a cluster).
    pub fn clock(&self) -> String {
        format!("{ns}:{{{ns}:epoch}}:clock", ns = self.ns)
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

/// The hash tag of shard `shard` of a sale of `shards` shards: `v<id>` for shard 0
/// (a sale of one shard keeps the keys it always had), `v<id>.<k>.<salt>` for shard
/// k >= 1, with the smallest salt that puts the tag's slot in the k-th part after
/// shard 0's of the slot space cut into `shards` equal parts. So the shards sit in
/// distinct, evenly spaced parts of the slot space, and a cluster whose masters own
/// equal contiguous ranges (as `redis-cli --cluster create` makes them) serves
/// `shards / masters` of them each, whatever the sale's id. A pure function of the
/// three numbers: fixed for the life of a sale. Memoised (a search costs about
/// `shards` CRC16s of a short string).
pub fn shard_tag(id: i64, shard: u32, shards: u32) -> std::sync::Arc<str> {
    use std::collections::HashMap;
    use std::sync::{Arc, LazyLock, RwLock};
    /// (voucher, shard, shards) -> tag.
    type Memo = HashMap<(i64, u32, u32), Arc<str>>;
    static TAGS: LazyLock<RwLock<Memo>> = LazyLock::new(Default::default);
    let base = format!("v{id}");
    if shard == 0 || shards <= 1 {
        return base.into();
    }
    if let Some(t) = TAGS.read().expect("tags poisoned").get(&(id, shard, shards)) {
        return t.clone();
    }
    let part = |tag: &str| crc16::State::<crc16::XMODEM>::calculate(tag.as_bytes()) as u32 % 16384 * shards / 16384;
    let want = (part(&base) + shard) % shards;
    let tag: Arc<str> = (0..1_000_000u32)
        .map(|salt| format!("{base}.{shard}.{salt}"))
        .find(|t| part(t) == want)
        .unwrap_or_else(|| format!("{base}.{shard}"))
        .into();
    TAGS.write()
        .expect("tags poisoned")
        .insert((id, shard, shards), tag.clone());
    tag
}

/// The shard of a sale with `shards` shards that serves `user_id`: splitmix64 of the
/// id, mod `shards`. Fixed forever: a live sale's shoppers must keep their shard
/// (their one-per-shopper mark and their orders live there).
pub fn shard_of(user_id: i64, shards: u32) -> u32 {
    if shards <= 1 {
        return 0;
    }
    let mut z = (user_id as u64).wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    (z % shards as u64) as u32
}

/// How `units` spread over `shards` shards: shard k gets units / shards, plus one
/// for the first units % shards shards (loading, top-ups, repairs).
pub fn split(units: i64, shards: u32) -> Vec<i64> {
    let s = shards.max(1) as i64;
    (0..s).map(|k| units / s + i64::from(k < units % s)).collect()
}

/// The consumer group every relay reads outbox streams with.
pub const RELAY_GROUP: &str = "relay";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_clock_lives_in_the_slot_of_the_epoch_marker() {
        let k = Keys::new("ns");
        assert!(k.clock().starts_with("ns:"), "{}", k.clock());
        assert_eq!(slot(k.clock().as_bytes()), slot(k.epoch().as_bytes()));
    }

    #[test]
    fn voucher_keys_share_one_hash_tag() {
        let k = Keys::new("ns");
        for key in [k.stock(7), k.buyers(7), k.orders(7), k.outbox(7), k.topups(7)] {
            assert!(key.starts_with("ns:{v7}:"), "{key}");
        }
        assert_ne!(k.stock(7), k.stock(70));
        assert_eq!(k.stock_at(7, 0, 4), k.stock(7));
        let tag = shard_tag(7, 3, 4);
        assert!(tag.starts_with("v7.3."), "{tag}");
        for key in [
            k.stock_at(7, 3, 4),
            k.given_at(7, 3, 4),
            k.taken_at(7, 3, 4),
            k.outbox_at(7, 3, 4),
        ] {
            assert!(key.starts_with(&format!("ns:{{{tag}}}:")), "{key}");
        }
    }

    #[test]
    fn shards_split_units_and_keep_their_shoppers() {
        assert_eq!(split(10, 4), vec![3, 3, 2, 2]);
        assert_eq!(split(2, 4), vec![1, 1, 0, 0]);
        assert_eq!(split(7, 1), vec![7]);
        assert_eq!(shard_of(12345, 1), 0);
        // Fixed values (computed once from this code): a change of the mix would
        // move a live sale's shoppers to another shard, where they could order again.
        let four: Vec<u32> = (1..=12).map(|u| shard_of(u, 4)).collect();
        assert_eq!(four, [1, 2, 1, 2, 2, 0, 3, 2, 0, 2, 1, 3]);
        assert_eq!(shard_of(123_456_789, 64), 57);
        assert_eq!(shard_of(-1, 6), 2);
        let mut seen = [0u32; 4];
        for u in 0..4000 {
            seen[shard_of(u, 4) as usize] += 1;
        }
        assert!(seen.iter().all(|&n| n > 800), "{seen:?}");
        let k = Keys::new("ns");
        assert_eq!(k.outbox_of_member(&Keys::outbox_member(7, 0, 6)), Some(k.outbox(7)));
        assert_eq!(
            k.outbox_of_member(&Keys::outbox_member(7, 5, 6)),
            Some(k.outbox_at(7, 5, 6))
        );
        assert_eq!(k.outbox_of_member("7.x"), None);
    }

    #[test]
    fn shards_sit_in_distinct_evenly_spaced_parts_of_the_slot_space() {
        for id in [1_i64, 2, 77, 123_456_789] {
            for shards in [2_u32, 3, 6, 64] {
                let parts: std::collections::HashSet<u32> = (0..shards)
                    .map(|k| slot(format!("{{{}}}", shard_tag(id, k, shards)).as_bytes()) as u32 * shards / 16384)
                    .collect();
                assert_eq!(parts.len(), shards as usize, "id {id}, {shards} shards");
            }
        }
        // Six shards over three masters owning equal thirds: two each.
        let masters = |s: u16| (s as u32 * 3 / 16384) as usize;
        let mut per = [0; 3];
        for k in 0..6 {
            per[masters(slot(format!("{{{}}}", shard_tag(1, k, 6)).as_bytes()))] += 1;
        }
        assert_eq!(per, [2, 2, 2]);
        // Fixed values (computed once from this code): a change of the search would
        // move a live sale's shard keys, and with them its stock and buyers.
        let tags: Vec<String> = (0..6).map(|k| shard_tag(1, k, 6).to_string()).collect();
        assert_eq!(tags, ["v1", "v1.1.1", "v1.2.18", "v1.3.1", "v1.4.0", "v1.5.3"]);
        assert_eq!(&*shard_tag(9, 2, 6), "v9.2.10");
        assert_eq!(&*shard_tag(7, 3, 4), "v7.3.2");
        assert_eq!(&*shard_tag(123_456_789, 63, 64), "v123456789.63.51");
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
