//! Tokens from an identity provider, and keys by purpose: an OIDC-style issuer of
//! the test's own (key pairs it generates: Ed25519, P-256, RSA; its JWKS served
//! over HTTP) signs shopper tokens; `SECKILL_ADMIN_JWT_SECRET` signs admins'; and
//! whoever holds the shoppers' key cannot make an admin of anyone.
use crate::helpers::*;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use reqwest::StatusCode;
use serde_json::{json, Value};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const ADMIN_SECRET: &str = "the-admins-own-secret-0123456789abcdef";
const AUDIENCE: &str = "seckill";

/// One signing key of the issuer.
struct SigningKey {
    kid: String,
    alg: Algorithm,
    encoding: EncodingKey,
    jwk: Value,
}

impl SigningKey {
    fn ed25519(kid: &str) -> Self {
        use ed25519_dalek::pkcs8::EncodePrivateKey;
        let key = ed25519_dalek::SigningKey::from_bytes(&rand::random::<[u8; 32]>());
        let der = key.to_pkcs8_der().unwrap();
        Self {
            kid: kid.into(),
            alg: Algorithm::EdDSA,
            encoding: EncodingKey::from_ed_der(der.as_bytes()),
            jwk: json!({"kty": "OKP", "crv": "Ed25519", "use": "sig", "kid": kid,
                        "x": URL_SAFE_NO_PAD.encode(key.verifying_key().to_bytes())}),
        }
    }

    fn p256(kid: &str) -> Self {
        use p256::elliptic_curve::sec1::ToEncodedPoint;
        use p256::pkcs8::EncodePrivateKey;
        let key = loop {
            if let Ok(k) = p256::SecretKey::from_slice(&rand::random::<[u8; 32]>()) {
                break k;
            }
        };
        let der = key.to_pkcs8_der().unwrap();
        let point = key.public_key().to_encoded_point(false);
        Self {
            kid: kid.into(),
            alg: Algorithm::ES256,
            encoding: EncodingKey::from_ec_der(der.as_bytes()),
            jwk: json!({"kty": "EC", "crv": "P-256", "alg": "ES256", "kid": kid,
                        "x": URL_SAFE_NO_PAD.encode(point.x().unwrap()),
                        "y": URL_SAFE_NO_PAD.encode(point.y().unwrap())}),
        }
    }

    fn rsa(kid: &str) -> Self {
        use rsa::pkcs1::EncodeRsaPrivateKey;
        use rsa::traits::PublicKeyParts;
        let key = rsa::RsaPrivateKey::new(&mut rsa::rand_core::OsRng, 2048).unwrap();
        let der = key.to_pkcs1_der().unwrap();
        Self {
            kid: kid.into(),
            alg: Algorithm::RS256,
            encoding: EncodingKey::from_rsa_der(der.as_bytes()),
            jwk: json!({"kty": "RSA", "alg": "RS256", "kid": kid,
                        "n": URL_SAFE_NO_PAD.encode(key.n().to_bytes_be()),
                        "e": URL_SAFE_NO_PAD.encode(key.e().to_bytes_be())}),
        }
    }
}

