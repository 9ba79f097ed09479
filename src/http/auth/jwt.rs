//! Signing and verifying tokens: the claims, the [`TokenPolicy`] a token must
//! satisfy and the [`JwtKeys`]: HS256 secrets by purpose, and an identity
//! provider's keys ([`super::jwks`]).
mod claims;

use super::caller::{Caller, Role};
use super::hs256::{Hs256, Refusal};
use super::jwks::{Jwks, NoKey};
use super::recent::RecentTokens;
use crate::http::error::ApiError;
use claims::{parse_claims, Audience, Claims};
use jsonwebtoken::{Algorithm, EncodingKey, Header, Validation};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

pub use claims::TokenPolicy;

/// One HS256 secret, to sign and to verify with.
struct HsKey {
    encoding: EncodingKey,
    hs256: Hs256,
}

impl HsKey {
    fn new(secret: &str) -> Self {
        Self {
            encoding: EncodingKey::from_secret(secret.as_bytes()),
            hs256: Hs256::new(secret.as_bytes()),
        }
    }
}

/// Why a token was not taken.
#[derive(Debug)]
pub(super) enum Rejected {
    /// 401, with the reason.
    Token(Refusal),
    /// The identity provider's keys are not known yet: 503.
    KeysNotLoaded,
}

impl From<Refusal> for Rejected {
    fn from(why: Refusal) -> Self {
        Self::Token(why)
    }
}

/// Signs and verifies tokens, each kind with the key of its purpose:
/// - tokens of every role (`admin`, `service`, shoppers too) with one HS256 secret,
///   `SECKILL_ADMIN_JWT_SECRET` (default `SECKILL_JWT_SECRET`);
/// - when the admin secret is another, `SECKILL_JWT_SECRET` signs shopper tokens
///   only: whoever issues them cannot mint an admin's (a token of that key with a
///   `role` is refused);
/// - with `SECKILL_JWKS`, shopper tokens of an identity provider (asymmetric keys,
///   `iss` and `aud` required, no `role`), and `SECKILL_JWT_SECRET` signs nothing
///   but what the admin key is (its default).
pub struct JwtKeys {
    any_role: HsKey,
    shoppers: Option<HsKey>,
    jwks: Option<Arc<Jwks>>,
    /// The JWKS generation the verified-token memory holds tokens of.
    jwks_generation: std::sync::atomic::AtomicU64,
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

    /// The keys and policy the settings name, without an identity provider's.
    pub fn from_settings(s: &crate::config::Auth) -> Self {
        Self::configured(s, None)
    }

    /// The keys and policy the settings name, with `jwks` (`SECKILL_JWKS`) for
    /// shopper tokens.
    pub fn configured(s: &crate::config::Auth, jwks: Option<Arc<Jwks>>) -> Self {
        let jwt = s.jwt_secret.expose();
        let admin = s.admin_jwt_secret.as_ref().map(|a| a.expose()).filter(|a| *a != jwt);
        // With an identity provider, HS256 tokens are the admin key's only (also
        // when minted by `seckill token`, which reads no JWKS).
        let shoppers = admin.filter(|_| s.jwks.is_none()).map(|_| jwt);
        Self::with_keys(admin.unwrap_or(jwt), shoppers, jwks, TokenPolicy::from_settings(s))
    }

    pub fn with_policy(secret: &str, policy: TokenPolicy) -> Self {
        Self::with_keys(secret, None, None, policy)
    }

    /// `any_role` signs tokens of every role; `shoppers`, if any, shopper tokens
    /// only (ignored with `jwks`: the identity provider signs those).
    pub fn with_keys(any_role: &str, shoppers: Option<&str>, jwks: Option<Arc<Jwks>>, policy: TokenPolicy) -> Self {
        Self {
            any_role: HsKey::new(any_role),
            shoppers: shoppers.filter(|_| jwks.is_none()).map(HsKey::new),
            jwks_generation: std::sync::atomic::AtomicU64::new(jwks.as_ref().map_or(0, |j| j.generation())),
            jwks,
            policy,
            recent: RecentTokens::new(),
        }
    }

