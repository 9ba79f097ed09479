//! The outbox entry: what `lua/reserve.lua` appends to a shard's outbox stream
//! for one call that accepted orders, and how the relay, the repair and the
//! tests read it back.
use crate::id::{OrderId, UserId, VoucherId};
use crate::ordering::model::OrderMsg;
use anyhow::{Context, Result};
use redis::streams::StreamId;

/// One outbox entry read back.
#[derive(Debug)]
pub struct Entry {
    pub orders: Vec<OrderMsg>,
    /// The shard's sequence after the call that wrote it (field `s`; `None` in
    /// entries of older versions).
    pub seq: Option<i64>,
    /// The name of that call's write (field `h`; `None` in entries of versions
    /// before names, see [`crate::recovery::history`]).
    pub name: Option<crate::recovery::history::Name>,
}

impl Entry {
    /// The point of the shard's history the entry is (a count for an entry
    /// without a name), if it carries a sequence.
    pub fn point(&self) -> Option<crate::recovery::history::Point> {
        let seq = self.seq?;
        Some(crate::recovery::history::Point {
            seq,
            name: self.name.unwrap_or(crate::recovery::history::NO_NAME),
        })
    }
}

/// What one outbox entry is to a process that reads formats up to `reads`.
#[derive(Debug)]
pub enum Parsed {
    /// Its orders.
    Read(Entry),
    /// A format newer than this process reads (field `f`): a process that reads it
    /// will; it is never acknowledged unread.
    Newer(u32),
    /// Not an entry `reserve.lua` (or a repair, or a late admission) wrote: its
    /// fields are missing or malformed.
    Corrupt,
}

/// What one outbox entry is (see [`Parsed`]).
pub fn classify(entry: &StreamId, reads: u32) -> Parsed {
    if entry.map.contains_key("f") {
        match entry.get::<u32>("f") {
            Some(f) if f > reads => return Parsed::Newer(f),
            Some(f) if f >= 1 => {}
            _ => return Parsed::Corrupt,
        }
    }
    match parse(entry, reads) {
        Some(e) => Parsed::Read(e),
        None => Parsed::Corrupt,
    }
}

/// The most orders an entry whose content cannot be read may hold: an entry is
/// at most what one script call writes (1000 orders), and an order takes at least
/// six bytes of it ("i,u,t,").
pub fn most_orders(entry: &StreamId) -> i64 {
    let bytes: usize = entry
        .map
        .iter()
        .map(|(k, v)| {
            k.len()
                + match v {
                    redis::Value::BulkString(b) => b.len(),
                    _ => 16,
                }
        })
        .sum();
    (bytes.div_ceil(6) as i64).clamp(1, 1000)
}

/// The orders of one outbox entry, or `None` if `reserve.lua` did not write it, or
/// wrote it in a format newer than `reads` (see [`crate::ordering::outbox::format`]: field `f`,
/// absent in format 1).
///
/// An entry carries the orders one call of the script accepted: field `v` the
/// voucher, field `b` "id,user,created_ms" per order, all comma-separated, and `s`
/// the shard's sequence the call left. An entry of the format before coalesced
/// entries (fields `o`, `u`, `v`, `t`: one order) is read too, for outboxes an
/// older binary wrote. Each order carries the generation of the sequence
/// ([`OrderMsg::epoch`]).
pub fn parse(entry: &StreamId, reads: u32) -> Option<Entry> {
    if entry.map.contains_key("f") {
        let format: u32 = entry.get("f")?;
        if format > reads || format < 1 {
            return None;
        }
    }
    let voucher_id: i64 = entry.get("v")?;
    let seq: Option<i64> = match entry.map.get("s") {
        None => None,
        Some(_) => Some(entry.get("s")?),
    };
    let epoch = seq.map_or(0, crate::recovery::history::gen_of);
    let name = match entry.map.get("h") {
        None => None,
        Some(redis::Value::BulkString(b)) => Some(<crate::recovery::history::Name>::try_from(b.as_slice()).ok()?),
        Some(_) => return None,
    };
    let Some(packed) = entry.get::<String>("b") else {
        return Some(Entry {
            orders: vec![OrderMsg {
                id: OrderId::new(entry.get("o")?),
                user_id: UserId::new(entry.get("u")?),
                voucher_id: VoucherId::new(voucher_id),
                created_ms: entry.get("t")?,
                epoch,
            }],
            seq,
            name,
        });
    };
    let values: Vec<&str> = packed.split(',').collect();
    if values.is_empty() || !values.len().is_multiple_of(3) {
        return None;
    }
    let orders = values
        .chunks_exact(3)
        .map(|o| {
            Some(OrderMsg {
                id: OrderId::new(o[0].parse().ok()?),
                user_id: UserId::new(o[1].parse().ok()?),
                voucher_id: VoucherId::new(voucher_id),
                created_ms: o[2].parse().ok()?,
                epoch,
            })
        })
        .collect::<Option<Vec<_>>>()?;
    Some(Entry { orders, seq, name })
}

