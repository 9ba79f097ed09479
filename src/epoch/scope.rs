//! Which sales a repair rebuilds: only those whose state may have changed.
//!
//! On a single node every sale lives on the one server, so a new server, a marker
//! gone wrong or a clock behind is a change of every sale; only a sale whose stock
//! key is missing on the same server, marker and clock intact, is repaired alone.
//! On a Redis Cluster each master holds its own slots: a
//! master that restarted, failed over to a replica or went back shows a new
//! `run_id/master_replid`, and only the sales with a shard on its slots can have
//! lost anything. The others keep selling through the repair, and their relays
//! keep publishing (their intents are not in the repair's scope, see
//! `crate::outbox::relay::intent`).
//!
//! The facts used are exact: the identity Postgres vouched for (every master's,
//! recorded by the last repair), every master's identity and slots as read from the
//! master itself now, the sales found missing a stock key, and whether the epoch
//! marker and clock (on one master) are intact. Whatever cannot be placed (a single
//! node, no identity to compare with, a marker or clock gone wrong on a master whose
//! identity did not change) repairs every sale.

use crate::redis_conn::MasterSlots;

/// What a repair knows of the change it repairs.
pub struct Change<'a> {
    /// The identity Postgres vouched for: every master's `run_id/master_replid`,
    /// sorted and joined by `,` (a single node's `run_id`).
    pub vouched: &'a str,
    /// The same, as read now.
    pub now: &'a str,
    /// Every master's identity and slot ranges now; `None` on a single node.
    pub masters: Option<&'a [MasterSlots]>,
    /// Sales found missing a shard's stock key.
    pub missing: &'a [i64],
    /// The slot of the epoch marker and the Redis clock.
    pub marker_slot: u16,
    /// Whether the marker names the vouched epoch and the clock is not behind.
    pub marker_intact: bool,
}

/// The sales to close and rebuild, sorted; `None` for every sale. `sales` gives
/// each sale with the slots of its shards.
pub fn sales_to_repair(change: &Change<'_>, sales: &[(i64, Vec<u16>)]) -> Option<Vec<i64>> {
    let Some(masters) = change.masters else {
        // One node: unless it is the one vouched for, with its marker and clock
        // intact, any sale may have lost anything.
        let intact = change.vouched == change.now && change.marker_intact;
        return intact.then(|| sorted(change.missing.to_vec()));
    };
    let vouched: std::collections::HashSet<&str> = change.vouched.split(',').collect();
    let changed: Vec<(u16, u16)> = masters
        .iter()
        .filter(|(id, _)| !vouched.contains(id.as_str()))
        .flat_map(|(_, ranges)| ranges.iter().copied())
        .collect();
    let on_changed = |slot: u16| changed.iter().any(|(a, b)| (*a..=*b).contains(&slot));
    if !change.marker_intact && !on_changed(change.marker_slot) {
        // Something went back that no identity explains: trust nothing.
        return None;
    }
    let scope: Vec<i64> = sales
        .iter()
        .filter(|(_, slots)| slots.iter().any(|s| on_changed(*s)))
        .map(|(v, _)| *v)
        .chain(change.missing.iter().copied())
        .collect();
    Some(sorted(scope))
}

fn sorted(mut v: Vec<i64>) -> Vec<i64> {
    v.sort_unstable();
    v.dedup();
    v
}

/// The union of two scopes (`None` is every sale).
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

    fn change<'a>(vouched: &'a str, m: &'a [MasterSlots], missing: &'a [i64]) -> Change<'a> {
        Change {
            vouched,
            now: "a/1,b/1,c/2",
            masters: Some(m),
            missing,
            marker_slot: 100,
            marker_intact: true,
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
        assert_eq!(scope, Some(vec![2, 3]));
    }

    #[test]
    fn nothing_changed_but_missing_state_scopes_only_those_sales() {
        let m = masters();
        let sales = vec![(1, vec![200]), (2, vec![11000])];
        assert_eq!(
            sales_to_repair(&change("a/1,b/1,c/2", &m, &[7, 1]), &sales),
            Some(vec![1, 7])
        );
        assert_eq!(sales_to_repair(&change("a/1,b/1,c/2", &m, &[]), &sales), Some(vec![]));
    }

    #[test]
    fn a_new_single_node_or_an_unexplained_marker_repairs_every_sale() {
        let sales = vec![(1, vec![200])];
        let single = Change {
            vouched: "x",
            now: "y",
            masters: None,
            missing: &[],
            marker_slot: 0,
            marker_intact: true,
        };
        assert_eq!(sales_to_repair(&single, &sales), None);
        // The same node, marker and clock intact: only what is missing.
        let same = Change {
            now: "x",
            missing: &[4, 2],
            ..single
        };
        assert_eq!(sales_to_repair(&same, &sales), Some(vec![2, 4]));
        let marker_gone = Change {
            marker_intact: false,
            ..same
        };
        assert_eq!(sales_to_repair(&marker_gone, &sales), None);
        let m = masters();
        // The marker's master (a, slot 100) did not change, yet the marker is wrong.
        let lost = Change {
            marker_intact: false,
            ..change("a/1,b/1,c/1", &m, &[])
        };
        assert_eq!(sales_to_repair(&lost, &sales), None);
        // The marker's master changed: its loss is explained, the scope stands.
        let explained = Change {
            marker_intact: false,
            ..change("a/0,b/1,c/2", &m, &[])
        };
        assert_eq!(sales_to_repair(&explained, &sales), Some(vec![1]));
    }

    #[test]
    fn a_vouched_identity_of_another_shape_changes_every_master() {
        let m = masters();
        let sales = vec![(1, vec![200]), (2, vec![11000])];
        assert_eq!(sales_to_repair(&change("runid", &m, &[]), &sales), Some(vec![1, 2]));
    }

    #[test]
    fn a_union_with_every_sale_is_every_sale() {
        assert_eq!(union(Some(vec![3, 1]), Some(vec![1, 2])), Some(vec![1, 2, 3]));
        assert_eq!(union(None, Some(vec![1])), None);
        assert_eq!(union(Some(vec![1]), None), None);
    }
}
