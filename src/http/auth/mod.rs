//! `Authorization: Bearer <JWT>`, HS256 only. Claims: `sub` (user id, decimal string),
//! `exp` (required), `role` (absent for shoppers, `admin`, or `service`); `nbf`
//! honoured; a token that lives longer than `SECKILL_JWT_MAX_TTL_SECS` (`exp - iat`,
//! or `exp - now` without `iat`) refused; `iss` and `aud` required when configured
//! (`SECKILL_JWT_ISSUER`, `SECKILL_JWT_AUDIENCE`). The role each route needs is in
//! [`roles`].
mod recent;
mod roles;

pub use roles::{Admin, ServiceCaller, Shopper};

use super::ApiError;
use actix_web::{dev::Payload, web, FromRequest, HttpRequest};
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use recent::RecentTokens;
use serde::{Deserialize, Serialize};
use std::future::{ready, Ready};
use std::time::{SystemTime, UNIX_EPOCH};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    Shopper,
    Admin,
    Service,
}

impl Role {
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "admin" => Some(Role::Admin),
            "service" => Some(Role::Service),
            _ => None,
        }
    }
}

#[derive(Debug, Serialize, Deserialize)]
struct Claims {
    sub: String,
    exp: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    role: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    iat: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    iss: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    aud: Option<String>,
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
    decoding: DecodingKey,
    validation: Validation,
    policy: TokenPolicy,
    /// Tokens verified lately (see [`recent`]).
    recent: RecentTokens,
}

fn unix_now() -> u64 {
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
        let mut validation = Validation::new(Algorithm::HS256);
        // No grace period: an expired token is expired, a token not yet valid is not.
        validation.leeway = 0;
        validation.validate_nbf = true;
        let mut required = vec!["exp", "sub"];
        if let Some(iss) = &policy.issuer {
            validation.set_issuer(&[iss]);
            required.push("iss");
        }
        match &policy.audience {
            Some(aud) => {
                validation.set_audience(&[aud]);
                required.push("aud");
            }
            None => validation.validate_aud = false,
        }
        validation.set_required_spec_claims(&required);
        Self {
            encoding: EncodingKey::from_secret(secret.as_bytes()),
            decoding: DecodingKey::from_secret(secret.as_bytes()),
            validation,
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
        };
        jsonwebtoken::encode(&Header::new(Algorithm::HS256), &claims, &self.encoding)
            .expect("HS256 signing cannot fail")
    }

    /// The caller a token names, or 401.
    pub fn verify(&self, token: &str) -> Result<Caller, ApiError> {
        // Only tokens that passed every check below are remembered.
        if let Some(c) = self.recent.get(token, unix_now()) {
            return Ok(c);
        }
        let now = unix_now();
        let data = jsonwebtoken::decode::<Claims>(token, &self.decoding, &self.validation)
            .map_err(|e| ApiError::unauthorized(format!("invalid token: {e}")))?;
        // From its issue to its expiry, and from now to its expiry: an `iat` set
        // just before `exp` must not carry a token years into the future.
        let lifetime = data.claims.exp.saturating_sub(data.claims.iat.unwrap_or(now).min(now));
        if lifetime > self.policy.max_ttl_secs {
            return Err(ApiError::unauthorized(format!(
                "invalid token: it lives {lifetime} s, longer than the {} s allowed",
                self.policy.max_ttl_secs
            )));
        }
        let user_id = crate::id::parse_str(&data.claims.sub)
            .map_err(|e| ApiError::unauthorized(format!("invalid token: sub {e}")))?;
        let role = match data.claims.role.as_deref() {
            None => Role::Shopper,
            Some(r) => {
                Role::parse(r).ok_or_else(|| ApiError::unauthorized(format!("invalid token: unknown role {r:?}")))?
            }
        };
        let caller = Caller { user_id, role };
        self.recent.put(token, caller, data.claims.exp);
        Ok(caller)
    }
}

/// The authenticated caller of a request.
#[derive(Clone, Copy, Debug)]
pub struct Caller {
    pub user_id: i64,
    pub role: Role,
}

impl Caller {
    pub fn is_admin(&self) -> bool {
        self.role == Role::Admin
    }
}

pub(super) fn caller_of(req: &HttpRequest) -> Result<Caller, ApiError> {
    let keys = req
        .app_data::<web::Data<JwtKeys>>()
        .ok_or_else(|| ApiError::internal(anyhow::anyhow!("JwtKeys not registered")))?;
    let header = req
        .headers()
        .get(actix_web::http::header::AUTHORIZATION)
        .ok_or_else(|| ApiError::unauthorized("missing Authorization header"))?;
    let value = header
        .to_str()
        .map_err(|_| ApiError::unauthorized("malformed Authorization header"))?;
    let token = value
        .strip_prefix("Bearer ")
        .or_else(|| value.strip_prefix("bearer "))
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .ok_or_else(|| ApiError::unauthorized("Authorization must be 'Bearer <token>'"))?;
    keys.verify(token)
}

impl FromRequest for Caller {
    type Error = ApiError;
    type Future = Ready<Result<Self, ApiError>>;

    fn from_request(req: &HttpRequest, _: &mut Payload) -> Self::Future {
        ready(caller_of(req))
    }
}

#[cfg(test)]
mod tests;
