//! Which sales a repair rebuilds: only those on a server that changed.
//!
//! On a single node every sale lives on the one server: any change of it (a new
//! `run_id`, a marker or clock gone wrong, a stock key missing) is a change of
//! every sale. On a Redis Cluster each master holds its own slots, and a repair
//! rebuilds the sales with a shard on a master that changed: one whose
//! `run_id/master_replid` is new (it restarted, failed over to a replica, went
//! back: a promotion always takes a new replication id), or one found missing a
//! sale's stock key (a master that lost one key may have lost others: every sale
//! on it). The others keep selling through the repair, and their relays keep
//! publishing (their intents are not in the repair's scope, see
//! `crate::outbox::relay::intent`).
//!
//! The facts used are exact: the identity Postgres vouched for (every master's,
//! recorded by the last repair), every master's identity and slots as read from the
//! master itself now, the slots of the stock keys found missing, and whether the
//! epoch marker and clock (on one master) are intact. A marker or clock gone wrong
//! on a master that did not change is explained by nothing: every sale.

use crate::redis_conn::MasterSlots;

/// What a repair knows of the change it repairs.
pub struct Change<'a> {
    /// The identity Postgres vouched for: every master's `run_id/master_replid`,
    /// sorted and joined by `,` (a single node's `run_id`).
    pub vouched: &'a str,
    /// Every master's identity and slot ranges now; `None` on a single node.
    pub masters: Option<&'a [MasterSlots]>,
    /// The slots of the stock keys found missing.
    pub missing: &'a [u16],
    /// The slot of the epoch marker and the Redis clock.
    pub marker_slot: u16,
    /// Whether the marker names the vouched epoch and the clock is not behind.
    pub marker_intact: bool,
}

/// What a repair rebuilds.
#[derive(Debug, PartialEq, Eq)]
pub struct Scope {
    /// The sales, sorted; `None` for every sale.
    pub sales: Option<Vec<i64>>,
    /// Whether the master of the marker and the clock is among the changed ones
    /// (always, when every sale is): if not, its clock must not go back during
    /// the repair, or the repair stops (something changed that the scope misses).
    pub clock_explained: bool,
}

impl Scope {
    const EVERY_SALE: Scope = Scope {
        sales: None,
        clock_explained: true,
    };
}

/// The sales to close and rebuild; `sales` gives each sale with the slots of its
/// shards.
pub fn sales_to_repair(change: &Change<'_>, sales: &[(i64, Vec<u16>)]) -> Scope {
    let Some(masters) = change.masters else {
        return Scope::EVERY_SALE;
    };
    let vouched: std::collections::HashSet<&str> = change.vouched.split(',').collect();
    let holds = |ranges: &[(u16, u16)], slot: u16| ranges.iter().any(|(a, b)| (*a..=*b).contains(&slot));
    let changed: Vec<(u16, u16)> = masters
        .iter()
        .filter(|(id, ranges)| !vouched.contains(id.as_str()) || change.missing.iter().any(|s| holds(ranges, *s)))
        .flat_map(|(_, ranges)| ranges.iter().copied())
        .collect();
    let clock_explained = holds(&changed, change.marker_slot);
    if !change.marker_intact && !clock_explained {
        // Something went back that no identity explains: trust nothing.
        return Scope::EVERY_SALE;
    }
    let scope = sales
        .iter()
        .filter(|(_, slots)| slots.iter().any(|s| holds(&changed, *s)))
        .map(|(v, _)| *v)
        .collect();
    Scope {
        sales: Some(sorted(scope)),
        clock_explained,
    }
}

fn sorted(mut v: Vec<i64>) -> Vec<i64> {
    v.sort_unstable();
    v.dedup();
    v
}

/// The union of two scopes' sales (`None` is every sale).
pub fn union(a: Option<Vec<i64>>, b: Option<Vec<i64>>) -> Option<Vec<i64>> {
    let mut v = a?;
    v.extend(b?);
    Some(sorted(v))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn masters() -> Vec<MasterSlots> {
        vec![
            ("a/1".into(), vec![(0, 5460)]),
            ("b/1".into(), vec![(5461, 10922)]),
            ("c/2".into(), vec![(10923, 16383)]),
        ]
    }

    fn change<'a>(vouched: &'a str, m: &'a [MasterSlots], missing: &'a [u16]) -> Change<'a> {
        Change {
            vouched,
            masters: Some(m),
            missing,
            marker_slot: 100,
            marker_intact: true,
        }
    }

    fn scoped(sales: Vec<i64>, clock_explained: bool) -> Scope {
        Scope {
            sales: Some(sales),
            clock_explained,
        }
    }

    #[test]
    fn a_failover_of_one_master_scopes_the_sales_with_a_shard_on_it() {
        let m = masters();
        // c failed over: c/1 was vouched for, c/2 answers now.
        let sales = vec![
            (1, vec![200]),
            (2, vec![11000]),
            (3, vec![6000, 16000]),
            (4, vec![6000]),
        ];
        let scope = sales_to_repair(&change("a/1,b/1,c/1", &m, &[]), &sales);
        assert_eq!(scope, scoped(vec![2, 3], false));
    }

    #[test]
    fn a_missing_stock_key_scopes_every_sale_of_its_master() {
        let m = masters();
        let sales = vec![(1, vec![200]), (2, vec![11000]), (5, vec![300]), (6, vec![7000])];
        // Sale 1's key (slot 200, on a) is missing: a lost a key, every sale on a.
        assert_eq!(
            sales_to_repair(&change("a/1,b/1,c/2", &m, &[200]), &sales),
            scoped(vec![1, 5], true)
        );
        assert_eq!(
            sales_to_repair(&change("a/1,b/1,c/2", &m, &[]), &sales),
            scoped(vec![], false)
        );
    }

    #[test]
    fn a_single_node_or_an_unexplained_marker_repairs_every_sale() {
        let sales = vec![(1, vec![200])];
        let single = Change {
            vouched: "x",
            masters: None,
            missing: &[],
            marker_slot: 0,
            marker_intact: true,
        };
        assert_eq!(sales_to_repair(&single, &sales), Scope::EVERY_SALE);
        let m = masters();
        // The marker's master (a, slot 100) did not change, yet the marker is wrong.
        let lost = Change {
            marker_intact: false,
            ..change("a/1,b/1,c/1", &m, &[])
        };
        assert_eq!(sales_to_repair(&lost, &sales), Scope::EVERY_SALE);
        // The marker's master changed: its loss is explained, the scope stands.
        let explained = Change {
            marker_intact: false,
            ..change("a/0,b/1,c/2", &m, &[])
        };
        assert_eq!(sales_to_repair(&explained, &sales), scoped(vec![1], true));
    }

    #[test]
    fn a_vouched_identity_of_another_shape_changes_every_master() {
        let m = masters();
        let sales = vec![(1, vec![200]), (2, vec![11000])];
        assert_eq!(
            sales_to_repair(&change("runid", &m, &[]), &sales),
            scoped(vec![1, 2], true)
        );
    }

    #[test]
    fn a_union_with_every_sale_is_every_sale() {
        assert_eq!(union(Some(vec![3, 1]), Some(vec![1, 2])), Some(vec![1, 2, 3]));
        assert_eq!(union(None, Some(vec![1])), None);
        assert_eq!(union(Some(vec![1]), None), None);
    }
}
