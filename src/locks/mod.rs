//! Distributed locks with the semantics Redisson's `RLock` users know, plus fencing
//! tokens.
//!
//! - An [`Owner`] is one holder identity (instance + task), never a thread id; an
//!   owner may take a lock it holds again (reentrant) and it is free after as many
//!   releases.
//! - [`Owner::lock`] waits as long as it takes; [`Owner::try_lock`] waits at most
//!   `wait`. Without an explicit lease a watchdog renews the lease every third of it
//!   while the guard lives; a holder that dies loses the lock when the lease runs out.
//! - Release is a compare-and-delete in Lua: a non-owner's release changes nothing and
//!   is reported, as is the release of a lock whose lease ran out.
//! - Every grant carries a fencing token that grows with each grant of that lock;
//!   [`fence`] offers writes (Postgres row, Redis key) that refuse older tokens.
//! - Waiting does not spin: a release publishes the lock's name, one subscription per
//!   process wakes one local waiter of that lock (the longest waiting, FIFO), and a
//!   waiter otherwise sleeps until the holder's lease would run out (at most 1 s),
//!   then tries again. Waking one, not all: with N waiters, waking all would make
//!   each release cost N script calls (N² for the queue to drain), of which one
//!   could win. A wake-up only shortens waiting: a waiter that misses one (a lost
//!   message, a newcomer that took the lock first) still polls until its wait ends.
pub mod fence;
mod owner;
mod service;
pub mod singleton;
pub mod user;

pub use owner::{LockGuard, Owner};
pub use service::{LockService, ReleaseError};
