//! The public randomness a raffle draws with: one round of a drand beacon chain,
//! named when the sale is created and published after its entries close.
//!
//! A chain is its BLS12-381 public key (on G2, 96 bytes compressed), its genesis
//! time and its period; round `r` is published at `genesis + (r - 1) * period`.
//! A round's signature is a BLS signature on G1 of `sha256(r as 8 bytes big-endian)`,
//! hashed to the curve by RFC 9380 (drand's `bls-unchained-g1-rfc9380` scheme, the
//! League of Entropy's `quicknet`); its randomness is `sha256(signature)`. Nobody,
//! the shop included, knows it before the chain's nodes publish it, and any
//! holder of the public key can check it (`drand-verify`). The default chain is
//! quicknet; a sale that names another chain is only as fair as whoever holds
//! that chain's key, and `seckill raffle verify` says which chain a draw used.
use chrono::{DateTime, TimeZone, Utc};
use drand_verify::{G2PubkeyRfc, Pubkey};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// The League of Entropy's quicknet chain (`https://api.drand.sh/<QUICKNET_HASH>/info`).
pub const QUICKNET_PUBLIC_KEY: &str = "83cf0f2896adee7eb8b5f01fcad3912212c437e0073e911fb90022d3e760183c8c4b450b6a0a6c3ac6a5776a2d1064510d1fec758c921cc22b0e17e63aaf4bcb5ed66304de9cf809bd274ca73bab4af5a6e9c76a4bc09e76eae8991ef5ece45a";
pub const QUICKNET_GENESIS: i64 = 1_692_803_367;
pub const QUICKNET_PERIOD: i32 = 3;
/// quicknet's chain hash, as its HTTP relays name it.
pub const QUICKNET_HASH: &str = "52db9ba70e0cc0f6eaf7803dd07447a1f5477735fd3f661792ba94600c84e971";
/// The longest period a chain may have (a day).
pub const MAX_PERIOD: i32 = 86_400;
/// How long after the entries close the round must be published, at least: the
/// close (fixing the entry list) comes first, with room for a slow close and
/// for clocks. A close that finds the round about to be published moves the
/// raffle to the first round this long after it ([`crate::admission::draw`]).
pub const MARGIN_SECS: i64 = 10;

/// A beacon chain: whose signatures count.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Chain {
    /// The chain's public key: 96 bytes in lower-case hex (a compressed G2 point).
    pub public_key: String,
    /// Unix seconds of round 1.
    pub genesis_time: i64,
    /// Seconds between rounds.
    pub period: i32,
}

impl Chain {
    pub fn quicknet() -> Self {
        Self {
            public_key: QUICKNET_PUBLIC_KEY.into(),
            genesis_time: QUICKNET_GENESIS,
            period: QUICKNET_PERIOD,
        }
    }

    /// Whether this is the League of Entropy's quicknet.
    pub fn is_quicknet(&self) -> bool {
        self.public_key == QUICKNET_PUBLIC_KEY
            && self.genesis_time == QUICKNET_GENESIS
            && self.period == QUICKNET_PERIOD
    }

    /// When round `round` (1-based) is published.
    pub fn round_at(&self, round: i64) -> DateTime<Utc> {
        let secs = self
            .genesis_time
            .saturating_add(round.saturating_sub(1).saturating_mul(i64::from(self.period)));
        Utc.timestamp_opt(secs, 0).single().unwrap_or(DateTime::<Utc>::MAX_UTC)
    }

    /// The first round published strictly after `t`.
    pub fn first_round_after(&self, t: DateTime<Utc>) -> i64 {
        let since = t.timestamp() - self.genesis_time;
        if since < 0 {
            return 1;
        }
        since / i64::from(self.period.max(1)) + 2
    }

    /// The first round published at `t` or later.
    pub fn first_round_from(&self, t: DateTime<Utc>) -> i64 {
        let secs = t.timestamp() + i64::from(t.timestamp_subsec_nanos() > 0);
        let since = secs - self.genesis_time;
        if since <= 0 {
            return 1;
        }
        let period = i64::from(self.period.max(1));
        (since + period - 1) / period + 1
    }

    /// The key, checked to be a point of G2's prime-order subgroup, and not the
    /// identity (whose "signature" of every round is the identity of G1: known to
    /// anyone in advance).
    fn key(&self) -> Result<G2PubkeyRfc, BadBeacon> {
        let bytes = hex::decode(&self.public_key).map_err(|_| BadBeacon::Key)?;
        if bytes.first() == Some(&0xc0) && bytes[1..].iter().all(|b| *b == 0) {
            return Err(BadBeacon::Key);
        }
        G2PubkeyRfc::from_variable(&bytes).map_err(|_| BadBeacon::Key)
    }

