//! What a token says and what it must satisfy: the [`Claims`] and the
//! [`TokenPolicy`].
use super::super::hs256::Refusal;
use serde::{Deserialize, Serialize};

/// A token's claims.
#[derive(Debug, Serialize, Deserialize)]
pub(in crate::http::auth) struct Claims {
    pub(in crate::http::auth) sub: String,
    pub(in crate::http::auth) exp: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(in crate::http::auth) role: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(in crate::http::auth) iat: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(in crate::http::auth) iss: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(in crate::http::auth) aud: Option<Audience>,
    /// Not before: checked when present (this service mints none); `null` is
    /// refused, as jsonwebtoken refused it.
    #[serde(default, deserialize_with = "present_u64", skip_serializing_if = "Option::is_none")]
    pub(in crate::http::auth) nbf: Option<u64>,
}

/// `aud`: one audience, or several (identity providers send either).
#[derive(Debug, Serialize, Deserialize)]
#[serde(untagged)]
pub(in crate::http::auth) enum Audience {
    One(String),
    Many(Vec<String>),
}

impl Audience {
    /// Whether `aud` is the audience, or one of them.
    pub(super) fn contains(&self, aud: &str) -> bool {
        match self {
            Self::One(a) => a == aud,
            Self::Many(all) => all.iter().any(|a| a == aud),
        }
    }
}

/// A claim that may be absent (`#[serde(default)]`) but, when present, is a number.
fn present_u64<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    u64::deserialize(d).map(Some)
}

/// What a token must satisfy beyond its signature and `exp`.
#[derive(Clone, Debug)]
pub struct TokenPolicy {
    /// Longest lifetime accepted, in seconds: a token minted for a year is as
    /// good as a password that never changes.
    pub max_ttl_secs: u64,
    /// Required `iss`, when set (and put in minted tokens).
    pub issuer: Option<String>,
    /// Required `aud`, when set (and put in minted tokens).
    pub audience: Option<String>,
}

impl Default for TokenPolicy {
    fn default() -> Self {
        Self {
            max_ttl_secs: crate::config::DEFAULT_JWT_MAX_TTL_SECS,
            issuer: None,
            audience: None,
        }
    }
}

impl TokenPolicy {
    pub fn from_settings(s: &crate::config::Auth) -> Self {
        Self {
            max_ttl_secs: s.jwt_max_ttl_secs,
            issuer: s.jwt_issuer.clone(),
            audience: s.jwt_audience.clone(),
        }
    }
}

/// A token's claims from their JSON.
pub(super) fn parse_claims(json: &[u8]) -> Result<Claims, Refusal> {
    serde_json::from_slice(json).map_err(|_| "claims are not as expected")
}
