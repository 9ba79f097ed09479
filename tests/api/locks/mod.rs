//! Distributed locks against the real Redis: mutual exclusion across instances,
//! reentrancy, the watchdog and leases, fencing tokens, waiters woken by a release
//! (one per release) or polling when they hear none,
//! per-user serialization of pay and cancel, and singleton jobs that move when their
//! instance dies.
use crate::helpers::*;
use seckill::http::error::ApiError;
use seckill::locks::{fence, ReleaseError};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// An API-only instance whose watchdog-kept locks have a 600 ms lease.
async fn instance(ns: &Namespace) -> TestApp {
    TestApp::builder(ns)
        .env("SECKILL_LOCK_LEASE_MS", "600")
        .api_only()
        .spawn()
        .await
}

mod exclusion;
mod waking;
