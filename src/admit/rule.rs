//! The raffle's published rule ([`RULE`]): how an entry is named, the hash of
//! the entry list a draw closes, each entry's score, and the winners. Pure
//! functions: anyone holding the seed and the published entries computes the same.
use super::signing::{mac, sha256_hex};

/// The rule, as the API publishes it.
pub const RULE: &str = "check hex(sha256(bytes(seed))) == commitment; list_hash = hex(sha256(the entries \
    sorted ascending, each followed by \"\\n\")); score = hex(sha256(seed + \":\" + list_hash + \":\" + entry)), \
    seed in lower-case hex; sort the entries by (score, entry) ascending; the first `winners` entries win, \
    winners = min(stock, entries)";

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

/// An entry's score under a seed and a list (lower-case hex).
pub fn score_of(seed_hex: &str, list: &str, entry: &str) -> String {
    sha256_hex(format!("{seed_hex}:{list}:{entry}").as_bytes())
}

/// The winning entries among `entries`, best first: the first `k` by (score,
/// entry); and the list's hash.
pub fn winners(seed_hex: &str, entries: &[String], k: usize) -> (Vec<String>, String) {
    let list = list_hash(entries);
    let mut scored: Vec<(String, &String)> = entries.iter().map(|e| (score_of(seed_hex, &list, e), e)).collect();
    scored.sort();
    (scored.into_iter().take(k).map(|(_, e)| e.clone()).collect(), list)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_winners_follow_from_the_seed_and_the_entries_alone() {
        let key = [7u8; 32];
        let entries: Vec<String> = (1..=50).map(|u| entry_of(&key, 9, u)).collect();
        let seed = "00".repeat(32);
        let (w, list) = winners(&seed, &entries, 5);
        assert_eq!(w.len(), 5);
        // Order of the list does not matter.
        let mut reversed = entries.clone();
        reversed.reverse();
        assert_eq!(winners(&seed, &reversed, 5), (w.clone(), list.clone()));
        // Another seed, other winners.
        assert_ne!(winners(&"01".repeat(32), &entries, 5).0, w);
        // One more entry changes every score: the list is part of them.
        let mut more = entries.clone();
        more.push(entry_of(&key, 9, 51));
        assert_ne!(winners(&seed, &more, 5).1, list);
        assert_ne!(
            score_of(&seed, &list_hash(&more), &entries[0]),
            score_of(&seed, &list, &entries[0])
        );
        // More places than entries: everyone wins.
        assert_eq!(winners(&seed, &entries, 100).0.len(), 50);
        // An entry names its shopper only under the key.
        assert_ne!(entry_of(&key, 9, 1), entry_of(&[8u8; 32], 9, 1));
        assert_eq!(entry_of(&key, 9, 1).len(), 64);
    }
}
