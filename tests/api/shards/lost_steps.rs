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
use super::doomed::{node, on_a_cluster, sell_all, Doomed};
use super::*;
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

/// `wait`: `SECKILL_REDIS_WAIT_REPLICAS` (1 or 0).
async fn a_step_its_replicas_missed_then_its_master_killed(lost: Lost, wait: u16) {
    let what = format!("{lost:?}");
    let ns = Namespace::new().await;
    // Nothing completes the move left pending but the refills of the orders
    // after the failover (the pass that would is another way to the same end).
    let (cluster, app) = on_a_cluster(&ns, wait, &[("SECKILL_SHARD_RECOVERY_MS", "0")]).await;
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
    let before = sell_all(&app, v, &first, &what).await;
    assert_eq!(before.len(), first.len(), "the dry shards' own shoppers");
    assert_eq!(shard_stocks(&app, v).await[to as usize], 0);

    let fault = Doomed::stop_replicas(&cluster, &keys.stock_at(v, 0, SHARDS), usize::from(wait) + 1).await;
    let state = app.app().state();
    let outcome = refill(&state.handles.redis, &keys, &state.recovery, v, SHARDS, to)
        .await
        .expect("the refill runs");
    match wait {
        0 => assert_eq!(
            outcome,
            Refill::Retry,
            "{what} acknowledged, with no replica waited for"
        ),
        _ => assert_eq!(outcome, Refill::Unknown, "{what} short of its replicas: left pending"),
    }
    let (keys_ref, on_ref) = (&keys, &on);
    let step = |port: u16| async move {
        let mut conn = node(port).await;
        let mut n = 0;
        match lost {
            Lost::Give => {
                for &k in on_ref {
                    let len: i64 = redis::cmd("HLEN")
                        .arg(keys_ref.given_at(v, k, SHARDS))
                        .query_async(&mut conn)
                        .await
                        .unwrap();
                    n += len;
                }
            }
            Lost::Take => {
                n = redis::cmd("SCARD")
                    .arg(keys_ref.taken_at(v, to, SHARDS))
                    .query_async(&mut conn)
                    .await
                    .unwrap();
            }
        }
        n
    };
    fault.kill(&what, step).await;

    // Everyone else buys, retrying while the sale is closed or a move is pending:
    // first the shoppers of every shard but the receiver's (their refills find
    // the receiver dry: "sold out" must not be said of units it lost), then the
    // receiver's own.
    let rest: Vec<i64> = (1..=120).filter(|u| !first.contains(u)).collect();
    let (theirs, others): (Vec<i64>, Vec<i64>) = rest.iter().partition(|&&u| shard_of(u, SHARDS) == to);
    let mut after = sell_all(&app, v, &others, &what).await;
    // The receiver's own shoppers are not needed to find its units: had the
    // others been told "sold out" with units lost on it, one of the receiver's
    // shoppers reaching Redis later (past the sold-out flag) would find the loss.
    assert_eq!(
        (before.len() + after.len()) as i64,
        STOCK,
        "{what}: the whole stock sold to the other shards' shoppers"
    );
    after.extend(sell_all(&app, v, &theirs, &what).await);
    for u in after.keys() {
        assert!(!before.contains_key(u), "shopper {u} got two orders");
    }
    let sold = before.len() + after.len();
    assert_eq!(
        sold as i64, STOCK,
        "{what}: exactly the stock sold, no unit created or destroyed"
    );
    let tally = Tally {
        acknowledged: before.values().chain(after.values()).copied().collect(),
        ..Default::default()
    };
    settle(&format!("{what} lost in a failover"), &app, v, STOCK, &tally).await;
    app.shutdown().await;
}
