//! The one-pass HS256 verifier held to `jsonwebtoken::decode`, its reference: the
//! same tokens accepted, with the same claims, under a policy without and with
//! `iss` and `aud`.
use super::super::jwt::unix_now;
use super::super::{JwtKeys, Role, TokenPolicy};
use super::{b64, hand_signed};
use jsonwebtoken::{Algorithm, EncodingKey, Header};

const SECRET: &str = "0123456789abcdef0123";
/// The usual header.
const HS: &str = r#"{"typ":"JWT","alg":"HS256"}"#;

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

/// What the cases are made of: times around now, and a token minted by the
/// service itself.
struct Material {
    soon: u64,
    past: u64,
    minted: String,
}

impl Material {
    /// Around `now`: 30 s ahead, 30 s ago, and a shopper's token minted now.
    fn new(now: u64) -> Self {
        Self {
            soon: now + 30,
            past: now - 30,
            minted: JwtKeys::new(SECRET).mint(7, Role::Shopper, 60),
        }
    }

    /// Claims of user 7 expiring soon, with `extra` members after them.
    fn claims(&self, extra: &str) -> String {
        let soon = self.soon;
        format!(r#"{{"sub":"7","exp":{soon}{extra}}}"#)
    }

    /// The minted token's header, claims and signature, as they are encoded.
    fn parts(&self) -> (&str, &str, &str) {
        let (head, rest) = self.minted.split_once('.').unwrap();
        let (body, sig) = rest.split_once('.').unwrap();
        (head, body, sig)
    }
}

/// `sig` with its last character's 2 unused bits set: the same bytes, encoded
/// non-canonically.
fn non_canonical(sig: &str) -> String {
    // The last of 43 characters carries 2 bits that encode nothing (zero in a
    // canonical encoding): setting one gives the same bytes, non-canonically.
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut flipped_sig = sig.to_owned().into_bytes();
    let last = flipped_sig.len() - 1;
    let value = ALPHABET.iter().position(|c| *c == flipped_sig[last]).unwrap();
    assert_eq!(value & 3, 0, "a canonical last character");
    flipped_sig[last] = ALPHABET[value | 1];
    String::from_utf8(flipped_sig).unwrap()
}

/// Headers and algorithms: the minted token, headers of other shapes, `alg`
/// none or another HMAC, another secret.
fn header_cases(m: &Material) -> Vec<(&'static str, String)> {
    let (s, hs, claims) = (SECRET.as_bytes(), HS, |extra: &str| m.claims(extra));
    let soon = m.soon;
    let hs384 = {
        let key = EncodingKey::from_secret(s);
        jsonwebtoken::encode(
            &Header::new(Algorithm::HS384),
            &serde_json::json!({"sub": "7", "exp": soon}),
            &key,
        )
        .unwrap()
    };
    vec![
        ("minted", m.minted.clone()),
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
    ]
}

/// Claims: `exp`, `sub` and `nbf` missing, late, early or of another type;
/// claims unknown, repeated or not asked for; claims that are not JSON.
fn claims_cases(m: &Material) -> Vec<(&'static str, String)> {
    let (s, hs, claims) = (SECRET.as_bytes(), HS, |extra: &str| m.claims(extra));
    let (soon, past) = (m.soon, m.past);
    vec![
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
    ]
}

/// The token's encoding: parts changed, added, cut or missing, padding, a
/// non-canonical signature, the standard base64 alphabet.
fn encoding_cases(m: &Material) -> Vec<(&'static str, String)> {
    let claims = |extra: &str| m.claims(extra);
    let minted = &m.minted;
    let (head, body, sig) = m.parts();
    vec![
        ("claims changed", format!("{head}.{}.{sig}", b64(claims("").as_bytes()))),
        ("signature padded", format!("{minted}=")),
        ("signature cut", minted[..minted.len() - 1].to_owned()),
        (
            "signature non-canonical",
            format!("{head}.{body}.{}", non_canonical(sig)),
        ),
        ("four parts", format!("{minted}.x")),
        ("two parts", format!("{head}.{body}")),
        ("empty", String::new()),
        ("padded header", format!("{head}=.{body}.{sig}")),
        ("standard base64 alphabet", minted.replace('-', "+").replace('_', "/")),
    ]
}

/// JSON of odd shapes: arrays, members of another type, spaces, floats, a role,
/// signatures too long.
fn shape_cases(m: &Material) -> Vec<(&'static str, String)> {
    let (s, hs, claims) = (SECRET.as_bytes(), HS, |extra: &str| m.claims(extra));
    let (soon, past, minted) = (m.soon, m.past, &m.minted);
    vec![
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
    ]
}

/// `iss` and `aud`, right, wrong, missing or of another type: what the policy
/// that asks for them decides.
fn scoped_cases(m: &Material) -> Vec<(&'static str, String)> {
    let (s, hs, soon) = (SECRET.as_bytes(), HS, m.soon);
    let scoped = |extra: &str| hand_signed(s, hs, &m.claims(extra));
    vec![
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
    ]
}

/// Checks that the verifier under `policy` and jsonwebtoken accept the same
/// `cases`, with the same claims; returns how many both accepted.
fn accepted_alike<'a>(policy: TokenPolicy, cases: impl Iterator<Item = &'a (&'static str, String)>) -> usize {
    let mut accepted = 0;
    let keys = JwtKeys::with_policy(SECRET, policy.clone());
    let validation = reference_validation(&policy);
    let decoding = jsonwebtoken::DecodingKey::from_secret(SECRET.as_bytes());
    for (name, token) in cases {
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
    accepted
}

#[test]
fn the_one_pass_verifier_accepts_exactly_what_jsonwebtoken_accepted() {
    let m = Material::new(unix_now());
    let cases = [header_cases(&m), claims_cases(&m), encoding_cases(&m), shape_cases(&m)].concat();
    let scoped_cases = scoped_cases(&m);
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
    let mut accepted = 0;
    for policy in policies {
        accepted += accepted_alike(policy, cases.iter().chain(&scoped_cases));
    }
    // Not a test that passes by refusing everything.
    assert!(accepted >= 8, "{accepted} accepted");
}