/// What [`read_outbox`] found in one outbox stream.
#[derive(Debug, Default)]
pub struct OutboxRead {
    /// Every order of the entries it could read.
    pub orders: Vec<OrderMsg>,
    /// The entries that are not entries (see [`Parsed::Corrupt`]), as read.
    pub corrupt: Vec<StreamId>,
}

/// Every order still in an outbox stream (relayed or not: the stream keeps an entry
/// until its relay's publish was confirmed), and the entries that are corrupt. An
/// entry of a newer format than `reads` fails the read: it may hold acknowledged
/// orders, and counting without them would rebuild the sale with units sold
/// twice; a process that reads it does the count.
pub async fn read_outbox(conn: &mut crate::redis_conn::Conn, stream: &str, reads: u32) -> Result<OutboxRead> {
    let mut out = OutboxRead::default();
    let mut from = "-".to_owned();
    loop {
        let reply: redis::streams::StreamRangeReply = redis::cmd("XRANGE")
            .arg(stream)
            .arg(&from)
            .arg("+")
            .arg("COUNT")
            .arg(5000)
            .query_async(conn)
            .await
            .context("reading an outbox")?;
        let n = reply.ids.len();
        for e in &reply.ids {
            match classify(e, reads) {
                Parsed::Read(entry) => out.orders.extend(entry.orders),
                Parsed::Newer(f) => anyhow::bail!(
                    "outbox {stream} holds entry {} of format {f}, newer than this binary reads ({reads}): \
                     not repairing from an incomplete count; a process that reads it will",
                    e.id
                ),
                Parsed::Corrupt => out.corrupt.push(e.clone()),
            }
        }
        match reply.ids.last() {
            Some(last) if n == 5000 => from = format!("({}", last.id),
            _ => return Ok(out),
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::ordering::outbox::format::NEWEST;
    use redis::{streams::StreamId, Value};

    fn parse(e: &StreamId) -> Option<super::Entry> {
        super::parse(e, NEWEST)
    }

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
        let seq = (3i64 << 32) + 9;
        let e = parse(&entry(&[
            ("v", "7"),
            ("b", "11,1,100,12,2,101"),
            ("s", &seq.to_string()),
        ]))
        .unwrap();
        let got: Vec<_> = e
            .orders
            .iter()
            .map(|o| (o.id.get(), o.user_id.get(), o.voucher_id.get(), o.created_ms, o.epoch))
            .collect();
        assert_eq!(got, vec![(11, 1, 7, 100, 3), (12, 2, 7, 101, 3)]);
        assert_eq!(e.seq, Some(seq));
    }

    #[test]
    fn an_entry_of_one_order_in_the_older_format_is_read() {
        let e = parse(&entry(&[("o", "11"), ("u", "1"), ("v", "7"), ("t", "100")])).unwrap();
        assert_eq!(
            (e.orders.len(), e.orders[0].id.get(), e.orders[0].user_id.get(), e.seq),
            (1, 11, 1, None)
        );
    }

    #[test]
    fn a_malformed_entry_is_none() {
        for bad in [
            vec![("v", "7"), ("b", "11,1")],
            vec![("v", "7"), ("b", "")],
            vec![("v", "7"), ("b", "11,x,100")],
            vec![("b", "11,1,100")],
            vec![("o", "11"), ("v", "7")],
            vec![("v", "7"), ("b", "11,1,100"), ("s", "x")],
            vec![("v", "7"), ("b", "11,1,100"), ("f", "x")],
            vec![("v", "7"), ("b", "11,1,100"), ("f", "0")],
            vec![("v", "7"), ("b", "11,1,100"), ("f", "3")],
        ] {
            assert!(parse(&entry(&bad)).is_none(), "{bad:?}");
        }
    }

    /// A stamped entry is read by a process that reads its format, and by no
    /// process that reads older ones only (a relay of a version before it).
    #[test]
    fn a_stamped_entry_is_read_up_to_the_format_a_process_reads() {
        let e = entry(&[("v", "7"), ("b", "11,1,100"), ("s", "5"), ("f", "2")]);
        assert_eq!(super::parse(&e, 2).unwrap().orders[0].id.get(), 11);
        assert!(super::parse(&e, 1).is_none());
        let unstamped = entry(&[("v", "7"), ("b", "11,1,100"), ("s", "5")]);
        assert_eq!(super::parse(&unstamped, 1).unwrap().orders[0].id.get(), 11);
    }
}
