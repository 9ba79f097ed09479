//! [`Signer`]: the keys of fair admission, each derived for one purpose from one
//! root ([`root_of`]: `SECKILL_ADMISSION_SECRET`, or one derived from the JWT
//! secrets) as HMAC-SHA256 of the root and a label, so that a shopper's
//! token is never an admission token, a queue ticket never either, a proof of
//! work's signature signs nothing else, and raffle entries name shoppers under a
//! key of their own.
use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};

type HmacSha256 = Hmac<Sha256>;

/// The derived keys.
pub struct Signer {
    pub(super) admission: [u8; 32],
    pub(super) ticket: [u8; 32],
    pub(super) altcha: [u8; 32],
    /// Names raffle entries (see [`super::raffle::entry_of`]).
    pub raffle: [u8; 32],
}

impl Signer {
    pub fn new(root: &str) -> Self {
        Self {
            admission: mac(root.as_bytes(), b"seckill admission token v1"),
            ticket: mac(root.as_bytes(), b"seckill queue ticket v1"),
            altcha: mac(root.as_bytes(), b"seckill altcha v1"),
            raffle: mac(root.as_bytes(), b"seckill raffle entry v1"),
        }
    }
}

/// The root the admission keys are derived from: `SECKILL_ADMISSION_SECRET`; else,
/// when `SECKILL_ADMIN_JWT_SECRET` is set apart, a key derived from both JWT
/// secrets (whoever issues shopper tokens holds `SECKILL_JWT_SECRET` and must not
/// be able to make admission tokens, tickets, challenges or entry names); else
/// `SECKILL_JWT_SECRET` itself.
pub fn root_of(s: &crate::config::Auth) -> String {
    let jwt = s.jwt_secret.expose();
    match (&s.admission_secret, &s.admin_jwt_secret) {
        (Some(own), _) => own.expose().to_owned(),
        (None, Some(admin)) if admin.expose() != jwt => hex::encode(mac(
            admin.expose().as_bytes(),
            format!("seckill admission root v1:{jwt}").as_bytes(),
        )),
        _ => jwt.to_owned(),
    }
}

/// HMAC-SHA256 of `msg` under `key`.
pub fn mac(key: &[u8], msg: &[u8]) -> [u8; 32] {
    let mut m = HmacSha256::new_from_slice(key).expect("HMAC takes a key of any length");
    m.update(msg);
    m.finalize().into_bytes().into()
}

/// Whether `tag` (hex) is the HMAC-SHA256 of `msg` under `key`, compared in
/// constant time.
pub fn mac_matches(key: &[u8], msg: &[u8], tag_hex: &str) -> bool {
    let Ok(tag) = hex::decode(tag_hex) else {
        return false;
    };
    let mut m = HmacSha256::new_from_slice(key).expect("HMAC takes a key of any length");
    m.update(msg);
    m.verify_slice(&tag).is_ok()
}

/// Lower-case hex SHA-256 of `data`.
pub fn sha256_hex(data: &[u8]) -> String {
    hex::encode(Sha256::digest(data))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_purpose_has_its_own_key() {
        let s = Signer::new("a secret of at least thirty-two bytes!!");
        assert_ne!(s.admission, s.ticket);
        assert_ne!(s.ticket, s.altcha);
        assert_ne!(s.altcha, s.raffle);
        assert_ne!(
            Signer::new("another secret of thirty-two bytes!!!").admission,
            s.admission
        );
    }

    #[test]
    fn a_mac_matches_only_its_message_and_key() {
        let tag = hex::encode(mac(b"k", b"m"));
        assert!(mac_matches(b"k", b"m", &tag));
        assert!(!mac_matches(b"k", b"n", &tag));
        assert!(!mac_matches(b"j", b"m", &tag));
        assert!(!mac_matches(b"k", b"m", "not hex"));
        // The known SHA-256 of "abc".
        assert_eq!(
            sha256_hex(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
