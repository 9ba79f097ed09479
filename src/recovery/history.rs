//! What this process knows of each shard's history: points (sequence, name) of
//! writes it saw, which every script it runs on the shard checks (`lua/history.lua`).
//!
//! A shard's history is its sequence (`gen * 2^32 + k`, the k-th write of
//! generation `gen`) and the name of each write of the generation: 8 random bytes
//! the writer drew, kept by the shard at the write's place. A point is held when
//! the shard is of a newer generation, or of the same one with its write at the
//! point's place bearing the point's name: so a caller tells "the shard holds the
//! history I saw" from "the shard holds another history of the same length", which
//! a count alone cannot (after Redis went back, the next write of anyone takes the
//! very sequence the lost write had).
//!
//! Per shard this process keeps a *head*, a point every call here has checked or
//! written on top of (each check of the head checks everything before it: a
//! shard's state is always a prefix of one history), and the points it learnt
//! since and has not checked yet: points of concurrent calls' writes, of the
//! entries its relay read, of what other processes recorded in Postgres. Every
//! call passes them all; the script refuses (and closes the shard) when it no
//! longer holds one, and once it passed them, they are all before the call's own
//! point, which becomes the head.
mod call;
mod point;
mod reading;
mod shard;

pub use call::Call;
pub use point::{fresh_name, gen_of, Name, Point, Snapshot, GEN, NO_NAME};
pub use reading::{read_shard, record, ShardRead, SHARD_READ_SOURCE};
pub use shard::{Histories, ShardHistory, LOG};

#[cfg(test)]
mod tests;
