//! pipeline:
//! `a_relay_of_an_older_epoch_cannot_acknowledge_after_a_repair_closed_the_shard`.
use super::*;

/// A relay whose publish was confirmed after a repair closed the shard (the
/// shard's repair fence is newer than the epoch the relay read the entries in) may
/// not acknowledge them: the repair's barrier found them in the outbox, and its
/// rebuild counts them from there. Dropping them would hide them from the rebuild,
/// which would reopen the sale with their units and without their shoppers' marks.
#[tokio::test]
async fn a_relay_of_an_older_epoch_cannot_acknowledge_after_a_repair_closed_the_shard() {
    let ns = Namespace::new().await;
    let redis = test_redis();
    let mut conn = redis.conn().await.unwrap();
    let stream = format!("{}:{{fenced}}:outbox", ns.name);
    let fence = seckill::keys::Keys::new(&ns.name)
        .repair_fence_of_outbox(&stream)
        .unwrap();
    let group = seckill::keys::RELAY_GROUP;
    let ack = redis::Script::new(include_str!("../../../lua/outbox_ack.lua"));
    let _: () = redis::cmd("XGROUP")
        .arg("CREATE")
        .arg(&stream)
        .arg(group)
        .arg("0")
        .arg("MKSTREAM")
        .query_async(&mut conn)
        .await
        .unwrap();
    for i in 0..3 {
        let _: String = redis::cmd("XADD")
            .arg(&stream)
            .arg("*")
            .arg("o")
            .arg(i)
            .query_async(&mut conn)
            .await
            .unwrap();
    }
    let read: redis::streams::StreamReadReply = redis::cmd("XREADGROUP")
        .arg("GROUP")
        .arg(group)
        .arg("relay-a")
        .arg("COUNT")
        .arg(10)
        .arg("STREAMS")
        .arg(&stream)
        .arg(">")
        .query_async(&mut conn)
        .await
        .unwrap();
    let ids: Vec<String> = read.keys[0].ids.iter().map(|e| e.id.clone()).collect();
    assert_eq!(ids.len(), 3);
    // A repair of epoch 5 closed the shard; the relay read the entries in epoch 4.
    let _: () = redis::cmd("SET")
        .arg(&fence)
        .arg(5)
        .query_async(&mut conn)
        .await
        .unwrap();
    let refused: i64 = ack
        .key(&stream)
        .key(&fence)
        .arg(group)
        .arg(4)
        .arg(&ids)
        .invoke_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(refused, -1, "an acknowledgement of an older epoch is refused");
    let len: i64 = redis::cmd("XLEN").arg(&stream).query_async(&mut conn).await.unwrap();
    assert_eq!(len, 3, "every entry stays for the rebuild");
    // The relay of the repair's epoch (or a later one) acknowledges as usual.
    let dropped: i64 = ack
        .key(&stream)
        .key(&fence)
        .arg(group)
        .arg(5)
        .arg(&ids)
        .invoke_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(dropped, 3);
    let _: () = redis::cmd("DEL")
        .arg(&stream)
        .arg(&fence)
        .query_async(&mut conn)
        .await
        .unwrap();
}
