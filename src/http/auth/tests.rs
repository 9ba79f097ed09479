//! Tokens: signatures, roles, lifetimes, `nbf`, `iss` and `aud`, and the cache of
//! verified tokens.
use super::jwt::unix_now;
use super::*;
use jsonwebtoken::{Algorithm, EncodingKey, Header};

mod one_pass;

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

fn signed(claims: serde_json::Value) -> String {
    let key = EncodingKey::from_secret(b"0123456789abcdef0123");
    jsonwebtoken::encode(&Header::new(Algorithm::HS256), &claims, &key).unwrap()
}

#[test]
fn long_lived_and_not_yet_valid_tokens_are_refused() {
    let keys = JwtKeys::with_policy(
        "0123456789abcdef0123",
        TokenPolicy {
            max_ttl_secs: 600,
            ..Default::default()
        },
    );
    let now = unix_now();
    // exp - iat decides, and without iat exp - now.
    assert!(keys
        .verify(&signed(serde_json::json!({"sub": "1", "iat": now, "exp": now + 600})))
        .is_ok());
    assert!(keys
        .verify(&signed(serde_json::json!({"sub": "1", "iat": now, "exp": now + 601})))
        .is_err());
    assert!(keys
        .verify(&signed(serde_json::json!({"sub": "1", "exp": now + 3600})))
        .is_err());
    assert!(keys
        .verify(&signed(serde_json::json!({"sub": "1", "exp": now + 60})))
        .is_ok());
    // An iat just before a far exp (or in the future) does not carry a token past
    // the maximum from now.
    let far = now + 10 * 365 * 86_400;
    assert!(keys
        .verify(&signed(serde_json::json!({"sub": "1", "iat": far - 60, "exp": far})))
        .is_err());
    // nbf in the future: not yet; in the past: fine.
    assert!(keys
        .verify(&signed(
            serde_json::json!({"sub": "1", "nbf": now + 60, "exp": now + 120})
        ))
        .is_err());
    assert!(keys
        .verify(&signed(
            serde_json::json!({"sub": "1", "nbf": now - 1, "exp": now + 120})
        ))
        .is_ok());
}

#[test]
fn issuer_and_audience_are_required_when_configured() {
    let policy = TokenPolicy {
        issuer: Some("shop".into()),
        audience: Some("seckill".into()),
        ..Default::default()
    };
    let keys = JwtKeys::with_policy("0123456789abcdef0123", policy);
    assert_eq!(keys.verify(&keys.mint(3, Role::Shopper, 60)).unwrap().user_id, 3);
    let now = unix_now();
    let claims = |iss: &str, aud: &str| serde_json::json!({"sub": "1", "exp": now + 60, "iss": iss, "aud": aud});
    assert!(keys.verify(&signed(claims("shop", "seckill"))).is_ok());
    assert!(keys.verify(&signed(claims("other", "seckill"))).is_err());
    assert!(keys.verify(&signed(claims("shop", "other"))).is_err());
    assert!(keys
        .verify(&signed(serde_json::json!({"sub": "1", "exp": now + 60})))
        .is_err());
}

fn b64(bytes: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

/// `header.claims` signed with HMAC-SHA-256 under `secret`, both parts given as JSON text.
fn hand_signed(secret: &[u8], header: &str, claims: &str) -> String {
    use hmac::Mac;
    let msg = format!("{}.{}", b64(header.as_bytes()), b64(claims.as_bytes()));
    let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(secret).unwrap();
    mac.update(msg.as_bytes());
    format!("{msg}.{}", b64(&mac.finalize().into_bytes()))
}

#[test]
fn a_non_integer_nbf_is_refused() {
    let s = b"0123456789abcdef0123";
    let now = unix_now();
    let keys = JwtKeys::new("0123456789abcdef0123");
    let token = hand_signed(
        s,
        r#"{"alg":"HS256"}"#,
        &format!(r#"{{"sub":"7","exp":{},"nbf":{}.5}}"#, now + 30, now - 30),
    );
    assert!(keys.verify(&token).is_err());
}

#[test]
fn exp_and_nbf_hold_through_their_own_second() {
    let s = b"0123456789abcdef0123";
    let keys = JwtKeys::new("0123456789abcdef0123");
    let now = 1_900_000_000;
    let at = |exp: u64, nbf: u64| {
        let token = hand_signed(
            s,
            r#"{"alg":"HS256"}"#,
            &format!(r#"{{"sub":"7","exp":{exp},"nbf":{nbf}}}"#),
        );
        keys.claims(&token, now).is_ok()
    };
    assert!(at(now, now), "exp and nbf both now");
    assert!(!at(now - 1, now - 10), "exp a second ago");
    assert!(!at(now + 10, now + 1), "nbf a second ahead");
}
