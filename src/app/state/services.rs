//! The areas' services a handler calls, each built on the request handlers' pool.
use super::clients::Clients;
use crate::http::state::Ordering;
use crate::sales::cache::VoucherCache;
use crate::sales::service::{Sales, SalesParts};
use std::sync::Arc;

/// The ordering area's services (the placer made by `order_placer`), on the
/// request handlers' pool.
pub(super) fn ordering_of(
    c: &Clients,
    cache: &Arc<VoucherCache>,
    recovery: &Arc<crate::recovery::Recovery>,
    placer: crate::ordering::place::OrderPlacer,
    user_serializer: crate::locks::user::UserSerializer,
    board: Arc<crate::ordering::status::Board>,
) -> Ordering {
    Ordering {
        placer,
        lookup: crate::ordering::status::Lookup {
            pg: c.pg.clone(),
            redis: c.redis.clone(),
            keys: c.keys.clone(),
            cache: cache.clone(),
            recovery: recovery.clone(),
            board,
        },
        lifecycle: crate::ordering::lifecycle::Lifecycle {
            pg: c.pg.clone(),
            redis: c.redis.clone(),
            keys: c.keys.clone(),
            recovery: recovery.clone(),
        },
        user_serializer,
    }
}

/// The sales area's service, on the request handlers' pool.
pub(super) fn reports_of(c: &Clients) -> crate::reports::Reports {
    crate::reports::Reports::new(crate::reports::ReportsParts {
        pg: c.pg.clone(),
        redis: c.redis.clone(),
        keys: c.keys.clone(),
        broker: c.broker.clone(),
    })
}

pub(super) fn sales_of(c: &Clients, recovery: &Arc<crate::recovery::Recovery>, cache: &Arc<VoucherCache>) -> Sales {
    Sales::new(SalesParts {
        pg: c.pg.clone(),
        redis: c.redis.clone(),
        keys: c.keys.clone(),
        broker: c.broker.clone(),
        recovery: recovery.clone(),
        cache: cache.clone(),
    })
}
