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
//! - **The sequence.** Every shard (a hash tag: one sale of one shard, or one shard
//!   of a sharded sale) has a sequence, `<ns>:{<tag>}:seq` = `gen * 2^32 + writes`.
//!   Every script that writes the shard (an order, a return, a top-up, a move, a
//!   repair's step) bumps it in the same atomic step and returns it. `gen` is the
//!   sale's generation in Postgres (`sale_states`): a repair takes the next one.
//! - **The floors.** Every caller passes its *floor* for the shard: the highest
//!   sequence it has seen of it ([`floors::Floors`]: from its own scripts' replies,
//!   from the outbox entries its relay read (each carries the sequence its call
//!   left), and once a second from Postgres: the floors every relay recorded with
//!   its intents (`shard_floors`) and each sale's generation). A shard whose
//!   sequence is below the caller's floor went back in time: the script refuses,
//!   writes nothing, and closes the shard (drops its stock key) in the same step, so
//!   that no caller sells from it whatever it knows. A shard whose stock key is
//!   missing (lost, or closed) refuses every caller. So a loss is caught at the
//!   first call that touches the lost state and knows of it, in the call that would
//!   have used it; no periodic check decides anything.
//! - **What is caught.** Every write some caller saw (its reply raised that caller's
//!   floor) is caught by that caller's next call on the shard; every write a relay
//!   recorded an intent for (and so every order published or stored) is caught by
//!   every process once its floors are refreshed (within a second), and at once by
//!   the process whose relay read it. With `SECKILL_REDIS_WAIT_REPLICAS=0` and no
//!   `appendfsync always`, a write acknowledged by one process and lost before
//!   anyone else saw it is beyond any detector; and another process that never saw
//!   the lost writes may sell from the rolled-back shard until the first call that
//!   knows of them closes it (the orders it admits in between are real, relayed
//!   and stored; where they meet a unit or shopper of a lost-but-relayed order,
//!   Postgres refuses them as `failed`, an incident). With `WAIT 1` (and a replica
//!   left to wait for) or `appendfsync always`, an acknowledged write is not lost,
//!   so none of this can happen; `DEBUG RELOAD` is caught by the first call of any
//!   process that saw a later write.
//! - **A Redis event that lost nothing closes nothing.** A restart with its data,
//!   a failover to a replica that has every write, a reconnect: every shard is at
//!   or above every floor, every script goes on. Requests in flight at the moment
//!   get a 503 (their connection broke); nothing is repaired.
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
