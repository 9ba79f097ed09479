//! One integration-test binary: every test starts the real application against
//! the real PostgreSQL, Redis and RabbitMQ in a namespace of its own. `helpers` is
//! the harness (start there), `fixtures` the servers and processes a test runs of
//! its own; every other module tests one part of the service, its doc says which.
mod audit;
mod clock;
mod console;
mod docs;
mod faults;
mod fixtures;
mod foundation;
mod helpers;
mod lifecycle;
mod limits;
mod locks;
mod orders;
mod pause;
mod persist;
mod pipeline;
mod repair;
mod replication;
mod rollback;
mod sequences;
mod shards;
mod topups;
