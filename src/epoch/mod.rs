//! Redis epochs: noticing that Redis may have gone back in time, and repairing
//! every flash sale before selling again.
//!
//! Redis can lose or roll back what it acknowledged: a restart without persistence
//! or from an older snapshot, an AOF written with `appendfsync everysec`, a failover
//! to a replica that missed the last writes, a flush, a master that resyncs from a
//! replica that fell behind and is promoted again (the same process). The guard of
//! every process checks, once a second and whenever a connection meets a new server
//! ([`crate::redis_conn`]):
//!
//! - Postgres (`redis_epochs`) records the server `run_id` and epoch it vouches for;
//! - Redis holds the epoch in `<ns>:epoch`, and every flash sale still on holds
//!   its stock key;
//! - the Redis clock (`<ns>:{<ns>:epoch}:clock`) is at or above the highest value
//!   Postgres recorded (`redis_clocks`). Each healthy check advances it and records
//!   the new value: a server that went back to a state from before the last
//!   recorded value is caught, whatever its `run_id` and marker say. Postgres is
//!   read before Redis, and a value is recorded only after Redis returned it, so a
//!   check racing another never sees a healthy server behind (see `clock`). Cost:
//!   one script in the check's existing Redis pipeline and one small Postgres
//!   UPDATE per check, i.e. per process and second.
//!
//! A new process or a missing marker is caught whatever the clock says; the clock
//! catches what keeps both, as a fail-back in the same process does. It does not
//! catch a rollback to a state after the last recorded value (writes of the last
//! check interval at most), nor sales in the moment between such a server coming
//! back and the next check.
//!
//! On one node the server is its `run_id` alone. Not its `role`: a connection is
//! made only to a master, and the check's tick is a write, which a replica refuses
//! (the connection breaks and is not made again until it is a master). Not its
//! `master_replid` either: it changes with a promotion, but also with no change of
//! data at all (a master without replicas for `repl-backlog-ttl` takes a new one),
//! and every such change would repair every sale for nothing; a promotion that
//! brought older data is caught by the clock. On a cluster the identity is every
//! master's `run_id/master_replid` ([`crate::redis_conn`]) and the clock lives on
//! the master of the marker's slot: a rollback of another master shows as a change
//! of its identity (a clock per master would have to follow slots as they move).
//!
//! All agree: the process trusts the server at that epoch (sales open). Anything
//! else: it stops selling (503), and one process at a time (a Postgres advisory
//! lock, which does not live in the Redis being repaired) repairs:
//!
//! 0. decides which sales to repair (`scope.rs`): on a cluster only those with a
//!    shard on a master whose identity changed, plus any missing a stock key; the
//!    others sell on through the repair (`Verified::scope`, `repair_scope`), and
//!    every step below concerns only the repaired sales;
//! 1. takes a new epoch in Postgres for this server, marked `repairing` (counters,
//!    whose keys carry the epoch, restart from their durable marks at once);
//! 2. waits until every order a relay published, or was about to, before that
//!    epoch is in Postgres or still in its outbox (the barrier: relays record
//!    their intents under the epoch row, see `barrier.rs`), however long a slow
//!    or frozen worker holds them;
//! 3. sale by sale, each in a transaction holding that sale's row: reads its
//!    orders from Postgres and the orders still in its outbox stream, and rewrites
//!    the sale in Redis (stock = Postgres stock − orders in the outbox, shoppers'
//!    marks, the order index, returned units), each write fenced by the epoch (the
//!    sales were closed, every shard's stock key dropped, as soon as the epoch was
//!    taken: a process that cannot reach Postgres sells nothing meanwhile);
//! 4. in one short transaction holding the epoch row: writes the epoch marker and
//!    the clock (at the value Postgres recorded); clears `repairing`.
//!
//! An order that was in a relay's or worker's hands across the repair carries the
//! old epoch; the worker accounts for it in Redis before storing it (see
//! [`crate::worker::persist`]).
mod barrier;
mod check;
mod clock;
mod durability;
mod guard;
mod repair;
mod restore;
mod row;
mod scope;
mod watch;

pub use durability::{durability, Durability};
pub use guard::EpochGuard;
pub use restore::read_outbox;
pub use row::{read_row, EpochRow};
pub use watch::CHECK_EVERY;
