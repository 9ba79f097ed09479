//! Admission tokens and queue tickets: HS256 JWTs under keys of their own
//! ([`Signer`]), checked in process.
//!
//! An admission token says that shopper `sub` may order sale `sale` until `exp`,
//! and, a queue's, longer by every pause of the sale after it was made (`paused`:
//! the queue's pauses in total when it was made, in ms; see
//! `migrations/0025_queue_clock.sql`):
//! the order endpoint of a queue or raffle sale requires one (header
//! `X-Admission-Token`). A queue ticket says that shopper `sub` holds `place` in
//! sale `sale`'s queue (`place` absent for an early arrival before the seal), so
//! that a poll needs no lookup of the place.
use super::signing::Signer;
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use serde::{Deserialize, Serialize};

#[derive(Debug, Serialize, Deserialize)]
struct AdmissionClaims {
    sub: String,
    sale: String,
    exp: u64,
    typ: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    paused: Option<i64>,
}

#[derive(Debug, Serialize, Deserialize)]
struct TicketClaims {
    sub: String,
    sale: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    place: Option<i64>,
    exp: u64,
    typ: String,
}

/// Why a token was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refused {
    /// Past its `exp`.
    Expired,
    /// Forged, malformed, of another kind, another shopper's or another sale's:
    /// the reason, for people.
    Invalid(&'static str),
}

const ADMISSION: &str = "admission";
const TICKET: &str = "queue_ticket";

fn validation() -> Validation {
    let mut v = Validation::new(Algorithm::HS256);
    v.leeway = 0;
    v.validate_aud = false;
    v.set_required_spec_claims(&["exp"]);
    v
}

fn sign(claims: &impl Serialize, key: &[u8]) -> String {
    jsonwebtoken::encode(&Header::new(Algorithm::HS256), claims, &EncodingKey::from_secret(key))
        .expect("HS256 signs any claims")
}

impl Signer {
    /// An admission token for `user` to order `sale` until `exp` (unix seconds);
    /// with `paused_ms` (a queue's pauses so far), longer by the pauses after it.
    pub fn admission_token(&self, user: i64, sale: i64, exp: u64, paused_ms: Option<i64>) -> String {
        let claims = AdmissionClaims {
            sub: user.to_string(),
            sale: sale.to_string(),
            exp,
            typ: ADMISSION.into(),
            paused: paused_ms,
        };
        sign(&claims, &self.admission)
    }

    /// Checks that `token` lets `user` order `sale` at `now` (unix seconds, the
    /// process's clock); `paused_ms`: the sale's queue's pauses that ended, in
    /// total (0 for a sale without a queue).
    pub fn check_admission(&self, token: &str, user: i64, sale: i64, paused_ms: i64, now: u64) -> Result<(), Refused> {
        let mut v = validation();
        // Checked below, with the pauses since the token was made.
        v.validate_exp = false;
        let data = jsonwebtoken::decode::<AdmissionClaims>(token, &DecodingKey::from_secret(&self.admission), &v)
            .map_err(|_| Refused::Invalid("not an admission token of this service"))?;
        let c = data.claims;
        if c.typ != ADMISSION {
            return Err(Refused::Invalid("not an admission token"));
        }
        if c.sale != sale.to_string() {
            return Err(Refused::Invalid("the admission token is for another sale"));
        }
        if c.sub != user.to_string() {
            return Err(Refused::Invalid("the admission token is another shopper's"));
        }
        let since = c.paused.map_or(0, |then| (paused_ms - then).max(0) as u64 / 1000);
        if now > c.exp.saturating_add(since) {
            return Err(Refused::Expired);
        }
        Ok(())
    }

    /// A queue ticket for `user`'s `place` (None before the seal) in `sale`, valid
    /// until `exp`.
    pub fn ticket(&self, user: i64, sale: i64, place: Option<i64>, exp: u64) -> String {
        let claims = TicketClaims {
            sub: user.to_string(),
            sale: sale.to_string(),
            place,
            exp,
            typ: TICKET.into(),
        };
        sign(&claims, &self.ticket)
    }

