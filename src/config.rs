//! Typed settings, read once at start-up from the environment and validated.
//!
//! The names of CONTRACT.md are fixed; the rest (`SECKILL_*`) tune the pipeline and
//! default to values that suit the local services. Secrets are never printed: the
//! `Debug` of [`Secret`] hides its value.
mod bind;
mod groups;
mod list;
mod read;
mod secret;
mod settings;
#[cfg(test)]
mod tests;

pub use list::comma_list;
pub use secret::{Secret, DEV_JWT_SECRET, MIN_JWT_SECRET_BYTES};
pub use settings::{
    Auth, Guards, Http, Pipeline, SaleRules, Services, Settings, DEFAULT_JWT_MAX_TTL_SECS, NEWEST_OUTBOX_FORMAT,
};
