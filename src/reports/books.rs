//! The books themselves: what an audit reports ([`Audit`] and its parts, the
//! [`Checks`]), and the reads that fill them (Postgres's half, Redis's half, the
//! orders queue's depth).
use crate::broker::Broker;
use crate::keys::Keys;
use crate::redis_conn::Redis;
use anyhow::{Context, Result};
use serde::Serialize;
use sqlx::PgPool;
use std::time::Duration;
use utoipa::ToSchema;

/// How long the audit waits for RabbitMQ's queue depth before it reports none.
const QUEUE_DEADLINE: Duration = Duration::from_secs(2);

/// The books of one flash sale.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, ToSchema)]
pub struct Audit {
    #[serde(with = "crate::id")]
    #[schema(value_type = String, example = "42")]
    pub voucher_id: i64,
    /// Everything ever put on sale: the initial stock plus top-ups
    /// (`seckill_vouchers.total_stock`).
    pub stock: i64,
    pub redis: RedisBooks,
    pub in_flight: InFlight,
    pub postgres: PostgresBooks,
    /// True when every one of the `checks` holds.
    pub balanced: bool,
    pub checks: Checks,
}

/// What Redis holds for the sale.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, ToSchema)]
#[schema(as = AuditRedis)]
pub struct RedisBooks {
    /// Units still on sale; null if Redis has no stock key for the sale (it lost it,
    /// or the sale is being repaired).
    #[schema(required = true)]
    pub stock_remaining: Option<i64>,
    /// Every order Redis ever admitted for the sale (persisted or not, whatever its
    /// status now).
    pub orders_admitted: i64,
    /// Cancelled orders whose unit went back on sale in Redis.
    pub units_returned: i64,
    /// Entries in the sale's outbox streams whose publish RabbitMQ has not
    /// confirmed yet, each carrying the orders one call of the order script
    /// admitted.
    pub outbox: i64,
    /// A sharded sale's units given by one shard and not yet taken by another (a
    /// move under way, or left by a process that died mid-move: the recovery pass
    /// completes it within seconds). Always 0 for a sale of one shard.
    pub units_in_transit: i64,
}

/// Orders between Redis and Postgres.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, ToSchema)]
#[schema(as = AuditInFlight)]
pub struct InFlight {
    /// Admitted orders not yet in Postgres: `redis.orders_admitted` minus the
    /// sale's orders in Postgres (all statuses). Wherever they are: the outbox,
    /// RabbitMQ, a worker.
    pub orders: i64,
    /// Entries in the sale's outbox streams (`redis.outbox`): not yet published.
    /// An entry carries the orders one call of the order script admitted (one,
    /// or several that arrived together), as a queue message carries a batch.
    /// An entry leaves once RabbitMQ confirmed its publish, which can be a moment
    /// after the worker stored the order.
    pub outbox: i64,
    /// Messages ready in the orders queue. The queue is shared by every sale of the
    /// deployment (a message carries a batch of orders), so this is the whole
    /// pipeline's backlog, not this sale's. Null if RabbitMQ did not answer.
    #[schema(required = true)]
    pub queue_ready: Option<i64>,
}

/// What Postgres holds for the sale.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, ToSchema)]
#[schema(as = AuditPostgres)]
pub struct PostgresBooks {
    pub created: i64,
    pub paid: i64,
    pub cancelled: i64,
    /// Orders Redis admitted that the database refused (incidents).
    pub failed: i64,
    /// Units Postgres has not sold (`seckill_vouchers.stock`).
    pub stock: i64,
    /// Cancellations whose unit is not back in Redis yet (`stock_returns` not done).
    pub returns_pending: i64,
}

/// Each condition of `balanced`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, ToSchema)]
#[schema(as = AuditChecks)]
pub struct Checks {
    /// `stock` = `redis.stock_remaining` + `redis.units_in_transit` +
    /// `in_flight.orders` + live orders (`postgres.created` + `postgres.paid`).
    pub units_accounted_for: bool,
    /// `postgres.stock` = `stock` − live orders.
    pub postgres_stock: bool,
    /// `postgres.returns_pending` = 0.
    pub no_returns_pending: bool,
    /// `in_flight.orders` >= 0: Postgres holds no order that Redis has no record
    /// of admitting (Redis went back in time and may sell its unit again).
    pub orders_known_to_redis: bool,
    /// `postgres.failed` = 0: no order Redis admitted was refused by the
    /// database (an incident; a repair of the sale does not clear it).
    pub no_failed_orders: bool,
}

impl Checks {
    /// Judges the books.
    pub fn of(stock: i64, redis: &RedisBooks, in_flight: &InFlight, postgres: &PostgresBooks) -> Self {
        let live = postgres.created + postgres.paid;
        Self {
            units_accounted_for: redis
                .stock_remaining
                .is_some_and(|left| stock == left + redis.units_in_transit + in_flight.orders + live),
            postgres_stock: postgres.stock == stock - live,
            no_returns_pending: postgres.returns_pending == 0,
            orders_known_to_redis: in_flight.orders >= 0,
            no_failed_orders: postgres.failed == 0,
        }
    }

