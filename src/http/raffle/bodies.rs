//! The bodies of the raffle's routes: a shopper's entry, a page of the entry list
//! and the query asking for it, and a submitted beacon round.
use super::super::error::ApiError;
use crate::admission::raffle::PublicEntry;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

/// Largest page of entries.
const MAX_PAGE: i64 = 1000;

/// A shopper's entry.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct MyEntry {
    /// As the published entry list shows it.
    pub entry: String,
    pub draw_at: DateTime<Utc>,
    /// Whether the draw has happened.
    pub drawn: bool,
    /// Null before the draw.
    pub won: Option<bool>,
    /// A winner's token for `POST /api/v1/vouchers/{id}/orders` (header
    /// `X-Admission-Token`), valid until `admission_expires_at`; polling again
    /// gives a new one while the sale lasts.
    pub admission_token: Option<String>,
    pub admission_expires_at: Option<DateTime<Utc>>,
}

#[derive(Deserialize)]
pub struct EntriesQuery {
    after: Option<String>,
    limit: Option<String>,
    won: Option<String>,
}

impl EntriesQuery {
    /// The page asked for: the entry it starts after, its size (at most
    /// [`MAX_PAGE`], the default) and whether only the winners; or a 400 naming
    /// the field.
    pub(super) fn checked(&self) -> Result<(Option<&str>, i64, bool), ApiError> {
        let after = self.after.as_deref();
        if let Some(a) = after {
            if a.len() != 64 || !a.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)) {
                return Err(ApiError::validation(
                    "after",
                    "must be an entry: 64 lower-case hex digits",
                ));
            }
        }
        let limit = match self.limit.as_deref() {
            None => MAX_PAGE,
            Some(raw) => raw
                .parse::<i64>()
                .ok()
                .filter(|n| (1..=MAX_PAGE).contains(n))
                .ok_or_else(|| ApiError::validation("limit", format!("must be a whole number from 1 to {MAX_PAGE}")))?,
        };
        let won = match self.won.as_deref() {
            None | Some("false") => false,
            Some("true") => true,
            Some(_) => return Err(ApiError::validation("won", "must be true or false")),
        };
        Ok((after, limit, won))
    }
}

/// A page of entries.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct EntryPage {
    /// In entry order.
    pub items: Vec<PublicEntry>,
    /// The `after` of the next page; null on the last.
    pub next_after: Option<String>,
}

/// A beacon round's signature, as drand publishes it.
#[derive(Clone, Debug, ToSchema)]
pub struct BeaconRound {
    /// The round the sale named (its summary's `beacon.round`).
    #[schema(minimum = 1)]
    pub round: i64,
    /// The round's BLS signature in hex (drand's `signature`).
    #[schema(pattern = "^[0-9a-fA-F]{96}$")]
    pub signature: String,
}

impl BeaconRound {
    pub(super) fn parse(body: &Value) -> Result<Self, ApiError> {
        let field = |name: &str| {
            body.get(name)
                .filter(|v| !v.is_null())
                .ok_or_else(|| ApiError::validation(name, "is required"))
        };
        let round = crate::validate::whole(field("round")?, "round", 1, i64::MAX)?;
        let signature = crate::validate::string(field("signature")?, "signature")?;
        if signature.len() != 96 || !signature.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(ApiError::validation(
                "signature",
                "must be 96 hex digits (a compressed G1 point)",
            ));
        }
        Ok(Self {
            round,
            signature: signature.to_owned(),
        })
    }
}
