//! A Redis handle that knows which server it talks to.
//!
//! Redis can go back in time: a restart from an older snapshot, an AOF written with
//! `appendfsync everysec`, a failover to a replica that missed the last writes. Each
//! of these is a *new server process*, so it can only be reached over a new TCP
//! connection. This handle therefore never reconnects behind its callers' backs (as
//! redis-rs's `ConnectionManager` does): a connection that failed is marked broken,
//! the next caller opens a new one, and before anyone uses it the handle reads the
//! server's `run_id`. [`Identity`] records which server (run id) the service has
//! verified and repaired, and for which epoch (see [`crate::epoch`]); callers that
//! must not touch an unrepaired server ([`Redis::verified`]) get the connection
//! together with the epoch it was verified for, or nothing.
//!
//! Every command has a response deadline. The connection is made on the runtime
//! that created the handle (the main one): actix-web runs each HTTP worker on a
//! runtime of its own, and a connection born there would die with that worker when
//! the server stops, while the relay and worker still need it. The one exception
//! is [`Redis::on_this_thread`], the order path's handle per HTTP worker thread.
mod access;
mod cluster_identity;
mod cluster_map;
mod conn;
mod connect;
mod handle;
mod identity;
mod masters;
mod routing;
mod run_id;
mod servers;
mod verdict;
pub use cluster_map::MasterSlots;
pub use conn::Conn;
pub use handle::Redis;
pub use identity::{Identity, Verified};
pub use masters::MasterFacts;
pub use verdict::{breaks_connection, is_transient};
