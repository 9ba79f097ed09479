//! `Authorization: Bearer <JWT>`, HS256 only. Claims: `sub` (user id, decimal string),
//! `exp` (required), `role` (absent for shoppers, `admin`, or `service`).
use super::ApiError;
use actix_web::{dev::Payload, web, FromRequest, HttpRequest};
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
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
}

/// Signs and verifies tokens with one HS256 secret.
pub struct JwtKeys {
    encoding: EncodingKey,
    decoding: DecodingKey,
    validation: Validation,
    /// Tokens verified lately: a shopper sends the same token with every retry all
    /// through a sale, and looking it up costs a fraction of an HMAC and two JSON
    /// parses.
    recent: RecentTokens,
}

/// Tokens that passed verification, with what they say, until they expire. Keyed
/// by the whole token, so only the very bytes that were verified match. Bounded:
/// when full it starts again empty (a verification is the cost of a miss).
struct RecentTokens {
    shards: Vec<std::sync::Mutex<TokenShard>>,
    per_shard: usize,
}

/// Token -> (what it says, its `exp`).
type TokenShard = std::collections::HashMap<Box<str>, (Caller, u64)>;

/// Tokens kept in all.
const RECENT_TOKENS: usize = 32_768;
const RECENT_SHARDS: usize = 16;

impl RecentTokens {
    fn new() -> Self {
        Self {
            shards: (0..RECENT_SHARDS).map(|_| Default::default()).collect(),
            per_shard: RECENT_TOKENS / RECENT_SHARDS,
        }
    }

    fn shard(&self, token: &str) -> &std::sync::Mutex<TokenShard> {
        // The signature's last bytes are as good as random.
        let b = token.as_bytes();
        let h = b
            .iter()
            .rev()
            .take(4)
            .fold(0usize, |h, &c| h.wrapping_mul(31).wrapping_add(c as usize));
        &self.shards[h % self.shards.len()]
    }

    fn get(&self, token: &str, now: u64) -> Option<Caller> {
        let shard = self.shard(token).lock().expect("token cache poisoned");
        // Valid through its `exp` second, as jsonwebtoken judges it with no leeway.
        shard.get(token).filter(|(_, exp)| *exp >= now).map(|(c, _)| *c)
    }

    fn put(&self, token: &str, caller: Caller, exp: u64) {
        let mut shard = self.shard(token).lock().expect("token cache poisoned");
        if shard.len() >= self.per_shard {
            shard.clear();
        }
        shard.insert(token.into(), (caller, exp));
    }
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

impl JwtKeys {
    pub fn new(secret: &str) -> Self {
        let mut validation = Validation::new(Algorithm::HS256);
        // No grace period: an expired token is expired.
        validation.leeway = 0;
        validation.set_required_spec_claims(&["exp", "sub"]);
        Self {
            encoding: EncodingKey::from_secret(secret.as_bytes()),
            decoding: DecodingKey::from_secret(secret.as_bytes()),
            validation,
            recent: RecentTokens::new(),
        }
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
        };
        jsonwebtoken::encode(&Header::new(Algorithm::HS256), &claims, &self.encoding)
            .expect("HS256 signing cannot fail")
    }

    /// The caller a token names, or 401.
    pub fn verify(&self, token: &str) -> Result<Caller, ApiError> {
        if let Some(c) = self.recent.get(token, unix_now()) {
            return Ok(c);
        }
        let data = jsonwebtoken::decode::<Claims>(token, &self.decoding, &self.validation)
            .map_err(|e| ApiError::unauthorized(format!("invalid token: {e}")))?;
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

fn caller_of(req: &HttpRequest) -> Result<Caller, ApiError> {
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

/// A caller with the `admin` role (403 for any other valid token).
pub struct Admin(pub Caller);

impl FromRequest for Admin {
    type Error = ApiError;
    type Future = Ready<Result<Self, ApiError>>;

    fn from_request(req: &HttpRequest, _: &mut Payload) -> Self::Future {
        ready(caller_of(req).and_then(|c| match c.role {
            Role::Admin => Ok(Admin(c)),
            _ => Err(ApiError::forbidden("this endpoint needs the admin role")),
        }))
    }
}

/// A caller with the `service` or `admin` role.
pub struct ServiceCaller(pub Caller);

impl FromRequest for ServiceCaller {
    type Error = ApiError;
    type Future = Ready<Result<Self, ApiError>>;

    fn from_request(req: &HttpRequest, _: &mut Payload) -> Self::Future {
        ready(caller_of(req).and_then(|c| match c.role {
            Role::Admin | Role::Service => Ok(ServiceCaller(c)),
            Role::Shopper => Err(ApiError::forbidden("this endpoint needs the service or admin role")),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_keeps_user_and_role() {
        let keys = JwtKeys::new("0123456789abcdef0123");
        let c = keys.verify(&keys.mint(42, Role::Admin, 60)).unwrap();
        assert_eq!((c.user_id, c.role), (42, Role::Admin));
        let c = keys.verify(&keys.mint(7, Role::Shopper, 60)).unwrap();
        assert_eq!((c.user_id, c.role), (7, Role::Shopper));
    }

    #[test]
    fn wrong_secret_and_alg_none_are_refused() {
        let keys = JwtKeys::new("0123456789abcdef0123");
        let other = JwtKeys::new("another-secret-0123456");
        assert!(keys.verify(&other.mint(1, Role::Admin, 60)).is_err());
        // {"alg":"none","typ":"JWT"} . {"sub":"1","exp":9999999999,"role":"admin"} . (no signature)
        let none = "eyJhbGciOiJub25lIiwidHlwIjoiSldUIn0.eyJzdWIiOiIxIiwiZXhwIjo5OTk5OTk5OTk5LCJyb2xlIjoiYWRtaW4ifQ.";
        assert!(keys.verify(none).is_err());
    }

    #[test]
    fn a_remembered_token_is_refused_once_expired_and_only_its_exact_bytes_match() {
        let keys = JwtKeys::new("0123456789abcdef0123");
        let token = keys.mint(42, Role::Shopper, 60);
        assert_eq!(keys.verify(&token).unwrap().user_id, 42);
        // Remembered: the same answer from the cache.
        assert_eq!(keys.verify(&token).unwrap().user_id, 42);
        // A token with one byte changed is verified (and refused), not matched.
        let mut forged = token.clone().into_bytes();
        let last = forged.len() - 2;
        forged[last] = if forged[last] == b'A' { b'B' } else { b'A' };
        assert!(keys.verify(std::str::from_utf8(&forged).unwrap()).is_err());
        // Past its exp, a remembered token is refused like any other.
        let now = unix_now();
        assert_eq!(keys.recent.get(&token, now).map(|c| c.user_id), Some(42));
        assert!(keys.recent.get(&token, now + 61).is_none());
    }

    #[test]
    fn the_remembered_tokens_stay_bounded() {
        let keys = JwtKeys::new("0123456789abcdef0123");
        for u in 1..=(RECENT_TOKENS as i64 * 2) {
            keys.recent.put(
                &format!("token-{u}"),
                Caller {
                    user_id: u,
                    role: Role::Shopper,
                },
                u64::MAX,
            );
        }
        let held: usize = keys.recent.shards.iter().map(|s| s.lock().unwrap().len()).sum();
        assert!(held <= RECENT_TOKENS, "{held} tokens held");
    }
}
