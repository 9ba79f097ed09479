//! Tokens: signatures, roles, lifetimes, `nbf`, `iss` and `aud`, and the cache of
//! verified tokens.
use super::jwt::unix_now;
use super::*;
use jsonwebtoken::{Algorithm, EncodingKey, Header};

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

/// The `Validation` that `jsonwebtoken::decode` was given before `hs256`: the
/// reference the one-pass verifier is held to.
fn reference_validation(policy: &TokenPolicy) -> jsonwebtoken::Validation {
    let mut v = jsonwebtoken::Validation::new(Algorithm::HS256);
    v.leeway = 0;
    v.validate_nbf = true;
    let mut required = vec!["exp", "sub"];
    if let Some(iss) = &policy.issuer {
        v.set_issuer(&[iss]);
        required.push("iss");
    }
    match &policy.audience {
        Some(aud) => {
            v.set_audience(&[aud]);
            required.push("aud");
        }
        None => v.validate_aud = false,
    }
    v.set_required_spec_claims(&required);
    v
}

/// The claims as they were before `hs256` (no `nbf`): what jsonwebtoken decoded.
#[derive(Debug, serde::Deserialize)]
#[allow(dead_code)]
struct OldClaims {
    sub: String,
    exp: u64,
    #[serde(default)]
    role: Option<String>,
    #[serde(default)]
    iat: Option<u64>,
    #[serde(default)]
    iss: Option<String>,
    /// A string or a list, as identity providers send it (the verifier reads both).
    #[serde(default)]
    aud: Option<serde_json::Value>,
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
fn the_one_pass_verifier_accepts_exactly_what_jsonwebtoken_accepted() {
    const SECRET: &str = "0123456789abcdef0123";
    let s = SECRET.as_bytes();
    let now = unix_now();
    let (soon, past) = (now + 30, now - 30);
    let hs = r#"{"typ":"JWT","alg":"HS256"}"#;
    let claims = |extra: &str| format!(r#"{{"sub":"7","exp":{soon}{extra}}}"#);
    let minted = JwtKeys::new(SECRET).mint(7, Role::Shopper, 60);
    let (head, rest) = minted.split_once('.').unwrap();
    let (body, sig) = rest.split_once('.').unwrap();
    // The last of 43 characters carries 2 bits that encode nothing (zero in a
    // canonical encoding): setting one gives the same bytes, non-canonically.
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut flipped_sig = sig.to_owned().into_bytes();
    let last = flipped_sig.len() - 1;
    let value = ALPHABET.iter().position(|c| *c == flipped_sig[last]).unwrap();
    assert_eq!(value & 3, 0, "a canonical last character");
    flipped_sig[last] = ALPHABET[value | 1];
    let hs384 = {
        let key = EncodingKey::from_secret(s);
        jsonwebtoken::encode(
            &Header::new(Algorithm::HS384),
            &serde_json::json!({"sub": "7", "exp": soon}),
            &key,
        )
        .unwrap()
    };
    let cases: Vec<(&str, String)> = vec![
        ("minted", minted.clone()),
        ("header without typ", hand_signed(s, r#"{"alg":"HS256"}"#, &claims(""))),
        (
            "header with kid",
            hand_signed(s, r#"{"alg":"HS256","typ":"JWT","kid":"k1"}"#, &claims("")),
        ),
        ("alg none, signed", hand_signed(s, r#"{"alg":"none"}"#, &claims(""))),
        (
            "alg none, unsigned",
            format!("{}.{}.", b64(br#"{"alg":"none"}"#), b64(claims("").as_bytes())),
        ),
        (
            "alg hs256 in lower case",
            hand_signed(s, r#"{"alg":"hs256"}"#, &claims("")),
        ),
        ("header not JSON", hand_signed(s, "alg=HS256", &claims(""))),
        ("HS384", hs384),
        (
            "another secret",
            hand_signed(b"another-secret-0123456", hs, &claims("")),
        ),
        ("expired", hand_signed(s, hs, &format!(r#"{{"sub":"7","exp":{past}}}"#))),
        ("no exp", hand_signed(s, hs, r#"{"sub":"7"}"#)),
        (
            "exp a string",
            hand_signed(s, hs, &format!(r#"{{"sub":"7","exp":"{soon}"}}"#)),
        ),
        ("exp null", hand_signed(s, hs, r#"{"sub":"7","exp":null}"#)),
        ("no sub", hand_signed(s, hs, &format!(r#"{{"exp":{soon}}}"#))),
        (
            "sub a number",
            hand_signed(s, hs, &format!(r#"{{"sub":7,"exp":{soon}}}"#)),
        ),
        ("nbf ahead", hand_signed(s, hs, &claims(&format!(r#","nbf":{soon}"#)))),
        ("nbf behind", hand_signed(s, hs, &claims(&format!(r#","nbf":{past}"#)))),
        ("nbf null", hand_signed(s, hs, &claims(r#","nbf":null"#))),
        ("unknown claim", hand_signed(s, hs, &claims(r#","jti":"x""#))),
        ("duplicate sub", hand_signed(s, hs, &claims(r#","sub":"8""#))),
        (
            "aud when none is asked",
            hand_signed(s, hs, &claims(r#","aud":"other""#)),
        ),
        ("claims not JSON", hand_signed(s, hs, "sub=7")),
        (
            "claims with trailing bytes",
            hand_signed(s, hs, &format!("{}x", claims(""))),
        ),
        ("claims changed", format!("{head}.{}.{sig}", b64(claims("").as_bytes()))),
        ("signature padded", format!("{minted}=")),
        ("signature cut", minted[..minted.len() - 1].to_owned()),
        (
            "signature non-canonical",
            format!("{head}.{body}.{}", String::from_utf8(flipped_sig).unwrap()),
        ),
        ("four parts", format!("{minted}.x")),
        ("two parts", format!("{head}.{body}")),
        ("empty", String::new()),
        ("padded header", format!("{head}=.{body}.{sig}")),
        ("standard base64 alphabet", minted.replace('-', "+").replace('_', "/")),
        ("claims a JSON array", hand_signed(s, hs, &format!(r#"["7",{soon}]"#))),
        ("header a JSON array", hand_signed(s, r#"["HS256"]"#, &claims(""))),
        (
            "header kid a number",
            hand_signed(s, r#"{"alg":"HS256","kid":5}"#, &claims("")),
        ),
        (
            "header jwk a number",
            hand_signed(s, r#"{"alg":"HS256","jwk":1}"#, &claims("")),
        ),
        (
            "header with spaces",
            hand_signed(s, r#" { "alg" : "HS256" } "#, &claims("")),
        ),
        (
            "exp a float",
            hand_signed(s, hs, &format!(r#"{{"sub":"7","exp":{soon}.0}}"#)),
        ),
        (
            "iat a float",
            hand_signed(s, hs, &claims(&format!(r#","iat":{past}.5"#))),
        ),
        ("role admin", hand_signed(s, hs, &claims(r#","role":"admin""#))),
        ("signature of 44 characters", format!("{minted}A")),
        ("signature of 70 characters", format!("{minted}{}", "A".repeat(27))),
    ];
    let policies = [
        TokenPolicy {
            max_ttl_secs: u64::MAX,
            ..Default::default()
        },
        TokenPolicy {
            max_ttl_secs: u64::MAX,
            issuer: Some("shop".into()),
            audience: Some("seckill".into()),
        },
    ];
    let scoped = |extra: &str| hand_signed(s, hs, &claims(extra));
    let scoped_cases: Vec<(&str, String)> = vec![
        ("iss and aud", scoped(r#","iss":"shop","aud":"seckill""#)),
        ("wrong iss", scoped(r#","iss":"other","aud":"seckill""#)),
        ("wrong aud", scoped(r#","iss":"shop","aud":"other""#)),
        ("no iss", scoped(r#","aud":"seckill""#)),
        ("no aud", scoped(r#","iss":"shop""#)),
        ("aud a list", scoped(r#","iss":"shop","aud":["seckill"]"#)),
        ("iss null", scoped(r#","iss":null,"aud":"seckill""#)),
        ("iss a list", scoped(r#","iss":["shop"],"aud":"seckill""#)),
        (
            "claims a JSON array with iss and aud",
            hand_signed(s, hs, &format!(r#"["7",{soon},null,null,"shop","seckill"]"#)),
        ),
    ];
    let mut accepted = 0;
    for policy in policies {
        let keys = JwtKeys::with_policy(SECRET, policy.clone());
        let validation = reference_validation(&policy);
        let decoding = jsonwebtoken::DecodingKey::from_secret(s);
        for (name, token) in cases.iter().chain(&scoped_cases) {
            let ours = keys.claims(token, unix_now()).map(|c| (c.sub, c.exp));
            let theirs =
                jsonwebtoken::decode::<OldClaims>(token, &decoding, &validation).map(|d| (d.claims.sub, d.claims.exp));
            assert_eq!(
                ours.is_ok(),
                theirs.is_ok(),
                "{name} ({policy:?}): ours {ours:?}, jsonwebtoken {theirs:?}"
            );
            if let (Ok(a), Ok(b)) = (&ours, &theirs) {
                assert_eq!(a, b, "{name}");
                accepted += 1;
            }
        }
    }
    // Not a test that passes by refusing everything.
    assert!(accepted >= 8, "{accepted} accepted");
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
