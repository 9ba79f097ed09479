//! Orders the insert skipped, and why: already stored (a redelivery); an id another
//! order already has (ids issued twice: stored under a fresh id, `issued_id` keeps
//! the one its shopper holds); a business number already taken (numbered again); or
//! the shopper already has a live order (the unique index refused it: an incident,
//! stored failed).
use super::batch::{order_numbers, Row};
use super::columns::Columns;
use super::error::PersistError;
use crate::id::{OrderId, OrderKey};
use crate::numbers::Sequences;
use crate::ordering::OrderMsg;
use sqlx::PgConnection;
use std::collections::{HashMap, HashSet};

const SECOND_ORDER: &str = "the shopper already has an order for this voucher";

/// What settling the skipped rows found.
pub struct Settled {
    /// Every row was stored, under its own id, with the status it was given (the
    /// `COPY` met no conflict): `inserted` is empty and says nothing.
    as_given: bool,
    /// Order key (with the admitted id) -> status of every row stored by this
    /// batch.
    inserted: HashMap<OrderKey, String>,
    pub duplicates: usize,
    /// Orders stored under a fresh id.
    pub collided: Vec<OrderMsg>,
    pub renumbered: usize,
    /// Orders stored failed: their shopper already has a live order.
    pub refused: Vec<OrderMsg>,
}

impl Settled {
    /// Every row stored as it was given, nothing skipped.
    pub fn as_given() -> Self {
        Settled {
            as_given: true,
            inserted: HashMap::new(),
            duplicates: 0,
            collided: Vec::new(),
            renumbered: 0,
            refused: Vec::new(),
        }
    }

    /// The status a row of the batch was stored with by this batch (`None`: not
    /// stored by it, as a redelivered order already stored).
    pub fn status_of<'a>(&'a self, (o, failure): &Row) -> Option<&'a str> {
        if self.as_given {
            Some(if failure.is_some() { "failed" } else { "created" })
        } else {
            self.inserted.get(&o.key()).map(String::as_str)
        }
    }
}

/// Looks at the rows `inserted` lacks until each is stored or known to be stored
/// (a few rounds: a fresh id or number may meet another conflict). A row still
/// without a status after them fails the batch ([`PersistError::Unsettled`]):
/// committed, its order would vanish with its intent.
pub async fn settle(
    tx: &mut PgConnection,
    sequences: &Sequences,
    rows: &[Row],
    inserted: HashMap<OrderKey, String>,
    mut numbered: HashMap<OrderKey, String>,
) -> Result<Settled, PersistError> {
    let mut s = Settled {
        as_given: false,
        inserted,
        ..Settled::as_given()
    };
    for _ in 0..4 {
        let skipped: Vec<&Row> = rows
            .iter()
            .filter(|(o, _)| !s.inserted.contains_key(&o.key()))
            .collect();
        if skipped.is_empty() {
            break;
        }
        let ids: Vec<i64> = skipped.iter().map(|(o, _)| o.id.get()).collect();
        // Every stored order under those ids: its holder, and an order reissued
        // from it; and the ids so held, by whichever order.
        let stored = existing(tx, &ids).await?;
        let held: HashSet<OrderId> = stored.iter().map(|k| k.id).collect();
        let taken_nos = taken_numbers(tx, &skipped, &numbered).await?;
        let mut retry = Columns::default();
        let mut renumber = Vec::new();
        for (o, failure) in skipped {
            match held.contains(&o.id).then(|| stored.contains(&o.key())) {
                Some(true) => {
                    s.duplicates += 1;
                    s.inserted.insert(o.key(), "duplicate".into());
                }
                Some(false) => {
                    let fresh: i64 = sqlx::query_scalar("SELECT (1::bigint << 62) + nextval('order_reissued_ids')")
                        .fetch_one(&mut *tx)
                        .await?;
                    if s.collided.iter().any(|c| c.key() == o.key()) {
                        // Refused again under its fresh id: the shopper has another
                        // live order.
                        retry.push_as(o, fresh, Some(SECOND_ORDER.into()), None);
                        s.refused.push(*o);
                    } else {
                        s.collided.push(*o);
                        retry.push_as(o, fresh, failure.map(str::to_owned), numbered.get(&o.key()).cloned());
                    }
                }
                None if numbered.get(&o.key()).is_some_and(|n| taken_nos.contains(n)) => renumber.push(*o),
                None => {
                    retry.push(o, Some(SECOND_ORDER.into()), None);
                    s.refused.push(*o);
                }
            }
        }
        s.renumbered += renumber_into(sequences, &renumber, &mut numbered, &mut retry).await?;
        if !retry.id.is_empty() {
            s.inserted.extend(retry.insert(&mut *tx).await?);
        }
    }
    let unsettled = rows.iter().filter(|(o, _)| !s.inserted.contains_key(&o.key())).count();
    if unsettled > 0 {
        return Err(PersistError::Unsettled(unsettled));
    }
    s.inserted.retain(|_, status| status != "duplicate");
    Ok(s)
}

/// The business numbers given to `skipped` that a stored order holds already
/// (numbers issued twice).
async fn taken_numbers(
    tx: &mut PgConnection,
    skipped: &[&Row],
    numbered: &HashMap<OrderKey, String>,
) -> Result<HashSet<String>, sqlx::Error> {
    let nos: Vec<String> = skipped
        .iter()
        .filter_map(|(o, _)| numbered.get(&o.key()).cloned())
        .collect();
    let taken: Vec<String> = sqlx::query_scalar("SELECT order_no FROM voucher_orders WHERE order_no = ANY($1)")
        .bind(&nos)
        .fetch_all(&mut *tx)
        .await?;
    Ok(taken.into_iter().collect())
}

/// Gives `renumber` (orders whose business numbers were taken: issued twice)
/// fresh numbers, into `numbered` and `retry`; returns how many.
async fn renumber_into(
    sequences: &Sequences,
    renumber: &[OrderMsg],
    numbered: &mut HashMap<OrderKey, String>,
    retry: &mut Columns,
) -> Result<usize, PersistError> {
    if renumber.is_empty() {
        return Ok(0);
    }
    tracing::error!(
        orders = renumber.len(),
        "INCIDENT: business numbers already taken (issued twice); numbering the orders again"
    );
    for (o, n) in renumber.iter().zip(order_numbers(sequences, renumber.len()).await?) {
        numbered.insert(o.key(), n.clone());
        retry.push(o, None, Some(n));
    }
    Ok(renumber.len())
}

/// The keys of the stored orders admitted under `ids` (those stored under their
/// own id, and those reissued from it).
pub(super) async fn existing(tx: &mut PgConnection, ids: &[i64]) -> Result<HashSet<OrderKey>, sqlx::Error> {
    let rows: Vec<(i64, i64, i64)> = sqlx::query_as(
        "SELECT coalesce(issued_id, id), user_id, voucher_id FROM voucher_orders
          WHERE id = ANY($1) OR issued_id = ANY($1)",
    )
    .bind(ids)
    .fetch_all(&mut *tx)
    .await?;
    Ok(rows.into_iter().map(|(id, u, v)| OrderKey::of(id, u, v)).collect())
}
