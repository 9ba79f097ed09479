//! An identity provider's signing keys (`SECKILL_JWKS`: a JWKS file or URL):
//! shopper tokens signed with them (RS256, ES256, EdDSA, and the RSA and EC
//! variants jsonwebtoken knows) are verified here, with `iss` and `aud` required.
//!
//! The set is fetched at start and again every [`REFRESH`]; a token naming a key
//! id the set does not hold asks for a fetch at once (at most one every
//! [`MISS_REFRESH`]: an identity provider that rotated its keys is followed within
//! seconds, a flood of made-up key ids costs one fetch per interval). Until a
//! first fetch succeeds, such tokens are answered 503 (the keys are not known
//! yet), never 401. Symmetric keys (`kty: oct`) and keys for encryption are never
//! taken from the set: a published HMAC key would let anyone sign.
use super::hs256::Refusal;
use anyhow::{bail, Context, Result};
use jsonwebtoken::jwk::{AlgorithmParameters, EllipticCurve, Jwk, JwkSet, PublicKeyUse};
use jsonwebtoken::{Algorithm, DecodingKey};
use sha2::Digest;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// How often the set is fetched again.
pub const REFRESH: Duration = Duration::from_secs(300);
/// Largest JWKS read (a real one is a few kB).
pub const MAX_JWKS_BYTES: usize = 1 << 20;

/// Soonest a fetch follows another when a token names an unknown key id, and the
/// retry interval until a first fetch succeeds.
pub const MISS_REFRESH: Duration = Duration::from_secs(5);

/// One verifying key of the set.
#[derive(Clone)]
pub struct Key {
    pub kid: Option<String>,
    pub alg: Algorithm,
    pub key: DecodingKey,
}

/// Why a token of the identity provider has no key to be checked with.
#[derive(Debug, PartialEq, Eq)]
pub enum NoKey {
    /// No fetch of the set has succeeded yet: 503.
    NotLoaded,
    /// The set holds no key for the token: 401.
    Refused(Refusal),
}

enum Source {
    File(std::path::PathBuf),
    Url(String),
}

/// The keys of `SECKILL_JWKS`, refreshed in the background.
pub struct Jwks {
    source: Source,
    keys: RwLock<Option<Arc<Vec<Key>>>>,
    /// A token named a key id the set does not hold.
    missed: tokio::sync::Notify,
    http: reqwest::Client,
    /// Bumped each time a fetch finds a set other than the last one (the
    /// verified-token memory is forgotten then: a key withdrawn takes its
    /// tokens with it).
    generation: std::sync::atomic::AtomicU64,
    /// SHA-256 of the last set read.
    last: std::sync::Mutex<Option<[u8; 32]>>,
}

impl Jwks {
    /// For `source`, a URL (`http://`, `https://`) or a file path; nothing is
    /// read until [`Jwks::fetch`].
    pub fn new(source: &str, timeout: Duration) -> Self {
        let source = if source.starts_with("http://") || source.starts_with("https://") {
            Source::Url(source.to_owned())
        } else {
            Source::File(source.into())
        };
        Self {
            source,
            keys: RwLock::new(None),
            missed: tokio::sync::Notify::new(),
            http: reqwest::Client::builder()
                .timeout(timeout)
                .build()
                .expect("an HTTP client with rustls"),
            generation: std::sync::atomic::AtomicU64::new(0),
            last: std::sync::Mutex::new(None),
        }
    }

    /// Which set the keys are: changes whenever a fetch finds another one.
    pub fn generation(&self) -> u64 {
        self.generation.load(std::sync::atomic::Ordering::Acquire)
    }

    /// A token's signature did not match the key its `kid` names: the provider
    /// may have rotated that key under the same id, so fetch again soon (as for
    /// an unknown `kid`, at most every [`MISS_REFRESH`]).
    pub fn suspect(&self) {
        self.missed.notify_one();
    }

    /// Reads the set from its source and, if it holds at least one usable key,
    /// puts it in place of the last. Returns how many keys it holds.
    pub async fn fetch(&self) -> Result<usize> {
        let body = match &self.source {
            Source::File(path) => tokio::fs::read(path)
                .await
                .with_context(|| format!("reading the JWKS file {}", path.display()))?,
            Source::Url(url) => {
                let mut resp = self
                    .http
                    .get(url)
                    .send()
                    .await
                    .with_context(|| format!("fetching {url}"))?;
                if !resp.status().is_success() {
                    bail!("fetching {url}: {}", resp.status());
                }
                let mut body = Vec::new();
                while let Some(chunk) = resp.chunk().await.with_context(|| format!("reading {url}"))? {
                    body.extend_from_slice(&chunk);
                    if body.len() > MAX_JWKS_BYTES {
                        bail!("{url}: a JWKS larger than {MAX_JWKS_BYTES} bytes");
                    }
                }
                body
            }
        };
        let keys = parse(&body)?;
        let n = keys.len();
        let digest: [u8; 32] = sha2::Sha256::digest(&body).into();
        let mut keys_now = self.keys.write().unwrap_or_else(|e| e.into_inner());
        let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        if *last != Some(digest) {
            *last = Some(digest);
            self.generation.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        }
        *keys_now = Some(Arc::new(keys));
        Ok(n)
    }

