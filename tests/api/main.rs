//! One integration-test binary: every test starts the real application against
//! the real PostgreSQL, Redis and RabbitMQ in a namespace of its own.
mod docs;
mod faults;
mod foundation;
mod helpers;
mod lifecycle;
mod limits;
mod locks;
mod orders;
mod pipeline;
mod sequences;
