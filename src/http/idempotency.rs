//! `Idempotency-Key` on the admin's POSTs that change something: create a voucher,
//! top up its stock. A request that repeats a key with the same method, path and
//! body gets the first request's answer, and nothing is created or added again; a
//! key reused for a different request gets 422 `idempotency_key_reused`.
//!
//! The key is claimed in the transaction that makes the change
//! (`migrations/0013_idempotency_keys.sql` says how that keeps two concurrent
//! requests with one key from both applying). Keys are per admin (the token's
//! `sub`) and kept for [`KEPT_SECS`] (a day, as Stripe keeps them): a key older
//! than that is a new key (its old answer is forgotten in the claim that reuses
//! it), and each serving instance deletes the expired ones every
//! [`SWEEP_EVERY`]. A request that fails (4xx, 5xx) stores nothing, so it can be
//! retried with the same key.
use super::error::ApiError;
use actix_web::http::StatusCode;
use actix_web::HttpRequest;
use serde_json::{json, Value};

pub const HEADER: &str = "Idempotency-Key";

/// Longest key accepted.
pub const MAX_LEN: usize = 255;

/// How long a key is remembered: a day.
pub const KEPT_SECS: i64 = 86_400;

/// How often each serving instance deletes the expired keys.
pub const SWEEP_EVERY: std::time::Duration = std::time::Duration::from_secs(600);

/// The request's key, if it sent one: 1 to [`MAX_LEN`] visible ASCII characters.
pub fn key_of(req: &HttpRequest) -> Result<Option<String>, ApiError> {
    let mut values = req.headers().get_all(HEADER);
    let Some(value) = values.next() else {
        return Ok(None);
    };
    let bad = || {
        ApiError::validation(
            HEADER,
            format!("must be 1 to {MAX_LEN} visible ASCII characters, sent once"),
        )
    };
    if values.next().is_some() {
        return Err(bad());
    }
    let key = value.to_str().map_err(|_| bad())?;
    if key.is_empty() || key.len() > MAX_LEN || !key.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(bad());
    }
    Ok(Some(key.to_owned()))
}

/// What a key's row says about this request.
pub enum Claim {
    /// The key is new: this request makes the change (the row is held until its
    /// transaction ends).
    New,
    /// The same request was answered before: this is its answer.
    Replay { status: StatusCode, body: Value },
    /// The same request committed its change but its answer is not stored (a
    /// top-up's is read after the commit): rebuild it from `top_up_id`.
    Unanswered { top_up_id: Option<i64> },
}

/// The fingerprint a key is bound to: method, path and body as JSON text, its
/// members sorted (serde_json's maps are ordered by key), so the same request
/// always gives the same text.
pub fn fingerprint(req: &HttpRequest, body: &Value) -> Value {
    json!({"method": req.method().as_str(), "path": req.path(), "body": body})
}

/// Claims `key` for `request` in `tx`, the transaction that will make the change.
pub async fn claim(tx: &mut sqlx::PgConnection, admin: i64, key: &str, request: &Value) -> Result<Claim, ApiError> {
    // Waits here while another transaction holds a row with this key. A key past
    // its day is taken afresh (its row reset, and locked until this transaction
    // ends: a concurrent request with it then finds this request's row).
    let inserted = sqlx::query(
        "INSERT INTO idempotency_keys (admin_id, key, request) VALUES ($1, $2, $3)
         ON CONFLICT (admin_id, key) DO UPDATE
            SET request = EXCLUDED.request, status = NULL, response = NULL, top_up_id = NULL,
                created_at = now()
          WHERE idempotency_keys.created_at < now() - make_interval(secs => $4)",
    )
    .bind(admin)
    .bind(key)
    .bind(request.to_string())
    .bind(KEPT_SECS as f64)
    .execute(&mut *tx)
    .await?
    .rows_affected();
    if inserted == 1 {
        return Ok(Claim::New);
    }
    let (same, status, response, top_up_id): (bool, Option<i16>, Option<String>, Option<i64>) = sqlx::query_as(
        "SELECT request = $3, status, response::text, top_up_id
           FROM idempotency_keys WHERE admin_id = $1 AND key = $2",
    )
    .bind(admin)
    .bind(key)
    .bind(request.to_string())
    .fetch_one(&mut *tx)
    .await?;
    if !same {
        return Err(ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "idempotency_key_reused",
            format!("{HEADER}: already used for a different request; send a new key"),
        ));
    }
    Ok(match (status, response) {
        (Some(status), Some(body)) => Claim::Replay {
            status: StatusCode::from_u16(status as u16).unwrap_or(StatusCode::OK),
            body: parse_stored(&body)?,
        },
        _ => Claim::Unanswered { top_up_id },
    })
}