    /// Checks the public key (at a sale's creation).
    pub fn check(&self) -> Result<(), BadBeacon> {
        self.key().map(|_| ())
    }

    /// The randomness of `round` (lower-case hex) if `signature_hex` is the
    /// chain's signature of it. A pairing check: milliseconds of CPU.
    pub fn verify(&self, round: i64, signature_hex: &str) -> Result<String, BadBeacon> {
        let key = self.key()?;
        let sig = hex::decode(signature_hex).map_err(|_| BadBeacon::Signature)?;
        let round = u64::try_from(round).map_err(|_| BadBeacon::Signature)?;
        match key.verify(round, b"", &sig) {
            Ok(true) => Ok(hex::encode(drand_verify::derive_randomness(&sig))),
            _ => Err(BadBeacon::Signature),
        }
    }
}

/// The chain a raffle's row names (`beacon_key`, `beacon_genesis`,
/// `beacon_period`), if it names one; and its round (`beacon_round`), if any.
pub fn of_row(row: &sqlx::postgres::PgRow) -> Result<(Option<Chain>, Option<i64>), sqlx::Error> {
    use sqlx::Row;
    let chain = match (
        row.try_get::<Option<String>, _>("beacon_key")?,
        row.try_get::<Option<i64>, _>("beacon_genesis")?,
        row.try_get::<Option<i32>, _>("beacon_period")?,
    ) {
        (Some(public_key), Some(genesis_time), Some(period)) => Some(Chain {
            public_key,
            genesis_time,
            period,
        }),
        _ => None,
    };
    Ok((chain, row.try_get("beacon_round")?))
}

/// A chain and the round of it a raffle draws with.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, ToSchema)]
pub struct Beacon {
    #[serde(flatten)]
    pub chain: Chain,
    /// The round whose signature draws the raffle: published after `draw_at`.
    pub round: i64,
    /// When the round is published.
    pub round_at: DateTime<Utc>,
}

impl Beacon {
    pub fn new(chain: Chain, round: i64) -> Self {
        let round_at = chain.round_at(round);
        Self { chain, round, round_at }
    }
}

/// What is wrong with a chain or a round's signature.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum BadBeacon {
    #[error("not a BLS12-381 G2 public key (192 hex digits)")]
    Key,
    #[error("not the chain's signature of this round")]
    Signature,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quicknet_round_123_verifies_and_its_neighbours_do_not() {
        // https://api3.drand.sh/52db9ba70e0cc0f6eaf7803dd07447a1f5477735fd3f661792ba94600c84e971/public/123
        let sig = "b75c69d0b72a5d906e854e808ba7e2accb1542ac355ae486d591aa9d43765482e26cd02df835d3546d23c4b13e0dfc92";
        let chain = Chain::quicknet();
        chain.check().unwrap();
        let r = chain.verify(123, sig).unwrap();
        assert_eq!(r.len(), 64);
        assert_eq!(chain.verify(124, sig), Err(BadBeacon::Signature));
        assert_eq!(chain.verify(123, "00"), Err(BadBeacon::Signature));
        assert_eq!(chain.verify(123, "zz"), Err(BadBeacon::Signature));
        let bad = Chain {
            public_key: "00".repeat(96),
            ..Chain::quicknet()
        };
        assert_eq!(bad.check(), Err(BadBeacon::Key));
        // The identity of G2 is a point, and would make every round known.
        let identity = Chain {
            public_key: format!("c0{}", "00".repeat(95)),
            ..Chain::quicknet()
        };
        assert_eq!(identity.check(), Err(BadBeacon::Key));
    }

    #[test]
    fn rounds_and_their_times() {
        let c = Chain {
            public_key: String::new(),
            genesis_time: 1000,
            period: 3,
        };
        assert_eq!(c.round_at(1).timestamp(), 1000);
        assert_eq!(c.round_at(3).timestamp(), 1006);
        let at = |s| Utc.timestamp_opt(s, 0).unwrap();
        for t in [0, 999, 1000, 1001, 1002, 1003, 1005, 1006, 5000] {
            let r = c.first_round_after(at(t));
            assert!(c.round_at(r) > at(t), "round {r} at {t}");
            assert!(
                r == 1 || c.round_at(r - 1) <= at(t),
                "round {r} is not the first after {t}"
            );
        }
    }
}
