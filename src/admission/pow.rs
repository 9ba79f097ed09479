//! A price for bots: a proof of work in the ALTCHA challenge format
//! (<https://altcha.org/docs/v2/server-integration/>), which client widgets
//! already solve.
//!
//! The challenge is stateless: `salt` carries the sale, the shopper, the
//! difficulty (`maxnumber`) and an expiry as URL parameters, and ends with `&`
//! (so that digits moved from `number` to the end of `salt`, which leave the
//! hash as it was, cannot stretch the last parameter); `challenge` is
//! `hex(SHA-256(salt + number))` for a secret random `number` in
//! `0..=maxnumber`; `signature` is `hex(HMAC-SHA256(key, challenge))`. The
//! client finds `number` by trying them and sends back the payload (base64 of
//! the JSON `{algorithm, challenge, number, salt, signature}`). A solution is
//! accepted for its sale and shopper only, before its expiry, and only if its
//! difficulty is at least the sale's now: a challenge from before the admin
//! raised it, or one a client made easier, is refused. Replaying a solution gets
//! nothing more: a shopper has one place in a queue and one entry in a raffle.
use super::signing::{mac, mac_matches, sha256_hex, Signer};
use base64::Engine;
use rand::Rng;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// How long a challenge may be solved for, in seconds.
pub const CHALLENGE_TTL_SECS: u64 = 600;
/// The hardest difficulty an admin may set (`maxnumber`): some ten million
/// SHA-256 in the worst case, a few seconds in a browser.
pub const MAX_DIFFICULTY: i64 = 10_000_000;

/// An ALTCHA challenge.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct Challenge {
    /// Always `SHA-256`.
    pub algorithm: String,
    /// `hex(SHA-256(salt + number))`.
    pub challenge: String,
    /// The difficulty: `number` is in `0..=maxnumber`.
    pub maxnumber: i64,
    /// Random, then `?sale=…&user=…&max=…&expires=…&` (unix seconds).
    pub salt: String,
    /// `hex(HMAC-SHA256(challenge))` under the service's key.
    pub signature: String,
}

/// What the client sends back (base64 of this JSON).
#[derive(Debug, Serialize, Deserialize)]
pub struct Solution {
    pub algorithm: String,
    pub challenge: String,
    pub number: u64,
    pub salt: String,
    pub signature: String,
}