    /// The identity provider's keys, if shopper tokens come from one.
    pub fn jwks(&self) -> Option<&Arc<Jwks>> {
        self.jwks.as_ref()
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
            aud: self.policy.audience.clone().map(Audience::One),
            nbf: None,
        };
        let key = match (role, &self.shoppers) {
            (Role::Shopper, Some(shoppers)) => shoppers,
            _ => &self.any_role,
        };
        jsonwebtoken::encode(&Header::new(Algorithm::HS256), &claims, &key.encoding).expect("HS256 signing cannot fail")
    }

    /// The claims of a token signed with one of these keys that holds at `now`:
    /// `exp` (required) not passed, `nbf` (if any) reached, no leeway either way;
    /// `iss` and `aud` as the policy requires (`aud` ignored when it requires none).
    pub(super) fn claims(&self, token: &str, now: u64) -> Result<Claims, Rejected> {
        let claims = match self.any_role.hs256.alg_of(token)? {
            Algorithm::HS256 => self.hs256_claims(token)?,
            alg => self.provider_claims(token, alg)?,
        };
        if claims.exp < now {
            return Err("expired".into());
        }
        if claims.nbf.is_some_and(|nbf| nbf > now) {
            return Err("not valid yet (nbf)".into());
        }
        if self
            .policy
            .issuer
            .as_ref()
            .is_some_and(|iss| claims.iss.as_ref() != Some(iss))
        {
            return Err("wrong or missing issuer".into());
        }
        if self
            .policy
            .audience
            .as_ref()
            .is_some_and(|aud| !claims.aud.as_ref().is_some_and(|a| a.contains(aud)))
        {
            return Err("wrong or missing audience".into());
        }
        Ok(claims)
    }

    /// An HS256 token's claims: a shopper's signed with the shoppers' key, or any
    /// signed with the key of every role.
    fn hs256_claims(&self, token: &str) -> Result<Claims, Refusal> {
        if let Some(shoppers) = &self.shoppers {
            if let Ok(json) = shoppers.hs256.claims_of(token) {
                let claims = parse_claims(&json)?;
                if claims.role.is_some() {
                    return Err("a token with a role must be signed with the admin key");
                }
                return Ok(claims);
            }
        }
        parse_claims(&self.any_role.hs256.claims_of(token)?)
    }

    /// A token of the identity provider: signed by a key of its set (the one its
    /// `kid` names), `iss` and `aud` the policy's, no `role`.
    fn provider_claims(&self, token: &str, alg: Algorithm) -> Result<Claims, Rejected> {
        let jwks = self.jwks.as_ref().ok_or("algorithm is not HS256")?;
        let header = jsonwebtoken::decode_header(token).map_err(|_| "header is not a JWT header")?;
        let keys = jwks.keys_for(header.kid.as_deref(), alg).map_err(|e| match e {
            NoKey::NotLoaded => Rejected::KeysNotLoaded,
            NoKey::Refused(why) => Rejected::Token(why),
        })?;
        let mut v = Validation::new(alg);
        v.leeway = 0;
        v.validate_nbf = true;
        v.set_required_spec_claims(&["exp", "iss", "aud"]);
        v.set_issuer(self.policy.issuer.as_slice());
        v.set_audience(self.policy.audience.as_slice());
        let mut why = "signature does not match";
        for k in keys {
            match jsonwebtoken::decode::<Claims>(token, &k.key, &v) {
                Ok(data) if data.claims.role.is_some() => {
                    return Err("a token of the identity provider carries no role".into())
                }
                Ok(data) => return Ok(data.claims),
                Err(e) => {
                    use jsonwebtoken::errors::ErrorKind as K;
                    why = match e.kind() {
                        K::InvalidSignature => {
                            // The key may have been rotated under the same `kid`.
                            jwks.suspect();
                            "signature does not match"
                        }
                        K::ExpiredSignature => "expired",
                        K::ImmatureSignature => "not valid yet (nbf)",
                        K::InvalidIssuer => "wrong or missing issuer",
                        K::InvalidAudience => "wrong or missing audience",
                        K::MissingRequiredClaim(_) => "a required claim (exp, iss, aud) is missing",
                        _ => "claims are not as expected",
                    };
                }
            }
        }
        Err(why.into())
    }

    /// The caller a token names, or 401.
    pub fn verify(&self, token: &str) -> Result<Caller, ApiError> {
        // A new set of the identity provider's keys: what was verified with the
        // old one is verified again (a withdrawn key takes its tokens with it).
        if let Some(jwks) = &self.jwks {
            let generation = jwks.generation();
            if self
                .jwks_generation
                .swap(generation, std::sync::atomic::Ordering::AcqRel)
                != generation
            {
                self.recent.clear();
            }
        }
        // Only tokens that passed every check below are remembered.
        if let Some(c) = self.recent.get(token, unix_now()) {
            return Ok(c);
        }
        let now = unix_now();
        let claims = self.claims(token, now).map_err(|r| match r {
            Rejected::Token(why) => ApiError::unauthorized(format!("invalid token: {why}")),
            Rejected::KeysNotLoaded => ApiError::unavailable("the identity provider's keys are not known yet", 1),
        })?;
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
