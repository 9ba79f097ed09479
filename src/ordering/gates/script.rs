//! `lua/reserve.lua`'s side of a call: the orders it carries ([`Ask`]), its
//! arguments for them, and its reply, split and decoded into one [`Reservation`]
//! per order (and what stands of them when too few replicas acknowledged it).
use redis::Value;

/// What `reserve.lua` decided for one order.
#[derive(Debug, PartialEq, Eq)]
pub enum Reservation {
    Accepted {
        stock_left: i64,
    },
    SoldOut,
    /// The shopper has a live order for the sale: `order_id`, as the buyers hash
    /// names it (None only if the hash held something that is not an id).
    AlreadyOrdered {
        order_id: Option<i64>,
    },
    /// Admitted on the master, but fewer than the required replicas acknowledged it
    /// in time: not acknowledged to the shopper (503).
    NotReplicated {
        acked: i64,
    },
    /// The shard's master has fewer in-sync replicas than orders wait for (as last
    /// read, off the order path): refused before the script ran, nothing reserved.
    ReplicasBehind {
        in_sync: i64,
    },
    /// Redis has no stock for the shard (it lost it, or a repair closed it): refuse,
    /// never sell from nothing.
    NotLoaded,
    /// The shard is behind this process's floor: it went back in time and lost
    /// writes this process saw. The script closed it; refuse.
    Behind,
    /// The sale is closed in this process (a shard lost or behind, a repair under
    /// way): refuse without asking Redis.
    Closed,
}

/// One order at a gate.
#[derive(Clone, Copy, Debug)]
pub struct Ask {
    pub user_id: i64,
    pub order_id: i64,
    pub created_ms: i64,
}

/// `reserve.lua`'s arguments for `asks`: the voucher, the caller's points of the
/// shard (their sequences, their names) and the name of the call's write (see
/// [`crate::recovery::history`]), the outbox entry of every order
/// ("id,user,created_ms,..."), the outbox format to write (see
/// `crate::ordering::outbox::format`), then each order's user and mark ("id:created_ms").
/// The entry and the marks come from the same asks here, in one place: the script
/// writes them as they are when it accepts every order.
pub(super) fn script_args(
    voucher: i64,
    call: &crate::recovery::history::Call,
    format: u32,
    asks: &[Ask],
) -> Vec<Vec<u8>> {
    use std::fmt::Write;
    let mut args = Vec::with_capacity(6 + 2 * asks.len());
    args.push(voucher.to_string().into_bytes());
    args.push(call.seqs().into_bytes());
    args.push(call.names());
    args.push(call.name.to_vec());
    let mut entry = String::with_capacity(48 * asks.len());
    for (i, a) in asks.iter().enumerate() {
        if i > 0 {
            entry.push(',');
        }
        let _ = write!(entry, "{},{},{}", a.order_id, a.user_id, a.created_ms);
    }
    args.push(entry.into_bytes());
    args.push(format.to_string().into_bytes());
    for a in asks {
        args.push(a.user_id.to_string().into_bytes());
        args.push(format!("{}:{}", a.order_id, a.created_ms).into_bytes());
    }
    args
}

/// One order's answer from a call that fewer replicas than required acknowledged
/// (`acked`): what the call admitted, or decided because of what it admitted, is
/// not acknowledged. `ids`: the call's orders; `took`: whether it admitted any.
pub(super) fn short_of_replicas(
    decided: Reservation,
    acked: i64,
    ids: &std::collections::HashSet<i64>,
    took: bool,
) -> Reservation {
    match decided {
        Reservation::Accepted { .. } => Reservation::NotReplicated { acked },
        Reservation::AlreadyOrdered { order_id: Some(id) } if ids.contains(&id) => Reservation::NotReplicated { acked },
        Reservation::SoldOut if took => Reservation::NotReplicated { acked },
        other => other,
    }
}

/// The script's reply (see `lua/reserve.lua`).
pub(super) struct Reply {
    pub status: i64,
    /// The shard's sequence after the call.
    pub seq: i64,
    /// Whether the call wrote (its write at `seq` bears the call's name).
    pub wrote: bool,
    /// One per order.
    pub replies: Vec<Value>,
}

/// The script's reply: its status, the shard's sequence, whether it wrote, and
/// one reply per order (see `lua/reserve.lua`).
pub(super) fn split_reply(reply: Value) -> anyhow::Result<Reply> {
    let Value::Array(mut parts) = reply else {
        anyhow::bail!("reserve.lua returned {reply:?}, not a status, a sequence and the orders' replies");
    };
    if parts.len() < 3 {
        anyhow::bail!("reserve.lua returned {parts:?}, without a status, a sequence and whether it wrote");
    }
    let replies = parts.split_off(3);
    Ok(Reply {
        status: redis::from_redis_value_ref(&parts[0])?,
        seq: redis::from_redis_value_ref(&parts[1])?,
        wrote: redis::from_redis_value_ref::<i64>(&parts[2])? == 1,
        replies,
    })
}

/// One order's reply (see `lua/reserve.lua`).
pub(super) fn decode_reply(reply: Value) -> anyhow::Result<Reservation> {
    Ok(match reply {
        Value::Int(n) if n >= 0 => Reservation::Accepted { stock_left: n },
        Value::Int(-1) => Reservation::SoldOut,
        // {-2, the shopper's order id}.
        Value::Array(parts) if parts.first() == Some(&Value::Int(-2)) => {
            let order_id = parts
                .get(1)
                .and_then(|v| redis::from_redis_value_ref::<String>(v).ok())
                .and_then(|s| s.parse().ok());
            Reservation::AlreadyOrdered { order_id }
        }
        other => anyhow::bail!("reserve.lua returned an unknown reply {other:?}"),
    })
}
