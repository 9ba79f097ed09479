//! Tokens verified lately: a shopper sends the same token with every retry all
//! through a sale, and looking it up costs a fraction of an HMAC and two JSON
//! parses.
use super::caller::Caller;

/// Tokens that passed verification, with what they say, until they expire. Keyed
/// by the whole token, so only the very bytes that were verified match. Bounded:
/// when full it starts again empty (a verification is the cost of a miss).
pub(super) struct RecentTokens {
    pub(super) shards: Vec<std::sync::Mutex<TokenShard>>,
    per_shard: usize,
}

/// Token -> (what it says, its `exp`).
type TokenShard = std::collections::HashMap<Box<str>, (Caller, u64)>;

/// Tokens kept in all.
pub(super) const RECENT_TOKENS: usize = 32_768;
const RECENT_SHARDS: usize = 16;

impl RecentTokens {
    pub(super) fn new() -> Self {
        Self {
            shards: (0..RECENT_SHARDS).map(|_| Default::default()).collect(),
            per_shard: RECENT_TOKENS / RECENT_SHARDS,
        }
    }

    fn shard(&self, token: &str) -> &std::sync::Mutex<TokenShard> {
        // The signature's last bytes are as good as random.
        let b = token.as_bytes();
        let h = b
            .iter()
            .rev()
            .take(4)
            .fold(0usize, |h, &c| h.wrapping_mul(31).wrapping_add(c as usize));
        &self.shards[h % self.shards.len()]
    }

    pub(super) fn get(&self, token: &str, now: u64) -> Option<Caller> {
        let shard = self.shard(token).lock().expect("token cache poisoned");
        // Valid through its `exp` second, as jsonwebtoken judges it with no leeway.
        shard.get(token).filter(|(_, exp)| *exp >= now).map(|(c, _)| *c)
    }

    /// Forgets every token (the keys they were verified with changed).
    pub(super) fn clear(&self) {
        for shard in &self.shards {
            shard.lock().expect("token cache poisoned").clear();
        }
    }

    pub(super) fn put(&self, token: &str, caller: Caller, exp: u64) {
        let mut shard = self.shard(token).lock().expect("token cache poisoned");
        if shard.len() >= self.per_shard {
            shard.clear();
        }
        shard.insert(token.into(), (caller, exp));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::auth::Role;

    #[test]
    fn the_remembered_tokens_stay_bounded() {
        let recent = RecentTokens::new();
        for u in 1..=(RECENT_TOKENS as i64 * 2) {
            recent.put(
                &format!("token-{u}"),
                Caller {
                    user_id: u,
                    role: Role::Shopper,
                },
                u64::MAX,
            );
        }
        let held: usize = recent.shards.iter().map(|s| s.lock().unwrap().len()).sum();
        assert!(held <= RECENT_TOKENS, "{held} tokens held");
    }
}