/// Why a solution was refused (for people).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refused {
    Missing,
    /// Not a solution of a challenge this service issued to this shopper for this
    /// sale: forged, wrong, or someone else's.
    Invalid(&'static str),
    /// A solution of the service's own challenge, no longer good: expired, or
    /// below the sale's difficulty now.
    Stale(&'static str),
}

impl Signer {
    /// A challenge of `difficulty` for `user` in `sale`, expiring `CHALLENGE_TTL_SECS` after `now`.
    pub fn challenge(&self, sale: i64, user: i64, difficulty: i64, now: u64) -> Challenge {
        let mut rng = rand::rng();
        let nonce: [u8; 12] = rng.random();
        let difficulty = difficulty.clamp(1, MAX_DIFFICULTY);
        let number = rng.random_range(0..=difficulty as u64);
        let salt = format!(
            "{}?sale={sale}&user={user}&max={difficulty}&expires={}&",
            hex::encode(nonce),
            now + CHALLENGE_TTL_SECS
        );
        let challenge = sha256_hex(format!("{salt}{number}").as_bytes());
        let signature = hex::encode(mac(&self.altcha, challenge.as_bytes()));
        Challenge {
            algorithm: "SHA-256".into(),
            challenge,
            maxnumber: difficulty,
            salt,
            signature,
        }
    }

    /// Checks a payload (base64 JSON, as ALTCHA widgets send it) for `user` in
    /// `sale` at `difficulty` now.
    pub fn check_solution(
        &self,
        payload: &str,
        sale: i64,
        user: i64,
        difficulty: i64,
        now: u64,
    ) -> Result<(), Refused> {
        let raw = base64::engine::general_purpose::STANDARD
            .decode(payload.trim())
            .map_err(|_| Refused::Invalid("the proof of work is not base64"))?;
        let s: Solution =
            serde_json::from_slice(&raw).map_err(|_| Refused::Invalid("the proof of work is not an ALTCHA payload"))?;
        if s.algorithm != "SHA-256" {
            return Err(Refused::Invalid("the proof of work's algorithm is not SHA-256"));
        }
        if !mac_matches(&self.altcha, s.challenge.as_bytes(), &s.signature) {
            return Err(Refused::Invalid("the challenge was not issued by this service"));
        }
        if sha256_hex(format!("{}{}", s.salt, s.number).as_bytes()) != s.challenge {
            return Err(Refused::Invalid("the number does not solve the challenge"));
        }
        let param = |name: &str| -> Option<&str> {
            let (_, query) = s.salt.split_once('?')?;
            query.split('&').find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
        };
        let num = |name: &str| param(name).and_then(|v| v.parse::<i64>().ok());
        if num("sale") != Some(sale) {
            return Err(Refused::Invalid("the challenge is for another sale"));
        }
        if num("user") != Some(user) {
            return Err(Refused::Invalid("the challenge is another shopper's"));
        }
        match num("expires") {
            Some(e) if e >= 0 && (e as u64) > now => {}
            _ => return Err(Refused::Stale("the challenge has expired")),
        }
        match num("max") {
            Some(m) if m >= difficulty => Ok(()),
            _ => Err(Refused::Stale("the proof of work is below the sale's difficulty")),
        }
    }
}

/// Solves a challenge by trying every number (what a client widget does).
pub fn solve(c: &Challenge) -> Option<u64> {
    (0..=c.maxnumber.max(0) as u64).find(|n| sha256_hex(format!("{}{n}", c.salt).as_bytes()) == c.challenge)
}

/// The payload a client sends for `number`, the solution of `c`.
pub fn payload(c: &Challenge, number: u64) -> String {
    let s = Solution {
        algorithm: c.algorithm.clone(),
        challenge: c.challenge.clone(),
        number,
        salt: c.salt.clone(),
        signature: c.signature.clone(),
    };
    base64::engine::general_purpose::STANDARD.encode(serde_json::to_vec(&s).expect("a solution serialises"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn signer() -> Signer {
        Signer::new("a secret of at least thirty-two bytes!!")
    }

    #[test]
    fn a_solved_challenge_is_accepted_for_its_sale_and_shopper_only() {
        let s = signer();
        let c = s.challenge(5, 9, 500, 1_000);
        let n = solve(&c).expect("solvable");
        let p = payload(&c, n);
        assert_eq!(s.check_solution(&p, 5, 9, 500, 1_000), Ok(()));
        assert!(s.check_solution(&p, 6, 9, 500, 1_000).is_err());
        assert!(s.check_solution(&p, 5, 8, 500, 1_000).is_err());
        // Expired.
        assert!(s.check_solution(&p, 5, 9, 500, 1_000 + CHALLENGE_TTL_SECS).is_err());
        // The admin raised the difficulty since.
        assert!(s.check_solution(&p, 5, 9, 501, 1_000).is_err());
        // A wrong number.
        let wrong = payload(&c, if n == 0 { 1 } else { n - 1 });
        assert!(s.check_solution(&wrong, 5, 9, 500, 1_000).is_err());
        assert!(s.check_solution("", 5, 9, 500, 1_000).is_err());
    }

    #[test]
    fn digits_moved_from_the_number_to_the_salt_do_not_stretch_the_expiry() {
        let s = signer();
        // A challenge whose number has two digits at least.
        let (c, n) = (0..100)
            .map(|_| s.challenge(5, 9, 500, 1_000))
            .map(|c| {
                let n = solve(&c).unwrap();
                (c, n)
            })
            .find(|(_, n)| *n >= 10 && n.to_string().as_bytes()[1] != b'0')
            .expect("a number of two digits");
        // sha256(salt + number) is the same when leading digits of the number move
        // onto the end of the salt; the salt's last parameter must not absorb them.
        let text = n.to_string();
        let (head, tail) = text.split_at(1);
        let moved = Challenge {
            salt: format!("{}{head}", c.salt),
            ..c.clone()
        };
        let p = payload(&moved, tail.parse().unwrap());
        assert_eq!(
            s.check_solution(&p, 5, 9, 500, 1_000),
            Ok(()),
            "the moved digit still solves it"
        );
        let later = 1_000 + CHALLENGE_TTL_SECS + 1;
        assert!(
            s.check_solution(&p, 5, 9, 500, later).is_err(),
            "expiry stretched by a moved digit"
        );
    }

    #[test]
    fn a_challenge_made_easier_by_the_client_is_refused() {
        let s = signer();
        let c = s.challenge(5, 9, 100_000, 1_000);
        // The client rewrites the salt to a lower max and makes its own challenge
        // hash: the signature no longer matches.
        let salt = c.salt.replace("max=100000", "max=1");
        let easy = Challenge {
            challenge: sha256_hex(format!("{salt}0").as_bytes()),
            salt,
            maxnumber: 1,
            ..c.clone()
        };
        assert!(s.check_solution(&payload(&easy, 0), 5, 9, 100_000, 1_000).is_err());
        // A challenge signed under another secret.
        let other = Signer::new("another secret of thirty-two bytes!!!").challenge(5, 9, 10, 1_000);
        let n = solve(&other).unwrap();
        assert!(s.check_solution(&payload(&other, n), 5, 9, 10, 1_000).is_err());
    }
}
