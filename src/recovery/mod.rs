//! Redis losing state or going back in time, judged shard by shard from facts held
//! where the state is, and repaired sale by sale without waiting for anyone.
//!
//! Redis can lose keys (a flush, a restart without persistence) or go back in time
//! (a restart from an older snapshot or an `everysec` AOF, a failover to a replica
//! that missed writes, `DEBUG RELOAD`, a master that resynced from a lagging
//! replica). Neither is told by the server's identity: a restart with all its data
//! or a failover to a replica that has every write changes the `run_id` and lost
//! nothing, and a rollback inside one process keeps it. So nothing here looks at
//! which server answers. It looks at the shards:
//!
//! - **The history.** Every shard (a hash tag: one sale of one shard, or one
//!   shard of a sharded sale) has a sequence, `<ns>:{<tag>}:seq` = `gen * 2^32 +
//!   k`, and names each write of the generation: 8 random bytes its writer drew,
//!   kept at the write's place in `<ns>:{<tag>}:hist`. Every script that writes
//!   the shard (an order, a return, a top-up, a move, a repair's step) checks its
//!   caller's points, names its write and bumps the sequence in the same atomic
//!   step (`lua/history.lua`). `gen` is the sale's generation in Postgres
//!   (`sale_states`): a repair takes the next one.
//! - **The points.** Every caller passes the points (sequence, name) of the
//!   history it saw ([`history::Histories`]: its own scripts' replies, the outbox
//!   entries its relay read, and, once a second, the points every relay and side
//!   write recorded in Postgres, `shard_points`). A shard that no longer holds one
//!   (same generation, but another name at that place, or a shorter sequence)
//!   went back in time: the script refuses, writes nothing, and closes the shard
//!   (drops its stock key) in the same step, so that no caller sells from it
//!   whatever it knows. A count could not tell: after Redis went back, the next
//!   write of anyone takes the very sequence the lost write had; a name differs.
//!   Owner lookups read the shard the same way (`lua/shard_read.lua`), so a shard
//!   that went back answers 503, never "no such order". No periodic check decides
//!   anything: the loss is caught by the call that would have used it.
//! - **What is caught** (each case with its test: `docs/ARCHITECTURE.md`, "What is
//!   caught, exactly"): a write some process saw, by that process's next call on
//!   the shard, whoever wrote since; a write a relay recorded an intent for, by
//!   every process once its points are refreshed; an acknowledged order no relay
//!   read, from the acknowledging process's log of the shard. Not caught: with
//!   `SECKILL_REDIS_WAIT_REPLICAS=0` and no `appendfsync always`, a write
//!   acknowledged by one process that dies before it notices the loss.
//! - **A Redis event that lost nothing closes nothing.** A restart with its data,
//!   a failover to a replica that has every write, a reconnect: every shard holds
//!   every point, every script goes on. Requests in flight at the moment get a
//!   503 (their connection broke); nothing is repaired.
//!
//! A shard found lost or behind closes its sale in this process ([`closed`]) and
//! asks for a repair of that sale ([`desk::Recovery::lost`]). One process at a time
//! repairs a sale (a lease per sale in Postgres, taken without waiting, renewed at
//! each step); every process that closed it checks the sale itself before
//! reopening it. A repair
//! ([`repair`]) closes only that sale's shards, waits for nobody, and rebuilds them
//! from facts Postgres and the outboxes hold:
//!
//! 1. takes the sale's next generation in Postgres and resets every shard to it
//!    (drops its state, keeps its outbox; fenced: an older repair's later steps are
//!    refused);
//! 2. reads, in this order, the orders still in the shards' outboxes, the orders
//!    of the relays' intents (published or about to be: each intent names each
//!    order's shopper and time), and Postgres's orders, stock and top-ups in one
//!    snapshot. An order is in its outbox until its relay's publish was confirmed,
//!    which is after its intent was recorded, and in its intent until the
//!    transaction that stores it deletes the intent: read in this order, every
//!    order that was admitted and not lost is found, however long a worker holds
//!    it (no barrier, no waiting on frozen or slow processes, no lock a worker
//!    holds);
//! 3. writes each shard back: the shoppers' marks and the count of admitted
//!    orders (Postgres's and those in flight), the returned orders, the top-ups
//!    Postgres counts, and the stock: Postgres's stock less the orders in flight,
//!    split over the shards; orders found in an intent only back into their
//!    outbox, to be published again; each step fenced by the exact sequence the
//!    previous one left;
//! 4. reopens the sale and records how long it was closed (`sale_states`).
//!
//! An order in flight across the repair was counted by it: the worker stores it
//! like any other. An order a relay read before the repair and had not recorded
//! yet is refused at its intent (the sale's generation moved) and settled by the
//! relay (`crate::ordering::outbox::relay::read_before_repair`). A stock return or a top-up Postgres committed before the
//! snapshot is counted too (the rebuilt `returned` and `topups` sets name it), so
//! applying it later adds nothing; one committed after is applied after the sale
//! reopens.
pub mod closed;
pub mod desk;
mod durability;
mod generations;
pub mod history;
mod lease;
mod quarantine;
mod repair;
mod rescue;
mod restore;
pub mod side;
mod snapshot;
mod task;

pub use desk::Recovery;

/// A sale's shard is being rebuilt (or was found lost): what it would answer is
/// not known until the repair reopens it. Answered 503 with `Retry-After`.
#[derive(Debug, thiserror::Error)]
#[error("this sale's state is being repaired; try again shortly")]
pub struct Repairing;
pub use durability::{durability, Durability};
pub use generations::GENERATIONS_HELD;
pub use history::{gen_of, Histories, Point, GEN};
