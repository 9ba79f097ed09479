//! How a sale is cut into shards: the hash tag of each shard, the shard of each
//! shopper, and each shard's part of a number of units.
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