    pub fn all(&self) -> bool {
        self.units_accounted_for
            && self.postgres_stock
            && self.no_returns_pending
            && self.orders_known_to_redis
            && self.no_failed_orders
    }
}

/// What an audit found for an id.
#[derive(Debug)]
pub enum Lookup {
    Found(Audit),
    NotFound,
    /// An ordinary voucher: it has no stock, hence no books.
    NotAFlashSale,
}

/// The sale's books, with the orders queue's depth.
pub async fn audit(pg: &PgPool, redis: &Redis, keys: &Keys, broker: &Broker, voucher_id: i64) -> Result<Lookup> {
    let mut found = books(pg, redis, keys, voucher_id).await?;
    if let Lookup::Found(a) = &mut found {
        a.in_flight.queue_ready = queue_ready(broker).await;
    }
    Ok(found)
}

/// The sale's books without asking RabbitMQ (`in_flight.queue_ready` is null);
/// `balanced` does not depend on it.
pub async fn books(pg: &PgPool, redis: &Redis, keys: &Keys, voucher_id: i64) -> Result<Lookup> {
    // Its shards (fixed for the life of the sale; 1 if there is no such sale).
    let shards = crate::sales::repo::shards(pg, voucher_id).await?;
    // Postgres first, in one snapshot: see the module's doc.
    let (stock, postgres) = match postgres_books(pg, voucher_id).await? {
        Ok(found) => found,
        Err(other) => return Ok(other),
    };
    // Then Redis, in one MULTI per shard: every key of a shard shares its hash tag.
    let mut conn = redis.conn().await?;
    let snap = crate::sales::shards::snapshot(&mut conn, keys, voucher_id, shards)
        .await
        .context("reading the sale's books in Redis")?
        .ok_or(crate::sales::shards::NoConsistentReading)?;
    let stock_remaining = snap.stock();
    let orders_admitted: i64 = snap.shards.iter().map(|s| s.orders).sum();
    let units_returned: i64 = snap.shards.iter().map(|s| s.returned).sum();
    let outbox: i64 = snap.shards.iter().map(|s| s.outbox).sum();
    let units_in_transit = snap.in_transit();
    let redis = RedisBooks {
        stock_remaining,
        orders_admitted,
        units_returned,
        outbox,
        units_in_transit,
    };
    let in_flight = InFlight {
        orders: orders_admitted - (postgres.created + postgres.paid + postgres.cancelled + postgres.failed),
        outbox,
        queue_ready: None,
    };
    let checks = Checks::of(stock, &redis, &in_flight, &postgres);
    Ok(Lookup::Found(Audit {
        voucher_id,
        stock,
        redis,
        in_flight,
        postgres,
        balanced: checks.all(),
        checks,
    }))
}

/// Postgres's half of a sale's books, in one snapshot: everything ever put on
/// sale and the orders by status; or the answer for a voucher that has no books.
pub(crate) async fn postgres_books(pg: &PgPool, voucher_id: i64) -> Result<Result<(i64, PostgresBooks), Lookup>> {
    let mut tx = pg.begin().await.context("reading the sale's books in Postgres")?;
    sqlx::query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        .execute(&mut *tx)
        .await
        .context("reading the sale's books in Postgres")?;
    let row = crate::sales::repo::stock_totals(&mut *tx, voucher_id)
        .await
        .context("reading the sale's books in Postgres")?;
    let Some((total, pg_stock)) = row else {
        return Ok(Err(Lookup::NotFound));
    };
    let counts = crate::ordering::stored::counts_of_sale(&mut *tx, voucher_id)
        .await
        .context("reading the sale's books in Postgres")?;
    let returns_pending = crate::ordering::stored::returns_pending(&mut *tx, voucher_id)
        .await
        .context("reading the sale's books in Postgres")?;
    tx.commit().await.context("reading the sale's books in Postgres")?;
    let (Some(stock), Some(pg_stock)) = (total, pg_stock) else {
        return Ok(Err(Lookup::NotAFlashSale));
    };
    Ok(Ok((
        stock,
        PostgresBooks {
            created: counts.created,
            paid: counts.paid,
            cancelled: counts.cancelled,
            failed: counts.failed,
            stock: pg_stock,
            returns_pending,
        },
    )))
}

/// Ready messages in the orders queue ([`Broker::orders_ready`]); None if
/// RabbitMQ does not answer in time.
async fn queue_ready(broker: &Broker) -> Option<i64> {
    match tokio::time::timeout(QUEUE_DEADLINE, broker.orders_ready()).await {
        Ok(Ok(n)) => Some(n),
        Ok(Err(e)) => {
            tracing::warn!(error = %format!("{e:#}"), "audit: no orders queue depth");
            None
        }
        Err(_) => {
            tracing::warn!("audit: RabbitMQ did not tell the orders queue depth in time");
            None
        }
    }
}