    /// The place a ticket holds for `user` in `sale` at `now` (unix seconds, the
    /// process's clock): `Ok(None)` for an early arrival's ticket from before the
    /// seal.
    pub fn read_ticket(&self, ticket: &str, user: i64, sale: i64, now: u64) -> Result<Option<i64>, Refused> {
        let mut v = validation();
        // Checked below, on the process's clock.
        v.validate_exp = false;
        let data = jsonwebtoken::decode::<TicketClaims>(ticket, &DecodingKey::from_secret(&self.ticket), &v)
            .map_err(|_| Refused::Invalid("not a queue ticket of this service"))?;
        let c = data.claims;
        if now > c.exp {
            return Err(Refused::Expired);
        }
        if c.typ != TICKET {
            return Err(Refused::Invalid("not a queue ticket"));
        }
        if c.sale != sale.to_string() {
            return Err(Refused::Invalid("the ticket is for another sale"));
        }
        if c.sub != user.to_string() {
            return Err(Refused::Invalid("the ticket is another shopper's"));
        }
        Ok(c.place)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &str = "a secret of at least thirty-two bytes!!";
    /// The checks' clock (unix seconds): the process's, given to each.
    const NOW: u64 = 1_800_000_000;

    fn later() -> u64 {
        NOW + 60
    }

    #[test]
    fn an_admission_token_admits_its_shopper_to_its_sale_only() {
        let s = Signer::new(SECRET);
        let t = s.admission_token(7, 100, later(), None);
        assert_eq!(s.check_admission(&t, 7, 100, 0, NOW), Ok(()));
        assert!(matches!(
            s.check_admission(&t, 8, 100, 0, NOW),
            Err(Refused::Invalid(_))
        ));
        assert!(matches!(
            s.check_admission(&t, 7, 101, 0, NOW),
            Err(Refused::Invalid(_))
        ));
        let old = s.admission_token(7, 100, NOW - 1, None);
        assert_eq!(s.check_admission(&old, 7, 100, 0, NOW), Err(Refused::Expired));
        // Another secret: forged.
        let forged = Signer::new("another secret of thirty-two bytes!!!").admission_token(7, 100, later(), None);
        assert!(matches!(
            s.check_admission(&forged, 7, 100, 0, NOW),
            Err(Refused::Invalid(_))
        ));
        // A ticket is not an admission token, nor the reverse.
        let ticket = s.ticket(7, 100, Some(3), later());
        assert!(matches!(
            s.check_admission(&ticket, 7, 100, 0, NOW),
            Err(Refused::Invalid(_))
        ));
        assert!(matches!(s.read_ticket(&t, 7, 100, NOW), Err(Refused::Invalid(_))));
        assert!(matches!(
            s.check_admission("garbage", 7, 100, 0, NOW),
            Err(Refused::Invalid(_))
        ));
    }

    /// A ticket is read on the clock it is given: good through the second its
    /// `exp` names, expired after.
    #[test]
    fn a_ticket_expires_on_the_clock_it_is_read_with() {
        let s = Signer::new(SECRET);
        let t = s.ticket(7, 100, Some(3), NOW);
        assert_eq!(s.read_ticket(&t, 7, 100, NOW), Ok(Some(3)));
        assert_eq!(s.read_ticket(&t, 7, 100, NOW + 1), Err(Refused::Expired));
        assert!(matches!(s.read_ticket(&t, 8, 100, NOW), Err(Refused::Invalid(_))));
    }

    /// A queue's token is good longer by the sale's pauses after it was made (and
    /// not by those before); a token without the claim (a raffle's) is not.
    #[test]
    fn a_pause_after_the_token_lengthens_it() {
        let s = Signer::new(SECRET);
        let now = NOW;
        // Made when the queue had been paused 5 s in all, 10 s ago by its `exp`.
        let t = s.admission_token(7, 100, now - 10, Some(5_000));
        assert_eq!(s.check_admission(&t, 7, 100, 5_000, NOW), Err(Refused::Expired));
        assert_eq!(
            s.check_admission(&t, 7, 100, 14_000, NOW),
            Err(Refused::Expired),
            "9 s of pause"
        );
        assert_eq!(
            s.check_admission(&t, 7, 100, 20_000, NOW),
            Ok(()),
            "15 s of pause since"
        );
        // Fewer pauses than it names (a stale cache): never shorter than its exp.
        let fresh = s.admission_token(7, 100, later(), Some(5_000));
        assert_eq!(s.check_admission(&fresh, 7, 100, 0, NOW), Ok(()));
        let raffle = s.admission_token(7, 100, now - 10, None);
        assert_eq!(s.check_admission(&raffle, 7, 100, 60_000, NOW), Err(Refused::Expired));
    }

    #[test]
    fn a_ticket_reads_back_its_place_for_its_shopper_and_sale() {
        let s = Signer::new(SECRET);
        assert_eq!(
            s.read_ticket(&s.ticket(7, 100, Some(3), later()), 7, 100, NOW),
            Ok(Some(3))
        );
        assert_eq!(s.read_ticket(&s.ticket(7, 100, None, later()), 7, 100, NOW), Ok(None));
        assert!(s.read_ticket(&s.ticket(7, 100, Some(3), later()), 8, 100, NOW).is_err());
        assert!(s.read_ticket(&s.ticket(7, 100, Some(3), later()), 7, 9, NOW).is_err());
    }
}