    /// Whether a fetch has succeeded.
    pub fn loaded(&self) -> bool {
        self.keys.read().unwrap_or_else(|e| e.into_inner()).is_some()
    }

    /// The keys that may have signed a token whose header names `kid` and `alg`:
    /// the key with that id (its algorithm must be `alg`), or, without a `kid`,
    /// every key of `alg`.
    pub fn keys_for(&self, kid: Option<&str>, alg: Algorithm) -> Result<Vec<Key>, NoKey> {
        let keys = self
            .keys
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
            .ok_or(NoKey::NotLoaded)?;
        let found: Vec<Key> = match kid {
            Some(kid) => {
                let Some(k) = keys.iter().find(|k| k.kid.as_deref() == Some(kid)) else {
                    self.missed.notify_one();
                    return Err(NoKey::Refused("no key of the identity provider has this kid"));
                };
                if k.alg != alg {
                    return Err(NoKey::Refused("the algorithm is not the key's"));
                }
                vec![k.clone()]
            }
            None => keys.iter().filter(|k| k.alg == alg).cloned().collect(),
        };
        if found.is_empty() {
            return Err(NoKey::Refused("no key of the identity provider for this algorithm"));
        }
        Ok(found)
    }

    /// Fetches the set again every [`REFRESH`], and at most every
    /// [`MISS_REFRESH`] when a token named an unknown key id or no fetch has
    /// succeeded yet, until `stop`. A failed fetch keeps the keys it had.
    pub async fn run(self: Arc<Self>, stop: CancellationToken) {
        let mut last = Instant::now();
        loop {
            let wait = if self.loaded() { REFRESH } else { MISS_REFRESH };
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(wait) => {}
                _ = self.missed.notified() => {
                    let soonest = last + MISS_REFRESH;
                    tokio::select! {
                        _ = stop.cancelled() => return,
                        _ = tokio::time::sleep_until(soonest.into()) => {}
                    }
                }
            }
            last = Instant::now();
            match self.fetch().await {
                Ok(n) => tracing::debug!(keys = n, "JWKS fetched"),
                Err(e) => tracing::warn!(error = %format!("{e:#}"), "JWKS not fetched; keeping the keys it had"),
            }
        }
    }
}

/// The usable keys of a JWKS document: asymmetric signing keys whose algorithm
/// is named (`alg`) or follows from the key (RSA: RS256, P-256: ES256, P-384:
/// ES384, Ed25519: EdDSA). A set without one is an error.
pub fn parse(json: &[u8]) -> Result<Vec<Key>> {
    let set: JwkSet = serde_json::from_slice(json).context("the JWKS is not a JSON Web Key Set")?;
    let keys: Vec<Key> = set.keys.iter().filter_map(usable).collect();
    if keys.is_empty() {
        bail!(
            "the JWKS holds no usable signing key (RSA, EC P-256/P-384 or Ed25519) among {}",
            set.keys.len()
        );
    }
    Ok(keys)
}

fn usable(jwk: &Jwk) -> Option<Key> {
    if matches!(jwk.common.public_key_use, Some(PublicKeyUse::Encryption)) {
        return None;
    }
    let implied = match &jwk.algorithm {
        AlgorithmParameters::RSA(_) => Algorithm::RS256,
        AlgorithmParameters::EllipticCurve(p) => match p.curve {
            EllipticCurve::P256 => Algorithm::ES256,
            EllipticCurve::P384 => Algorithm::ES384,
            _ => return None,
        },
        AlgorithmParameters::OctetKeyPair(p) if p.curve == EllipticCurve::Ed25519 => Algorithm::EdDSA,
        _ => return None,
    };
    let alg = match jwk.common.key_algorithm {
        None => implied,
        Some(named) => {
            let named = Algorithm::try_from(named).ok()?;
            // The named algorithm must be one of the key's family (an RSA key may
            // name PS256 or RS512; an EC or Ed25519 key only its own; never HS256).
            let same = match implied {
                Algorithm::RS256 => matches!(
                    named,
                    Algorithm::RS256
                        | Algorithm::RS384
                        | Algorithm::RS512
                        | Algorithm::PS256
                        | Algorithm::PS384
                        | Algorithm::PS512
                ),
                _ => named == implied,
            };
            if !same {
                return None;
            }
            named
        }
    };
    let key = DecodingKey::from_jwk(jwk).ok()?;
    Some(Key {
        kid: jwk.common.key_id.clone(),
        alg,
        key,
    })
}

#[cfg(test)]
mod tests;
