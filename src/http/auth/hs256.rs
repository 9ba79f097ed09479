//! HS256 verification in one pass, for the token every shopper's request carries.
//!
//! `jsonwebtoken::decode` keys HMAC-SHA-256 afresh for every token (two of the
//! six SHA-256 blocks a shopper's token costs), parses the header into its full
//! type, and parses the claims twice (once to validate, once to return them). In
//! the cost bench, where every token is new, that was 13.8 % of the API process
//! (docs/PERFORMANCE.md). Here the key's HMAC state is made once and cloned, a
//! header that is byte for byte the one this service mints is not parsed again,
//! and the claims are parsed once. The crates do the work (`hmac`, `sha2`,
//! `base64`, `serde_json`); this file only puts the steps in order.
//!
//! What it accepts is what `jsonwebtoken::decode` with this service's
//! `Validation` accepted (`tests.rs` holds the two side by side on crafted
//! tokens), except a non-integer `nbf`, which it refuses. A header other than the
//! minted one is parsed as jsonwebtoken parsed it (its `Header`), and both parts
//! must be JSON objects (serde would also read a struct from a JSON array).
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use hmac::{Hmac, Mac};
use sha2::Sha256;

/// The header of a token this service mints, as jsonwebtoken writes it.
const MINTED_HEADER: &str = r#"{"typ":"JWT","alg":"HS256"}"#;

/// Longest signature segment read: an HS256 signature is 43 characters.
const SIGNATURE_CHARS: usize = 64;

/// Why a token was refused (its signature, its shape, or a claim).
pub(super) type Refusal = &'static str;

/// Verifies HS256 signatures with one secret.
pub(super) struct Hs256 {
    /// HMAC-SHA-256 with the secret already absorbed.
    keyed: Hmac<Sha256>,
    /// [`MINTED_HEADER`], base64url-encoded.
    minted_header: String,
}

impl Hs256 {
    pub(super) fn new(secret: &[u8]) -> Self {
        Self {
            keyed: Hmac::new_from_slice(secret).expect("HMAC takes a key of any length"),
            minted_header: URL_SAFE_NO_PAD.encode(MINTED_HEADER),
        }
    }

    /// The algorithm `token`'s header names (HS256 at once for the header this
    /// service mints), to pick the key that checks it.
    pub(super) fn alg_of(&self, token: &str) -> Result<jsonwebtoken::Algorithm, Refusal> {
        let header = token.split('.').next().unwrap_or_default();
        if header == self.minted_header {
            return Ok(jsonwebtoken::Algorithm::HS256);
        }
        let json = URL_SAFE_NO_PAD.decode(header).map_err(|_| "header is not base64url")?;
        if !is_object(&json) {
            return Err("header is not a JSON object");
        }
        let h: jsonwebtoken::Header = serde_json::from_slice(&json).map_err(|_| "header is not a JWT header")?;
        Ok(h.alg)
    }

    /// The decoded claims of `token` (`header.claims.signature`, base64url
    /// without padding) if its header names HS256 and its signature is this
    /// secret's over `header.claims`.
    pub(super) fn claims_of(&self, token: &str) -> Result<Vec<u8>, Refusal> {
        let mut parts = token.split('.');
        let (Some(header), Some(claims), Some(signature), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err("not three dot-separated parts");
        };
        if header != self.minted_header {
            let json = URL_SAFE_NO_PAD.decode(header).map_err(|_| "header is not base64url")?;
            if !is_object(&json) {
                return Err("header is not a JSON object");
            }
            let h: jsonwebtoken::Header = serde_json::from_slice(&json).map_err(|_| "header is not a JWT header")?;
            if h.alg != jsonwebtoken::Algorithm::HS256 {
                return Err("algorithm is not HS256");
            }
        }
        if signature.len() > SIGNATURE_CHARS {
            return Err("signature is too long");
        }
        let mut sig = [0u8; SIGNATURE_CHARS];
        let n = URL_SAFE_NO_PAD
            .decode_slice(signature, &mut sig)
            .map_err(|_| "signature is not base64url")?;
        let mut mac = self.keyed.clone();
        mac.update(header.as_bytes());
        mac.update(b".");
        mac.update(claims.as_bytes());
        mac.verify_slice(&sig[..n]).map_err(|_| "signature does not match")?;
        let json = URL_SAFE_NO_PAD.decode(claims).map_err(|_| "claims are not base64url")?;
        if !is_object(&json) {
            return Err("claims are not a JSON object");
        }
        Ok(json)
    }
}

/// Whether `json` can only be a JSON object (the parser checks the rest).
fn is_object(json: &[u8]) -> bool {
    json.trim_ascii_start().first() == Some(&b'{')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_minted_header_is_what_jsonwebtoken_writes() {
        let header = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256);
        assert_eq!(serde_json::to_string(&header).unwrap(), MINTED_HEADER);
    }
}
