//! Secrets: the [`Secret`] that hides its value from `Debug`, and the rules of the
//! JWT secret (the development one, the shortest accepted).
use std::fmt;

/// The development JWT secret used when `SECKILL_JWT_SECRET` is not set.
pub const DEV_JWT_SECRET: &str = "seckill-development-secret-do-not-use-in-production";

/// The shortest `SECKILL_JWT_SECRET` accepted.
pub const MIN_JWT_SECRET_BYTES: usize = 32;

/// A string that must not reach a log line.
#[derive(Clone)]
pub struct Secret(String);

impl Secret {
    pub fn new(s: impl Into<String>) -> Self {
        Self(s.into())
    }
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(***)")
    }
}
