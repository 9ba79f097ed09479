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
        }
    }

    /// A signed token for `user_id` with `role`, valid for `ttl_secs`.
    pub fn mint(&self, user_id: i64, role: Role, ttl_secs: u64) -> String {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
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
        Ok(Caller { user_id, role })
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
}
