//! Admission control, all in-process (no Redis round trip):
//! - per-client-address rate limit on every API request;
//! - per-shopper rate limit on order requests ([`Admission::check_user`]);
//! - a bound on requests in flight per instance, beyond which requests are shed at
//!   once with 503 instead of queueing until clients time out.
//!
//! Health and metrics endpoints are exempt, so that an overloaded instance is not
//! also declared dead. The client address is the TCP peer: behind a proxy, put the
//! per-address limit in the proxy.
use super::ApiError;
use crate::config::Settings;
use actix_web::body::MessageBody;
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::middleware::Next;
use actix_web::web;
use actix_web::HttpMessage;
use governor::clock::{Clock, DefaultClock};
use governor::state::keyed::DefaultKeyedStateStore;
use governor::{Quota, RateLimiter};
use std::net::IpAddr;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

type Keyed<K> = RateLimiter<K, DefaultKeyedStateStore<K>, DefaultClock>;

pub struct Admission {
    per_user: Option<Keyed<i64>>,
    per_ip: Option<Keyed<IpAddr>>,
    max_in_flight: usize,
    in_flight: AtomicUsize,
}

fn limiter<K: std::hash::Hash + Eq + Clone>(per_sec: u32) -> Option<Keyed<K>> {
    // Burst = one second's worth: a shopper may click a few times at once.
    NonZeroU32::new(per_sec).map(|n| RateLimiter::keyed(Quota::per_second(n)))
}

/// Whole seconds, rounded up, at least 1.
fn retry_after(wait: Duration) -> u64 {
    (wait.as_millis().div_ceil(1000) as u64).max(1)
}

fn rate_limited(wait: Duration, what: &str) -> ApiError {
    let mut e = ApiError::new(
        actix_web::http::StatusCode::TOO_MANY_REQUESTS,
        "rate_limited",
        format!("too many requests {what}; slow down"),
    );
    e.retry_after_secs = Some(retry_after(wait));
    e
}

impl Admission {
    pub fn new(s: &Settings) -> Self {
        Self {
            per_user: limiter(s.rate_limit_per_user),
            per_ip: limiter(s.rate_limit_per_ip),
            max_in_flight: s.max_in_flight,
            in_flight: AtomicUsize::new(0),
        }
    }

    /// The per-shopper limit of order requests.
    pub fn check_user(&self, user: i64) -> Result<(), ApiError> {
        match &self.per_user {
            Some(l) => l
                .check_key(&user)
                .map_err(|nu| rate_limited(nu.wait_time_from(DefaultClock::default().now()), "for this shopper")),
            None => Ok(()),
        }
    }

    fn check_ip(&self, ip: Option<IpAddr>) -> Result<(), ApiError> {
        match (&self.per_ip, ip) {
            (Some(l), Some(ip)) => l
                .check_key(&ip)
                .map_err(|nu| rate_limited(nu.wait_time_from(DefaultClock::default().now()), "from this address")),
            _ => Ok(()),
        }
    }

    /// Forgets idle keys so the limiters' memory follows the active clients.
    pub fn forget_idle(&self) {
        if let Some(l) = &self.per_user {
            l.retain_recent();
            l.shrink_to_fit();
        }
        if let Some(l) = &self.per_ip {
            l.retain_recent();
            l.shrink_to_fit();
        }
    }
}

/// Decrements the in-flight count however the request ends (even if dropped).
struct InFlight<'a>(&'a AtomicUsize);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The middleware: records HTTP latency by route; sheds beyond the in-flight
/// bound (cheapest check first), then applies the per-address limit.
pub async fn admit(
    req: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<impl MessageBody>, actix_web::Error> {
    let started = std::time::Instant::now();
    let method = req.method().clone();
    let route = crate::metrics::route_label(req.path());
    let metrics = req
        .app_data::<web::Data<crate::metrics::Metrics>>()
        .map(|m| m.clone().into_inner());
    let resp = admit_inner(req, next).await;
    if let (Some(m), Ok(r)) = (metrics, &resp) {
        let status = r.status();
        // Paths no route matched share one label, so that scanners cannot grow the
        // label set (the default handler marks them).
        let route = if r.request().extensions().get::<Unmatched>().is_some() {
            "unmatched"
        } else {
            route.as_str()
        };
        m.http_seconds
            .with_label_values(&[method.as_str(), route, status.as_str()])
            .observe(started.elapsed().as_secs_f64());
        if method == actix_web::http::Method::POST && route.ends_with("/orders") {
            // Refusals that never reached the order handler.
            match status.as_u16() {
                429 if r.request().extensions().get::<HandlerRan>().is_none() => m.order("rate_limited"),
                503 if r.request().extensions().get::<HandlerRan>().is_none() => m.order("unavailable"),
                _ => {}
            }
        }
    }
    resp
}

/// Set by the default handler when no route matched the path.
#[derive(Clone, Copy)]
pub struct Unmatched;

/// Set by the order handler, so the middleware does not count its refusals twice.
#[derive(Clone, Copy)]
pub struct HandlerRan;

async fn admit_inner(
    req: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<actix_web::body::BoxBody>, actix_web::Error> {
    let path = req.path();
    if path.starts_with("/health/") || path == "/metrics" {
        return next.call(req).await.map(|r| r.map_into_boxed_body());
    }
    let Some(adm) = req.app_data::<web::Data<Admission>>().cloned() else {
        return next.call(req).await.map(|r| r.map_into_boxed_body());
    };
    let now = adm.in_flight.fetch_add(1, Ordering::AcqRel) + 1;
    let _guard = InFlight(&adm.in_flight);
    if adm.max_in_flight > 0 && now > adm.max_in_flight {
        return Ok(req
            .error_response(ApiError::unavailable("this instance is at capacity, retry shortly", 1))
            .map_into_boxed_body());
    }
    if let Err(e) = adm.check_ip(req.peer_addr().map(|a| a.ip())) {
        return Ok(req.error_response(e).map_into_boxed_body());
    }
    next.call(req).await.map(|r| r.map_into_boxed_body())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_rounds_up_to_whole_seconds() {
        assert_eq!(retry_after(Duration::from_millis(1)), 1);
        assert_eq!(retry_after(Duration::from_millis(999)), 1);
        assert_eq!(retry_after(Duration::from_secs(1)), 1);
        assert_eq!(retry_after(Duration::from_millis(1001)), 2);
    }
}
