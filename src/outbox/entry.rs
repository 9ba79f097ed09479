//! The outbox entry: what `lua/reserve.lua` appends to a shard's outbox stream
//! for one call that accepted orders, and how the relay, the repair and the
//! tests read it back.
use crate::order::model::OrderMsg;
use redis::streams::StreamId;

/// The orders of one outbox entry, or `None` if `reserve.lua` did not write it.
///
/// An entry carries the orders one call of the script accepted: field `v` the
/// voucher, field `b` "id,user,created_ms" per order, all comma-separated. An entry
/// of the format before coalesced entries (fields `o`, `u`, `v`, `t`: one order) is
/// read too, for outboxes an older binary wrote during a rolling deploy.
pub fn parse(entry: &StreamId, epoch: i64) -> Option<Vec<OrderMsg>> {
    let voucher_id: i64 = entry.get("v")?;
    let Some(packed) = entry.get::<String>("b") else {
        return Some(vec![OrderMsg {
            id: entry.get("o")?,
            user_id: entry.get("u")?,
            voucher_id,
            created_ms: entry.get("t")?,
            epoch,
        }]);
    };
    let values: Vec<&str> = packed.split(',').collect();
    if values.is_empty() || !values.len().is_multiple_of(3) {
        return None;
    }
    values
        .chunks_exact(3)
        .map(|o| {
            Some(OrderMsg {
                id: o[0].parse().ok()?,
                user_id: o[1].parse().ok()?,
                voucher_id,
                created_ms: o[2].parse().ok()?,
                epoch,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::parse;
    use redis::{streams::StreamId, Value};

    fn entry(fields: &[(&str, &str)]) -> StreamId {
        StreamId {
            id: "1-0".into(),
            map: fields
                .iter()
                .map(|(k, v)| (k.to_string(), Value::BulkString(v.as_bytes().to_vec())))
                .collect(),
            ..Default::default()
        }
    }

    #[test]
    fn an_entry_carries_the_orders_of_one_call() {
        let orders = parse(&entry(&[("v", "7"), ("b", "11,1,100,12,2,101")]), 3).unwrap();
        let got: Vec<_> = orders
            .iter()
            .map(|o| (o.id, o.user_id, o.voucher_id, o.created_ms, o.epoch))
            .collect();
        assert_eq!(got, vec![(11, 1, 7, 100, 3), (12, 2, 7, 101, 3)]);
    }

    #[test]
    fn an_entry_of_one_order_in_the_older_format_is_read() {
        let orders = parse(&entry(&[("o", "11"), ("u", "1"), ("v", "7"), ("t", "100")]), 0).unwrap();
        assert_eq!((orders.len(), orders[0].id, orders[0].user_id), (1, 11, 1));
    }

    #[test]
    fn a_malformed_entry_is_none() {
        for bad in [
            vec![("v", "7"), ("b", "11,1")],
            vec![("v", "7"), ("b", "")],
            vec![("v", "7"), ("b", "11,x,100")],
            vec![("b", "11,1,100")],
            vec![("o", "11"), ("v", "7")],
        ] {
            assert!(parse(&entry(&bad), 0).is_none(), "{bad:?}");
        }
    }
}