/// Deletes the keys past their day; returns how many.
pub async fn forget_expired(pg: &sqlx::PgPool) -> Result<u64, sqlx::Error> {
    Ok(
        sqlx::query("DELETE FROM idempotency_keys WHERE created_at < now() - make_interval(secs => $1)")
            .bind(KEPT_SECS as f64)
            .execute(pg)
            .await?
            .rows_affected(),
    )
}

/// Every [`SWEEP_EVERY`] until `stop`: [`forget_expired`].
pub async fn sweep(pg: sqlx::PgPool, stop: tokio_util::sync::CancellationToken) {
    let mut every = tokio::time::interval(SWEEP_EVERY);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = every.tick() => match forget_expired(&pg).await {
                Ok(0) => {}
                Ok(n) => tracing::info!(keys = n, "expired idempotency keys deleted"),
                Err(e) => tracing::debug!(error = %e, "expired idempotency keys not deleted this time"),
            },
        }
    }
}

/// Notes the top-up a claimed key made (in the claim's transaction).
pub async fn note_top_up(tx: &mut sqlx::PgConnection, admin: i64, key: &str, top_up_id: i64) -> Result<(), ApiError> {
    sqlx::query("UPDATE idempotency_keys SET top_up_id = $3 WHERE admin_id = $1 AND key = $2")
        .bind(admin)
        .bind(key)
        .bind(top_up_id)
        .execute(&mut *tx)
        .await?;
    Ok(())
}

/// The store of the keys' answers, for a handler that records one outside a
/// transaction of its own.
#[derive(Clone)]
pub struct Answers {
    pg: sqlx::PgPool,
}

impl Answers {
    pub fn new(pg: sqlx::PgPool) -> Self {
        Self { pg }
    }

    /// [`answer`], in a statement of its own.
    pub async fn answer(&self, admin: i64, key: &str, status: StatusCode, body: &Value) -> Result<Value, ApiError> {
        answer(&self.pg, admin, key, status, body).await
    }
}

/// Stores the answer to a claimed key, unless one is stored already, and returns
/// the stored one: every request with the key answers alike.
pub async fn answer(
    db: impl sqlx::PgExecutor<'_>,
    admin: i64,
    key: &str,
    status: StatusCode,
    body: &Value,
) -> Result<Value, ApiError> {
    let stored: String = sqlx::query_scalar(
        "UPDATE idempotency_keys SET status = coalesce(status, $3), response = coalesce(response, $4::jsonb)
          WHERE admin_id = $1 AND key = $2 RETURNING response::text",
    )
    .bind(admin)
    .bind(key)
    .bind(status.as_u16() as i16)
    .bind(body.to_string())
    .fetch_one(db)
    .await?;
    parse_stored(&stored)
}

/// (Answers are bound and read as text and stored as jsonb: no JSON type is needed
/// on this side.)
fn parse_stored(text: &str) -> Result<Value, ApiError> {
    serde_json::from_str(text).map_err(|e| ApiError::internal(anyhow::Error::new(e).context("a stored answer")))
}
