//! A Redis handle: one connection shared by its callers, made anew when it broke.
//!
//! A connection that failed (or whose server answers as no writable master) is
//! marked broken and the next caller opens a new one, reading first who answers: a
//! single node must be a master (a demoted one refuses writes), a cluster's masters
//! and their slots are read so that a master that does not answer stops only its
//! own slots ([`cluster_identity`]). Which server answers decides nothing else:
//! whether its state can be trusted is judged shard by shard, by the scripts
//! themselves ([`crate::recovery`]), so a restart with all data or a failover to a
//! replica that has every write goes on at once.
//!
//! Every command has a response deadline. The connection is made on the runtime
//! that created the handle (the main one): actix-web runs each HTTP worker on a
//! runtime of its own, and a connection born there would die with that worker when
//! the server stops, while the relay and worker still need it. The one exception
//! is [`Redis::on_this_thread`], the order path's handle per HTTP worker thread.
mod cluster_identity;
mod cluster_map;
mod conn;
mod connect;
mod handle;
mod in_sync;
mod masters;
mod replicated;
mod routing;
mod run_id;
mod servers;
mod verdict;
pub use cluster_map::MasterSlots;
pub use conn::Conn;
pub use handle::Redis;
pub use in_sync::{in_sync_of, InSync};
pub use masters::MasterFacts;
pub use replicated::script_and_wait;
pub use verdict::{breaks_connection, connection_lost, is_transient};
