//! Signing and verifying tokens: the claims, the [`TokenPolicy`] a token must
//! satisfy and the [`JwtKeys`] of one HS256 secret.
use super::caller::{Caller, Role};
use super::hs256::{Hs256, Refusal};
use super::recent::RecentTokens;
use crate::http::ApiError;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde::{Deserialize, Serialize};
use std::time::{SystemTime, UNIX_EPOCH};

#[derive(Debug, Serialize, Deserialize)]
pub(super) struct Claims {
    pub(super) sub: String,
    pub(super) exp: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) role: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) iat: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) iss: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) aud: Option<String>,
    /// Not before: checked when present (this service mints none); `null` is
    /// refused, as jsonwebtoken refused it.
    #[serde(default, deserialize_with = "present_u64", skip_serializing_if = "Option::is_none")]
    pub(super) nbf: Option<u64>,
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
    pub fn from_settings(s: &crate::config::Settings) -> Self {
        Self {
            max_ttl_secs: s.jwt_max_ttl_secs,
            issuer: s.jwt_issuer.clone(),
            audience: s.jwt_audience.clone(),
        }
    }
}

/// Signs and verifies tokens with one HS256 secret.
pub struct JwtKeys {
    encoding: EncodingKey,
    hs256: Hs256,
    policy: TokenPolicy,
    /// Tokens verified lately (see [`recent`]).
    pub(super) recent: RecentTokens,
}

pub(super) fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

impl JwtKeys {
    /// Keys with the default [`TokenPolicy`].
    pub fn new(secret: &str) -> Self {
        Self::with_policy(secret, TokenPolicy::default())
    }

    /// The keys and policy the settings name.
    pub fn from_settings(s: &crate::config::Settings) -> Self {
        Self::with_policy(s.jwt_secret.expose(), TokenPolicy::from_settings(s))
    }

    pub fn with_policy(secret: &str, policy: TokenPolicy) -> Self {
        Self {
            encoding: EncodingKey::from_secret(secret.as_bytes()),
            hs256: Hs256::new(secret.as_bytes()),
            policy,
            recent: RecentTokens::new(),
        }
    }

    /// The longest lifetime a token may have.
    pub fn max_ttl_secs(&self) -> u64 {
        self.policy.max_ttl_secs
    }

    /// A signed token for `user_id` with `role`, valid for `ttl_secs`.
    pub fn mint(&self, user_id: i64, role: Role, ttl_secs: u64) -> String {
        let now = unix_now();
        let claims = Claims {
            sub: user_id.to_string(),
            exp: now + ttl_secs,
            role: match role {
                Role::Shopper => None,
                Role::Admin => Some("admin".into()),
                Role::Service => Some("service".into()),
            },
            iat: Some(now),
            iss: self.policy.issuer.clone(),
            aud: self.policy.audience.clone(),
            nbf: None,
        };
        jsonwebtoken::encode(&Header::new(Algorithm::HS256), &claims, &self.encoding)
            .expect("HS256 signing cannot fail")
    }

    /// The claims of a token signed with this secret that holds at `now`: `exp`
    /// (required) not passed, `nbf` (if any) reached, no leeway either way; `iss`
    /// and `aud` as the policy requires (`aud` ignored when it requires none).
    pub(super) fn claims(&self, token: &str, now: u64) -> Result<Claims, Refusal> {
        let json = self.hs256.claims_of(token)?;
        let claims: Claims = serde_json::from_slice(&json).map_err(|_| "claims are not as expected")?;
        if claims.exp < now {
            return Err("expired");
        }
        if claims.nbf.is_some_and(|nbf| nbf > now) {
            return Err("not valid yet (nbf)");
        }
        if self
            .policy
            .issuer
            .as_ref()
            .is_some_and(|iss| claims.iss.as_ref() != Some(iss))
        {
            return Err("wrong or missing issuer");
        }
        if self
            .policy
            .audience
            .as_ref()
            .is_some_and(|aud| claims.aud.as_ref() != Some(aud))
        {
            return Err("wrong or missing audience");
        }
        Ok(claims)
    }

    /// The caller a token names, or 401.
    pub fn verify(&self, token: &str) -> Result<Caller, ApiError> {
        // Only tokens that passed every check below are remembered.
        if let Some(c) = self.recent.get(token, unix_now()) {
            return Ok(c);
        }
        let now = unix_now();
        let claims = self
            .claims(token, now)
            .map_err(|why| ApiError::unauthorized(format!("invalid token: {why}")))?;
        // From its issue to its expiry, and from now to its expiry: an `iat` set
        // just before `exp` must not carry a token years into the future.
        let lifetime = claims.exp.saturating_sub(claims.iat.unwrap_or(now).min(now));
        if lifetime > self.policy.max_ttl_secs {
            return Err(ApiError::unauthorized(format!(
                "invalid token: it lives {lifetime} s, longer than the {} s allowed",
                self.policy.max_ttl_secs
            )));
        }
        let user_id =
            crate::id::parse_str(&claims.sub).map_err(|e| ApiError::unauthorized(format!("invalid token: sub {e}")))?;
        let role = match claims.role.as_deref() {
            None => Role::Shopper,
            Some(r) => {
                Role::parse(r).ok_or_else(|| ApiError::unauthorized(format!("invalid token: unknown role {r:?}")))?
            }
        };
        let caller = Caller { user_id, role };
        self.recent.put(token, caller, claims.exp);
        Ok(caller)
    }
}
