//! Unit tests of the key names, hash slots and shards.
use super::*;

#[test]
fn a_shard_key_names_its_tag() {
    let k = Keys::new("ns");
    assert_eq!(k.tag_of(&k.outbox(7)), Some("v7"));
    let tag = shard_tag(7, 3, 4);
    assert_eq!(k.tag_of(&k.seq_at(7, 3, 4)), Some(&*tag));
    assert_eq!(k.of_tag(&tag, "stock"), k.stock_at(7, 3, 4));
    assert_eq!(k.tag_of("other:{v7}:outbox"), None);
    assert_eq!(k.tag_of(&k.lock("job")), None);
}

#[test]
fn voucher_keys_share_one_hash_tag() {
    let k = Keys::new("ns");
    for key in [
        k.stock(7),
        k.buyers(7),
        k.admitted(7),
        k.orders(7),
        k.outbox(7),
        k.topups(7),
    ] {
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
        k.admitted_at(7, 3, 4),
        k.orders_at(7, 3, 4),
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