/// An identity provider of the test's own: it serves its JWKS at
/// `{url}/.well-known/jwks.json` (what it serves can be changed: key rotation)
/// and counts the fetches.
struct Issuer {
    url: String,
    served: Arc<Mutex<Value>>,
    fetches: Arc<std::sync::atomic::AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl Issuer {
    async fn start(keys: &[&SigningKey]) -> Self {
        let served = Arc::new(Mutex::new(
            json!({"keys": keys.iter().map(|k| k.jwk.clone()).collect::<Vec<_>>()}),
        ));
        let fetches = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let (jwks, count) = (served.clone(), fetches.clone());
        let (url, task) = crate::helpers::stub_http::serve(move |head| {
            if head.starts_with("GET /.well-known/jwks.json ") {
                count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                ("200 OK", jwks.lock().unwrap().to_string())
            } else {
                ("404 Not Found", "{}".to_owned())
            }
        })
        .await;
        Self {
            url,
            served,
            fetches,
            task,
        }
    }

    fn jwks_url(&self) -> String {
        format!("{}/.well-known/jwks.json", self.url)
    }

    /// From now on the JWKS holds `keys` only.
    fn rotate(&self, keys: &[&SigningKey]) {
        *self.served.lock().unwrap() = json!({"keys": keys.iter().map(|k| k.jwk.clone()).collect::<Vec<_>>()});
    }

    fn fetches(&self) -> usize {
        self.fetches.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// A token of `key` for `user`, with `extra` claims over the usual ones (this
    /// issuer, `aud` the service's, an hour to live).
    fn token(&self, key: &SigningKey, user: i64, extra: Value) -> String {
        let now = chrono::Utc::now().timestamp();
        let mut claims =
            json!({"sub": user.to_string(), "iss": self.url, "aud": AUDIENCE, "iat": now, "exp": now + 3600});
        for (k, v) in extra.as_object().unwrap() {
            claims[k] = v.clone();
        }
        let mut header = Header::new(key.alg);
        header.kid = Some(key.kid.clone());
        jsonwebtoken::encode(&header, &claims, &key.encoding).unwrap()
    }
}

impl Drop for Issuer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The service with shopper tokens from `issuer` and admin tokens by a secret of
/// their own.
async fn app_of(ns: &Namespace, issuer: &Issuer) -> TestApp {
    TestApp::builder(ns)
        .env("SECKILL_JWKS", issuer.jwks_url())
        .env("SECKILL_JWT_ISSUER", issuer.url.clone())
        .env("SECKILL_JWT_AUDIENCE", AUDIENCE)
        .env("SECKILL_ADMIN_JWT_SECRET", ADMIN_SECRET)
        .spawn()
        .await
}

async fn order_with(app: &TestApp, voucher: i64, token: &str) -> (StatusCode, Value) {
    let resp = app
        .client
        .post(format!("{}/api/v1/vouchers/{voucher}/orders", app.addr))
        .bearer_auth(token)
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    let status = resp.status();
    (status, resp.json().await.unwrap_or_default())
}

/// Tokens of the identity provider, each of its three kinds of key, order; `aud`
/// a string or an array holding the service's; a wrong `aud` or `iss`, a missing
/// `aud`, an expired token, or a token of a key the set does not hold get 401.
#[tokio::test]
async fn a_shopper_token_of_the_identity_provider_orders() {
    let keys = [
        SigningKey::ed25519("ed"),
        SigningKey::p256("ec"),
        SigningKey::rsa("rsa"),
    ];
    let issuer = Issuer::start(&keys.iter().collect::<Vec<_>>()).await;
    let ns = Namespace::new().await;
    let app = app_of(&ns, &issuer).await;
    let v = app.flash_sale(100).await;
    let mut user = 0;
    for key in &keys {
        user += 1;
        let (status, body) = order_with(&app, v, &issuer.token(key, user, json!({}))).await;
        assert_eq!(status, StatusCode::ACCEPTED, "{:?}, aud a string: {body}", key.alg);
        user += 1;
        let token = issuer.token(key, user, json!({"aud": ["another-service", AUDIENCE]}));
        let (status, body) = order_with(&app, v, &token).await;
        assert_eq!(status, StatusCode::ACCEPTED, "{:?}, aud an array: {body}", key.alg);
    }
    let now = chrono::Utc::now().timestamp();
    let ed = &keys[0];
    let refused = [
        ("a wrong aud", issuer.token(ed, 50, json!({"aud": "another-service"}))),
        (
            "a wrong aud in an array",
            issuer.token(ed, 51, json!({"aud": ["another-service"]})),
        ),
        ("no aud", issuer.token(ed, 52, json!({"aud": null}))),
        (
            "a wrong iss",
            issuer.token(ed, 53, json!({"iss": "https://elsewhere.example"})),
        ),
        ("expired", issuer.token(ed, 54, json!({"exp": now - 10}))),
        (
            "a key it does not publish",
            issuer.token(&SigningKey::ed25519("ed"), 55, json!({})),
        ),
    ];
    for (what, token) in refused {
        let (status, body) = order_with(&app, v, &token).await;
        assert_eq!(
            (status, code(&body)),
            (StatusCode::UNAUTHORIZED, "unauthorized"),
            "{what}: {body}"
        );
    }
    // The same shopper's second token is the same shopper.
    let (status, body) = order_with(&app, v, &issuer.token(&keys[1], 1, json!({}))).await;
    assert_eq!(
        (status, code(&body)),
        (StatusCode::CONFLICT, "already_ordered"),
        "{body}"
    );
}

/// Nobody who issues shopper tokens can make an admin: the identity provider's
/// token with `role: admin`, and an HS256 admin token signed with
/// `SECKILL_JWT_SECRET`, get 401 on an admin route; an HS256 shopper token of
/// `SECKILL_JWT_SECRET` is no shopper's either (the provider signs those). The
/// admin secret's token is an admin's.
#[tokio::test]
async fn a_shopper_issuers_key_makes_no_admin() {
    let key = SigningKey::ed25519("ed");
    let issuer = Issuer::start(&[&key]).await;
    let ns = Namespace::new().await;
    let app = app_of(&ns, &issuer).await;
    let v = app.flash_sale(10).await;
    let admin_route = "/api/v1/admin/vouchers";
    let shoppers_secret = seckill::http::auth::JwtKeys::new(SECRET);
    let forged = [
        (
            "the provider's token with role admin",
            issuer.token(&key, 1, json!({"role": "admin"})),
        ),
        (
            "an HS256 admin token of the JWT secret",
            shoppers_secret.mint(1, seckill::http::auth::Role::Admin, 600),
        ),
    ];
    for (what, token) in forged {
        let (status, body) = app.get(admin_route, Some(&token)).await;
        assert_eq!(
            (status, code(&body)),
            (StatusCode::UNAUTHORIZED, "unauthorized"),
            "{what}: {body}"
        );
    }
    let hs_shopper = shoppers_secret.mint(3, seckill::http::auth::Role::Shopper, 600);
    let (status, body) = order_with(&app, v, &hs_shopper).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "an HS256 shopper token: {body}");
    // The test's own keys (`app.admin()`) sign admins with the admin secret.
    let (status, body) = app.get(admin_route, Some(&app.admin())).await;
    assert_eq!(status, StatusCode::OK, "the admin secret's token: {body}");
    // Nor can the JWT secret's holder derive the admission keys (no
    // SECKILL_ADMISSION_SECRET here: they come from both JWT secrets).
    let label = b"seckill raffle entry v1";
    let raffle = app.app().state().admit.signer.raffle;
    assert_ne!(raffle, seckill::admission::signing::mac(SECRET.as_bytes(), label));
    assert_ne!(raffle, seckill::admission::signing::mac(ADMIN_SECRET.as_bytes(), label));
}

/// Without an identity provider, `SECKILL_ADMIN_JWT_SECRET` still splits the keys:
/// `SECKILL_JWT_SECRET` signs shoppers (they order) and no admin (401), the admin
/// secret signs admins. `SECKILL_ADMISSION_SECRET` keys admission (raffle entry
/// names, admission tokens) instead of the JWT secret.
#[tokio::test]
async fn the_admin_and_admission_secrets_are_keys_of_their_own() {
    let ns = Namespace::new().await;
    let admission = "the-admission-secret-0123456789abcdef";
    let app = TestApp::builder(&ns)
        .env("SECKILL_ADMIN_JWT_SECRET", ADMIN_SECRET)
        .env("SECKILL_ADMISSION_SECRET", admission)
        .spawn()
        .await;
    let v = app.flash_sale(10).await;
    let shoppers_secret = seckill::http::auth::JwtKeys::new(SECRET);
    let (status, body) = order_with(
        &app,
        v,
        &shoppers_secret.mint(7, seckill::http::auth::Role::Shopper, 600),
    )
    .await;
    assert_eq!(status, StatusCode::ACCEPTED, "a shopper of the JWT secret: {body}");
    let forged = shoppers_secret.mint(7, seckill::http::auth::Role::Admin, 600);
    let (status, body) = app.get("/api/v1/admin/vouchers", Some(&forged)).await;
    assert_eq!(
        (status, code(&body)),
        (StatusCode::UNAUTHORIZED, "unauthorized"),
        "an admin token of the JWT secret: {body}"
    );
    let admin = seckill::http::auth::JwtKeys::new(ADMIN_SECRET).mint(1, seckill::http::auth::Role::Admin, 600);
    let (status, body) = app.get("/api/v1/admin/vouchers", Some(&admin)).await;
    assert_eq!(status, StatusCode::OK, "an admin token of the admin secret: {body}");
    let signer = &app.app().state().admit.signer;
    let label = b"seckill raffle entry v1";
    assert_eq!(
        signer.raffle,
        seckill::admission::signing::mac(admission.as_bytes(), label)
    );
    assert_ne!(
        signer.raffle,
        seckill::admission::signing::mac(SECRET.as_bytes(), label)
    );
}

/// The provider rotates its keys: a token of the new key is taken within
/// seconds (a token naming an unknown `kid` asks for a fetch), and made-up key
/// ids cost at most one fetch per interval.
#[tokio::test]
async fn a_rotated_key_is_followed_and_unknown_kids_cost_few_fetches() {
    let old = SigningKey::p256("2026-old");
    let issuer = Issuer::start(&[&old]).await;
    let ns = Namespace::new().await;
    let app = app_of(&ns, &issuer).await;
    let v = app.flash_sale(100).await;
    let (status, body) = order_with(&app, v, &issuer.token(&old, 1, json!({}))).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let new = SigningKey::p256("2026-new");
    issuer.rotate(&[&new]);
    let fetched = issuer.fetches();
    // Two hundred tokens naming made-up key ids, at once.
    let junk = futures::future::join_all((0..200).map(|i| {
        let token = issuer.token(&SigningKey::ed25519(&format!("junk-{i}")), 1000 + i, json!({}));
        let app = &app;
        async move { order_with(app, v, &token).await.0 }
    }))
    .await;
    assert!(junk.iter().all(|s| *s == StatusCode::UNAUTHORIZED), "{junk:?}");
    let mut user = 10;
    let taken = eventually(Duration::from_secs(15), || {
        user += 1;
        let token = issuer.token(&new, user, json!({}));
        let app = &app;
        async move { (order_with(app, v, &token).await.0 == StatusCode::ACCEPTED).then_some(()) }
    })
    .await;
    assert!(taken.is_some(), "a token of the rotated key ordered within 15 s");
    let extra = issuer.fetches() - fetched;
    println!("rotation: {extra} fetches of the JWKS after 200 unknown key ids and a new key");
    assert!(extra <= 4, "{extra} fetches");
}
