//! What persisting a batch needs and reports: its context ([`Ctx`]), the
//! [`Outcome`], a batch row, and the business numbers of the orders it creates.
use super::error::PersistError;
use crate::keys::Keys;
use crate::numbers::{Sequences, ORDER_RULE, ORDER_TENANT};
use crate::ordering::OrderMsg;
use sqlx::PgPool;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Outcome {
    pub created: usize,
    pub duplicates: usize,
    pub failed: usize,
    /// Orders whose id a *different* order already had (ids issued twice): stored
    /// under a fresh id, findable by the id their shopper was given.
    pub id_collisions: usize,
    /// Orders whose business number was already taken: numbered again.
    pub number_collisions: usize,
    /// Statements whose rows went in by the tolerant `INSERT ... ON CONFLICT` after
    /// the `COPY` met a row stored already or a shopper's live order (a
    /// redelivery, an incident): 0 in the common case.
    pub tolerant_inserts: usize,
}

/// What persisting needs besides the batch.
#[derive(Clone)]
pub struct Ctx {
    pub pg: PgPool,
    pub sequences: Sequences,
    pub keys: Keys,
}

/// One order and why the database refuses it, if it does.
pub(super) type Row = (OrderMsg, Option<&'static str>);

/// `count` business numbers of the `order` rule (none for 0).
pub(super) async fn order_numbers(sequences: &Sequences, count: usize) -> Result<Vec<String>, PersistError> {
    if count == 0 {
        return Ok(Vec::new());
    }
    sequences
        .next(ORDER_RULE, ORDER_TENANT, count as u64)
        .await
        .map_err(PersistError::Numbers)?
        .ok_or_else(|| PersistError::Numbers(anyhow::anyhow!("the sequence rule 'order' is missing")))
}
