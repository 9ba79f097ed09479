//! The epoch guard: what the check and the repair of one process work with.
use super::durability::Durability;
use crate::broker::Broker;
use crate::keys::Keys;
use crate::redis_conn::Redis;
use crate::voucher::cache::VoucherCache;
use sqlx::PgPool;
use std::sync::Arc;
use std::time::Duration;

pub struct EpochGuard {
    pub redis: Redis,
    pub pg: PgPool,
    pub keys: Keys,
    pub cache: Arc<VoucherCache>,
    pub broker: Arc<Broker>,
    /// How often a repair's barrier looks again at what it waits for.
    pub poll: Duration,
    pub metrics: Arc<crate::metrics::Metrics>,
    pub durability: std::sync::RwLock<Option<Durability>>,
}

impl EpochGuard {
    pub(super) fn namespace(&self) -> &str {
        self.keys.namespace()
    }
}
