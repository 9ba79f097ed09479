//! Redis Cluster and replicated acknowledgements: several sales at once (their keys
//! in several hash slots), and `SECKILL_REDIS_WAIT_REPLICAS`. These run on one
//! node and, with `TEST_REDIS_CLUSTER` set (the test command does), on the local
//! cluster of `scripts/redis_cluster.sh`.
use crate::faults::crowd::{after_the_fault, assert_persisted, crowd, settle, Landing, Steady};
use crate::fixtures::{signal, spawn_serve_binary, spawn_worker_binary, OwnCluster, OwnRedis};
use crate::helpers::*;
use futures::future::join_all;
use reqwest::StatusCode;
use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

mod acknowledged;
mod failover;
mod masters;
