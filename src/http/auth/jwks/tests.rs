//! An identity provider's key set: which keys are taken from it, and which key
//! a token is checked with.
use super::*;

const ED_X: &str = "11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo";

fn algs(json: &str) -> Vec<(Option<String>, Algorithm)> {
    parse(json.as_bytes())
        .unwrap()
        .into_iter()
        .map(|k| (k.kid, k.alg))
        .collect()
}

/// Only asymmetric signing keys are taken: a published HMAC key (`oct`) would
/// let anyone sign, a key for encryption signs nothing, and a key naming an
/// algorithm of another family (an Ed25519 key "HS256") is left out.
#[test]
fn only_asymmetric_signing_keys_are_taken() {
    let set = format!(
        r#"{{"keys": [
            {{"kty": "oct", "kid": "hmac", "k": "c2VjcmV0"}},
            {{"kty": "OKP", "crv": "Ed25519", "kid": "enc", "use": "enc", "x": "{ED_X}"}},
            {{"kty": "OKP", "crv": "Ed25519", "kid": "confused", "alg": "HS256", "x": "{ED_X}"}},
            {{"kty": "OKP", "crv": "Ed25519", "kid": "ed", "x": "{ED_X}"}}
        ]}}"#
    );
    assert_eq!(algs(&set), vec![(Some("ed".into()), Algorithm::EdDSA)]);
    let none = r#"{"keys": [{"kty": "oct", "kid": "hmac", "k": "c2VjcmV0"}]}"#;
    let err = parse(none.as_bytes()).err().expect("no usable key").to_string();
    assert!(err.contains("no usable signing key"), "{err}");
    assert!(parse(b"not json").is_err());
}

/// A token's key: the one its `kid` names, of the token's algorithm; without a
/// `kid`, every key of that algorithm; before the first fetch, none (503).
#[tokio::test]
async fn a_tokens_key_is_the_one_its_kid_names() {
    let dir = std::env::temp_dir().join(format!("seckill-jwks-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("jwks.json");
    let jwks = Jwks::new(path.to_str().unwrap(), Duration::from_secs(1));
    assert_eq!(
        jwks.keys_for(Some("ed"), Algorithm::EdDSA).err(),
        Some(NoKey::NotLoaded)
    );
    assert!(jwks.fetch().await.is_err(), "no file yet");
    std::fs::write(
        &path,
        format!(r#"{{"keys": [{{"kty": "OKP", "crv": "Ed25519", "kid": "ed", "x": "{ED_X}"}}]}}"#),
    )
    .unwrap();
    assert_eq!(jwks.fetch().await.unwrap(), 1);
    assert_eq!(
        jwks.keys_for(Some("ed"), Algorithm::EdDSA).map(|k| k.len()).ok(),
        Some(1)
    );
    assert_eq!(jwks.keys_for(None, Algorithm::EdDSA).map(|k| k.len()).ok(), Some(1));
    assert!(matches!(
        jwks.keys_for(Some("ed"), Algorithm::ES256),
        Err(NoKey::Refused(_))
    ));
    assert!(matches!(
        jwks.keys_for(Some("other"), Algorithm::EdDSA),
        Err(NoKey::Refused(_))
    ));
    assert!(matches!(jwks.keys_for(None, Algorithm::RS256), Err(NoKey::Refused(_))));
    std::fs::remove_dir_all(&dir).unwrap();
}
