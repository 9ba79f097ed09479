//! [`Reports`]: the reports as the edges call them.
use super::books::{self, Lookup};
use crate::broker::Broker;
use crate::id::VoucherId;
use crate::keys::Keys;
use crate::redis_conn::Redis;
use anyhow::Result;
use sqlx::PgPool;
use std::sync::Arc;

/// The reports' service (a clone is one reference more).
#[derive(Clone)]
pub struct Reports(Arc<ReportsParts>);

/// What [`Reports`] is made of.
pub struct ReportsParts {
    /// The request handlers' pool.
    pub pg: PgPool,
    pub redis: Redis,
    pub keys: Keys,
    pub broker: Arc<Broker>,
}

impl Reports {
    pub fn new(parts: ReportsParts) -> Self {
        Self(Arc::new(parts))
    }

    /// A sale's books (Postgres, then Redis).
    pub async fn books(&self, id: VoucherId) -> Result<Lookup> {
        books::books(&self.0.pg, &self.0.redis, &self.0.keys, id.get()).await
    }

    /// A sale's books with the orders queue's depth.
    pub async fn audit(&self, id: VoucherId) -> Result<Lookup> {
        books::audit(&self.0.pg, &self.0.redis, &self.0.keys, &self.0.broker, id.get()).await
    }
}
