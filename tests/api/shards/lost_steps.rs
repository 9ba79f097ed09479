//! A refill's step its replicas never received, then its master killed -9, on a
//! cluster of the test's own: the replicas of one master are stopped, a refill
//! runs whose give (or take) is on that master, the master is killed and a
//! replica that missed the step takes over. No unit is created or destroyed: the
//! sale sells exactly its stock, each shopper once, and the books balance.
//!
//! With `SECKILL_REDIS_WAIT_REPLICAS=1` (two replicas per master) the step is
//! not acknowledged, so the move stays pending and is replayed on the promoted
//! master. With no wait (one replica) the step is acknowledged and lost: the
//! shard that went back is found when the refill would answer "sold out" (it
//! reads the shards with this process's points) and the sale is repaired.
use super::*;
use crate::fixtures::OwnCluster;
use seckill::sales::refill::{refill, Refill};

const STOCK: i64 = 40;
const SHARDS: u32 = 8;

/// Which step of the move the killed master holds.
#[derive(Clone, Copy, Debug)]
enum Lost {
    Give,
    Take,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_give_its_replicas_missed_then_its_master_killed_creates_no_unit() {
    a_step_its_replicas_missed_then_its_master_killed(Lost::Give, 1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_take_its_replicas_missed_then_its_master_killed_destroys_no_unit() {
    a_step_its_replicas_missed_then_its_master_killed(Lost::Take, 1).await;
}

/// Without the wait, the take acknowledged and lost: before, the refill answered
/// "sold out" from the shard as it read (dry), and the sale sold 38 of 40.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_acknowledged_take_lost_with_its_master_is_found_before_sold_out() {
    a_step_its_replicas_missed_then_its_master_killed(Lost::Take, 0).await;
}

/// `wait`: `SECKILL_REDIS_WAIT_REPLICAS` (1 or 0), with one replica per master
/// more than it (a failover leaves the promoted master `wait` of them).
async fn a_step_its_replicas_missed_then_its_master_killed(lost: Lost, wait: u16) {
    let ns = Namespace::new().await;
    let cluster = tokio::task::spawn_blocking(move || OwnCluster::with_replicas(wait + 1))
        .await
        .unwrap();
    let app = TestApp::builder(&ns)
        .env("REDIS_URL", cluster.urls())
        .env("SECKILL_REDIS_CLUSTER", "true")
        .env("SECKILL_REDIS_WAIT_REPLICAS", wait.to_string())
        .env("SECKILL_REDIS_WAIT_TIMEOUT_MS", "1000")
        // Nothing completes the move left pending but the refills of the orders
        // after the failover (the pass that would is another way to the same end).
        .env("SECKILL_SHARD_RECOVERY_MS", "0")
        .spawn()
        .await;
    let v = app.sharded_sale(STOCK, SHARDS).await;
    let keys = ns.keys();
    let master_of = |k: u32| {
        cluster
            .master_of(&keys.stock_at(v, k, SHARDS))
            .expect("a master serves the shard")
    };
    // The master to kill: shard 0's. The other shards on it and off it.
    let doomed = master_of(0);
    let (on, off): (Vec<u32>, Vec<u32>) = (0..SHARDS).partition(|&k| master_of(k) == doomed);
    assert!(
        !off.is_empty(),
        "every shard on one master (try again: the tags are random)"
    );
    // Give: units can only come from the doomed master (every shard off it dry),
    // to a dry shard off it. Take: to a shard on it, every shard on it dry, so the
    // units come from off it.
    let (dry, to) = match lost {
        Lost::Give => (off.clone(), off[0]),
        Lost::Take => (on.clone(), on[0]),
    };
    let per_shard = STOCK / i64::from(SHARDS);
    let first: Vec<i64> = dry
        .iter()
        .flat_map(|&k| shoppers_of(k, SHARDS, per_shard as usize))
        .collect();
    // Orders wait for the replicas' first sync (503 until then).
    let before = sell_all(&app, v, &first, lost).await;
    assert_eq!(before.len(), first.len(), "the dry shards' own shoppers");
    assert_eq!(shard_stocks(&app, v).await[to as usize], 0);

    let replicas = cluster.replicas_of(doomed);
    assert_eq!(replicas.len(), usize::from(wait) + 1, "the replicas of {doomed}");
    // Each replica has had its first sync (a replica that never had one cannot
    // take over), then stops reading.
    let synced = eventually(Duration::from_secs(30), || async {
        let info = cluster.on_node(doomed, &["INFO", "replication"]);
        (info.matches("state=online").count() == replicas.len()).then_some(())
    })
    .await;
    assert!(synced.is_some(), "the replicas of {doomed} in sync within 30 s");
    for &r in &replicas {
        cluster.signal(r, "STOP");
    }
    // 32 MB on the doomed master's replication stream first, more than the
    // loopback sockets buffer: the step queued behind it reaches no replica
    // before the kill, even once they run again.
    let junk = format!("{}:junk", keys.stock_at(v, 0, SHARDS));
    let script = "redis.call('SET', KEYS[1], string.rep('x', 33554432)) return 1";
    assert_eq!(cluster.on_node(doomed, &["EVAL", script, "1", &junk]), "1");
    let state = app.app().state();
    let outcome = refill(&state.handles.redis, &keys, &state.recovery, v, SHARDS, to)
        .await
        .expect("the refill runs");
    match wait {
        0 => assert_eq!(
            outcome,
            Refill::Retry,
            "{lost:?} acknowledged, with no replica waited for"
        ),
        _ => assert_eq!(outcome, Refill::Unknown, "{lost:?} short of its replicas: left pending"),
    }
    // The fault proves itself: the step is on the master, and on no replica once
    // they have read all the master sent them (their link is down).
    let (keys_ref, on_ref) = (&keys, &on);
    let step = |port: u16| async move {
        let (keys, on) = (keys_ref, on_ref);
        let mut conn = redis::Client::open(format!("redis://127.0.0.1:{port}"))
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap();
        let _: () = redis::cmd("READONLY").query_async(&mut conn).await.unwrap();
        match lost {
            Lost::Give => {
                let mut n = 0;
                for &k in on {
                    let len: i64 = redis::cmd("HLEN")
                        .arg(keys.given_at(v, k, SHARDS))
                        .query_async(&mut conn)
                        .await
                        .unwrap();
                    n += len;
                }
                n
            }
            Lost::Take => redis::cmd("SCARD")
                .arg(keys.taken_at(v, to, SHARDS))
                .query_async(&mut conn)
                .await
                .unwrap(),
        }
    };
    assert_eq!(step(doomed).await, 1, "{lost:?} on the master");
    cluster.kill(doomed);
    for &r in &replicas {
        cluster.signal(r, "CONT");
    }
    for &r in &replicas {
        let down = eventually(Duration::from_secs(10), || async {
            cluster
                .on_node(r, &["INFO", "replication"])
                .contains("master_link_status:down")
                .then_some(())
        })
        .await;
        assert!(down.is_some(), "the replica on {r} saw its master go");
        assert_eq!(step(r).await, 0, "{lost:?} on no replica (the one on {r})");
    }
    println!("{lost:?}: on the master killed, on neither replica");
    let promoted = eventually(Duration::from_secs(30), || async {
        cluster
            .master_of(&keys.stock_at(v, 0, SHARDS))
            .filter(|now| *now != doomed)
    })
    .await;
    assert!(
        promoted.is_some(),
        "a replica took shard 0's slot over within 30 s: {}",
        replicas
            .iter()
            .map(|&r| cluster.log_tail(r, 400))
            .collect::<Vec<_>>()
            .join("\n---\n")
    );

    // Everyone else buys, retrying while the sale is closed or a move is pending:
    // first the shoppers of every shard but the receiver's (their refills find
    // the receiver dry: "sold out" must not be said of units it lost), then the
    // receiver's own.
    let rest: Vec<i64> = (1..=120).filter(|u| !first.contains(u)).collect();
    let (theirs, others): (Vec<i64>, Vec<i64>) = rest.iter().partition(|&&u| shard_of(u, SHARDS) == to);
    let mut after = sell_all(&app, v, &others, lost).await;
    after.extend(sell_all(&app, v, &theirs, lost).await);
    for u in after.keys() {
        assert!(!before.contains_key(u), "shopper {u} got two orders");
    }
    let sold = before.len() + after.len();
    assert_eq!(
        sold as i64, STOCK,
        "{lost:?}: exactly the stock sold, no unit created or destroyed"
    );
    let tally = Tally {
        acknowledged: before.values().chain(after.values()).copied().collect(),
        ..Default::default()
    };
    settle(&format!("{lost:?} lost in a failover"), &app, v, STOCK, &tally).await;
    app.shutdown().await;
}

/// Orders of `shoppers` in rounds until one is answered no 503 (within 60 s): the
/// 202s by shopper. Fails if a shopper gets two orders.
async fn sell_all(app: &TestApp, voucher: i64, shoppers: &[i64], lost: Lost) -> HashMap<i64, i64> {
    let mut sold: HashMap<i64, i64> = HashMap::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let pending: Vec<i64> = shoppers.iter().copied().filter(|u| !sold.contains_key(u)).collect();
        let round = sell_once(app, voucher, &pending).await;
        for (u, id) in round.accepted {
            assert!(sold.insert(u, id).is_none(), "shopper {u} got two orders");
        }
        if round.unavailable == 0 {
            return sold;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{lost:?}: {} answered 503 still after 60 s",
            round.unavailable
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// One round: the 202s by shopper, and how many were 503.
struct Round {
    accepted: HashMap<i64, i64>,
    unavailable: usize,
}

async fn sell_once(app: &TestApp, voucher: i64, shoppers: &[i64]) -> Round {
    use futures::StreamExt;
    let answers: Vec<(i64, StatusCode, Value)> = futures::stream::iter(shoppers.iter().map(|&u| async move {
        let (s, b) = app.order(voucher, u).await;
        (u, s, b)
    }))
    .buffer_unordered(64)
    .collect()
    .await;
    let mut round = Round {
        accepted: HashMap::new(),
        unavailable: 0,
    };
    for (u, s, b) in answers {
        match s {
            StatusCode::ACCEPTED => {
                round
                    .accepted
                    .insert(u, b["order_id"].as_str().unwrap().parse().unwrap());
            }
            StatusCode::SERVICE_UNAVAILABLE => round.unavailable += 1,
            _ => assert_eq!(s, StatusCode::CONFLICT, "{b}"),
        }
    }
    round
}
