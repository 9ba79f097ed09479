//! The raffle's published rule ([`RULE`]): how an entry is named, the hash of
//! the entry list the close fixes, each entry's score under the beacon's
//! randomness, and the winners. Pure functions: anyone holding the published
//! seed, beacon round and entries computes the same (`seckill raffle verify` does).
use super::signing::{mac, sha256_hex};

/// The rule, as the API publishes it (and docs/ADMISSION.md spells out).
pub const RULE: &str = "1. check hex(sha256(bytes(seed))) == commitment. 2. check the beacon: signature is \
    the chain's BLS12-381 signature on G1 of sha256(round as 8 bytes big-endian), hashed to G1 by RFC 9380 with \
    DST \"BLS_SIG_BLS12381G1_XMD:SHA-256_SSWU_RO_NUL_\" (drand's bls-unchained-g1-rfc9380), checked against \
    public_key; randomness = hex(sha256(bytes(signature))). 3. list_hash = hex(sha256(the entries sorted \
    ascending, each followed by \"\\n\")). 4. score = hex(sha256(randomness + \":\" + seed + \":\" + list_hash + \
    \":\" + entry)), every value in lower-case hex. 5. sort the entries by (score, entry) ascending; the first \
    `winners` win; winners = min(the sale's total stock at draw_at, entries), fixed and published when the \
    entries close.";

/// The rule of raffles drawn before beacons (no `beacon` in their summary).
pub const RULE_WITHOUT_BEACON: &str = "check hex(sha256(bytes(seed))) == commitment; list_hash = hex(sha256(the \
    entries sorted ascending, each followed by \"\\n\")); score = hex(sha256(seed + \":\" + list_hash + \":\" + \
    entry)), seed in lower-case hex; sort the entries by (score, entry) ascending; the first `winners` entries \
    win, winners = min(stock, entries)";

/// An entry as the API shows it, under the service's raffle key.
pub fn entry_of(key: &[u8], voucher: i64, user: i64) -> String {
    hex::encode(mac(key, format!("{voucher}:{user}").as_bytes()))
}

/// The hash of an entry list: SHA-256 of the entries in ascending order, each
/// followed by a line feed.
pub fn list_hash(entries: &[String]) -> String {
    let mut sorted: Vec<&String> = entries.iter().collect();
    sorted.sort();
    let text: String = sorted.into_iter().map(|e| format!("{e}\n")).collect();
    sha256_hex(text.as_bytes())
}

/// What every score hashes before its entry: `randomness:seed:list_hash:` (all
/// lower-case hex); `randomness` None for a raffle drawn before beacons.
pub fn score_prefix(randomness: Option<&str>, seed_hex: &str, list: &str) -> String {
    match randomness {
        Some(r) => format!("{r}:{seed_hex}:{list}:"),
        None => format!("{seed_hex}:{list}:"),
    }
}

/// An entry's score under a prefix ([`score_prefix`]), in lower-case hex.
pub fn score_of(prefix: &str, entry: &str) -> String {
    sha256_hex(format!("{prefix}{entry}").as_bytes())
}

/// The winning entries among `entries`, best first: the first `k` by (score, entry).
pub fn winners(prefix: &str, entries: &[String], k: usize) -> Vec<String> {
    let mut scored: Vec<(String, &String)> = entries.iter().map(|e| (score_of(prefix, e), e)).collect();
    scored.sort();
    scored.into_iter().take(k).map(|(_, e)| e.clone()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_winners_follow_from_the_seed_and_the_entries_alone() {
        let key = [7u8; 32];
        let entries: Vec<String> = (1..=50).map(|u| entry_of(&key, 9, u)).collect();
        let seed = "00".repeat(32);
        let list = list_hash(&entries);
        let randomness = "ab".repeat(32);
        let prefix = score_prefix(Some(&randomness), &seed, &list);
        let w = winners(&prefix, &entries, 5);
        assert_eq!(w.len(), 5);
        // Order of the list does not matter.
        let mut reversed = entries.clone();
        reversed.reverse();
        assert_eq!(list_hash(&reversed), list);
        assert_eq!(winners(&prefix, &reversed, 5), w);
        // Another beacon, other winners; another seed, other winners.
        assert_ne!(
            winners(&score_prefix(Some(&"ac".repeat(32)), &seed, &list), &entries, 5),
            w
        );
        assert_ne!(
            winners(&score_prefix(Some(&randomness), &"01".repeat(32), &list), &entries, 5),
            w
        );
        // One more entry changes every score: the list is part of them.
        let mut more = entries.clone();
        more.push(entry_of(&key, 9, 51));
        assert_ne!(list_hash(&more), list);
        assert_ne!(
            score_of(&score_prefix(Some(&randomness), &seed, &list_hash(&more)), &entries[0]),
            score_of(&prefix, &entries[0])
        );
        // More places than entries: everyone wins.
        assert_eq!(winners(&prefix, &entries, 100).len(), 50);
        // Before beacons: seed and list only.
        assert_eq!(score_prefix(None, &seed, &list), format!("{seed}:{list}:"));
        // An entry names its shopper only under the key.
        assert_ne!(entry_of(&key, 9, 1), entry_of(&[8u8; 32], 9, 1));
        assert_eq!(entry_of(&key, 9, 1).len(), 64);
    }
}
