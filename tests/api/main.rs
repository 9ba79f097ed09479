//! One integration-test binary: every test starts the real application against
//! the real PostgreSQL, Redis and RabbitMQ in a namespace of its own. `helpers` is
//! the harness (start there), `fixtures` the servers and processes a test runs of
//! its own; every other module tests one part of the service, its doc says which.
mod admission;
mod audit;
mod browse;
mod clock;
mod coalesce;
mod console;
mod conventions;
mod cost;
mod counter_ranges;
mod cut_off;
mod dead_letters;
mod deploy;
mod docs;
mod failback;
mod faults;
mod fixtures;
mod floods;
mod foundation;
mod frozen;
mod helpers;
mod isolation;
mod lifecycle;
mod limits;
mod locks;
mod memory_alarm;
mod mixed_faults;
mod nemesis;
mod order_indexes;
mod orders;
mod pause;
mod persist;
mod pipeline;
mod pressure;
mod readiness;
mod relay_batches;
mod repair;
mod replication;
mod rollback;
mod sequences;
mod shards;
mod topups;
mod transient;
mod voucher_key;
mod went_back;
