//! Rate limits and load shedding, all in-process (no Redis round trip):
//! - per-client-address rate limit on every API request;
//! - per-shopper rate limit on order requests ([`RateLimits::check_user`]), and one
//!   of its own on pay and cancel together ([`RateLimits::check_pay_cancel`]);
//! - a bound on requests in flight per instance, beyond which requests are shed at
//!   once with 503 instead of queueing until clients time out;
//! - a small budget of its own for the admin (valid admin tokens on
//!   `/api/v1/admin/*`, and the console page), so that the pause meant for an
//!   overload works in one ([`budget_of`]).
//!
//! Health and metrics endpoints have budgets of their own ([`PROBE_PER_IP`] a
//! second per address, [`PROBE_MAX_IN_FLIGHT`] at once), so that an overloaded
//! instance is not also declared dead, and a flood of probes cannot take the
//! crowd's budget or burn the instance's CPU unbounded. The client address is the
//! TCP peer, or the client a trusted proxy names (`SECKILL_TRUSTED_PROXIES`,
//! [`super::client_addr`]).
use super::error::ApiError;
use crate::config::Http;
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

pub struct RateLimits {
    per_user: Option<Keyed<i64>>,
    per_user_pay_cancel: Option<Keyed<i64>>,
    per_ip: Option<Keyed<IpAddr>>,
    max_in_flight: usize,
    in_flight: AtomicUsize,
    /// The admin's own budgets (see [`budget_of`]): the admin API's, and the
    /// console page's (anyone may load it: its flood must not take the API's).
    admin_in_flight: AtomicUsize,
    console_in_flight: AtomicUsize,
    /// `/health/*` and `/metrics`: their own per-address limit and in-flight bound.
    per_ip_probe: Option<Keyed<IpAddr>>,
    probe_in_flight: AtomicUsize,
    /// `SECKILL_TRUSTED_PROXIES`: whose `X-Forwarded-For` names the client.
    trusted_proxies: Vec<ipnet::IpNet>,
}

/// Health and metrics requests a second per address (when the per-address limit
/// is on): an orchestrator probes every few seconds, Prometheus scrapes every 15.
pub const PROBE_PER_IP: u32 = 20;
/// Health and metrics requests in flight at once (when the in-flight bound is on).
pub const PROBE_MAX_IN_FLIGHT: usize = 32;

/// Requests in flight the admin's budget takes: the console polls once a second
/// and an operator clicks; this is plenty, and small enough to cost nothing.
const ADMIN_MAX_IN_FLIGHT: usize = 32;

/// Which of the admin's budgets a request goes on instead of the crowd's, if any:
/// the console's static files (exactly those paths: `/admin/<junk>` is the
/// crowd's), or an `/api/v1/admin/*` request carrying a valid admin token. The
/// token is checked here (an HMAC, or the cache of verified tokens), so that a
/// flood of admin paths with junk tokens shares the crowd's in-flight cap and
/// per-address limit and cannot take the admin's budget; the console's files have
/// a budget of their own, so that a flood of them cannot either.
fn budget_of<'a>(req: &ServiceRequest, adm: &'a RateLimits) -> Option<&'a AtomicUsize> {
    let path = req.path();
    if CONSOLE_PATHS.contains(&path) {
        return Some(&adm.console_in_flight);
    }
    let admin = path.starts_with("/api/v1/admin/")
        && super::auth::caller_of(req.request()).is_ok_and(|c| c.role == super::auth::Role::Admin);
    admin.then_some(&adm.admin_in_flight)
}

/// The admin console's routes (`src/http/console.rs`).
const CONSOLE_PATHS: [&str; 4] = ["/admin", "/admin/", "/admin/console.css", "/admin/console.js"];

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

/// 429 `rate_limited` with `Retry-After` when `key` is over its quota (none: no limit).
fn check_key<K: std::hash::Hash + Eq + Clone>(limiter: &Option<Keyed<K>>, key: &K, what: &str) -> Result<(), ApiError> {
    match limiter {
        Some(l) => l
            .check_key(key)
            .map_err(|nu| rate_limited(nu.wait_time_from(DefaultClock::default().now()), what)),
        None => Ok(()),
    }
}

impl RateLimits {
    pub fn new(s: &Http) -> Self {
        Self {
            per_user: limiter(s.rate_limit_per_user),
            per_user_pay_cancel: limiter(s.rate_limit_pay_cancel_per_user),
            per_ip: limiter(s.rate_limit_per_ip),
            max_in_flight: s.max_in_flight,
            in_flight: AtomicUsize::new(0),
            admin_in_flight: AtomicUsize::new(0),
            console_in_flight: AtomicUsize::new(0),
            per_ip_probe: (s.rate_limit_per_ip > 0).then(|| limiter(PROBE_PER_IP)).flatten(),
            probe_in_flight: AtomicUsize::new(0),
            trusted_proxies: s.trusted_proxies.clone(),
        }
    }

    /// The per-shopper limit of order requests.
    pub fn check_user(&self, user: i64) -> Result<(), ApiError> {
        check_key(&self.per_user, &user, "for this shopper")
    }

    /// The per-shopper limit of pay and cancel requests (one quota for both),
    /// checked before the request waits for the shopper's lock: a storm of one
    /// shopper's requests is answered 429 at once instead of queueing on the lock.
    pub fn check_pay_cancel(&self, user: i64) -> Result<(), ApiError> {
        check_key(&self.per_user_pay_cancel, &user, "for this shopper")
    }

    /// The request's client address (`super::client_addr`).
    fn client(&self, req: &ServiceRequest) -> Option<IpAddr> {
        super::client_addr::client_addr(req.peer_addr().map(|a| a.ip()), req.headers(), &self.trusted_proxies)
    }

    fn check_ip(&self, ip: Option<IpAddr>) -> Result<(), ApiError> {
        match ip {
            Some(ip) => check_key(&self.per_ip, &ip, "from this address"),
            None => Ok(()),
        }
    }

    /// Forgets idle keys so the limiters' memory follows the active clients.
    pub fn forget_idle(&self) {
        for l in [&self.per_user, &self.per_user_pay_cancel].into_iter().flatten() {
            l.retain_recent();
            l.shrink_to_fit();
        }
        for l in [&self.per_ip, &self.per_ip_probe].into_iter().flatten() {
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
///
/// The labels are bounded by the code, not by clients: the route is the pattern
/// actix matched (read from the request's resource path, no regex re-run) or one
/// `unmatched` (no route took the path, or admission answered before routing);
/// the method is one of HTTP's or `other`.
pub async fn admit(
    req: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<impl MessageBody>, actix_web::Error> {
    let started = std::time::Instant::now();
    let method = crate::metrics::method_label(req.method());
    let order_path = method == "POST" && crate::metrics::is_order_path(req.path());
    let metrics = req
        .app_data::<web::Data<crate::metrics::Metrics>>()
        .map(|m| m.clone().into_inner());
    let (resp, routed) = admit_inner(req, next).await;
    if let (Some(m), Ok(r)) = (metrics, &resp) {
        let status = r.status();
        let pattern = (routed && r.request().extensions().get::<Unmatched>().is_none())
            .then(|| r.request().match_pattern())
            .flatten();
        let route = pattern.as_deref().unwrap_or("unmatched");
        m.http_seconds
            .with_label_values(&[method, route, status.as_str()])
            .observe(started.elapsed().as_secs_f64());
        if order_path {
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

type Answer = Result<ServiceResponse<actix_web::body::BoxBody>, actix_web::Error>;

/// The answer, and whether the request went on to the router (false: admission
/// answered it itself).
async fn admit_inner(req: ServiceRequest, next: Next<impl MessageBody + 'static>) -> (Answer, bool) {
    let path = req.path();
    let probe = path.starts_with("/health/") || path == "/metrics";
    let Some(adm) = req.app_data::<web::Data<RateLimits>>().cloned() else {
        return (next.call(req).await.map(|r| r.map_into_boxed_body()), true);
    };
    if probe {
        // Their own budgets: never the crowd's, and bounded.
        let now = adm.probe_in_flight.fetch_add(1, Ordering::AcqRel) + 1;
        let _guard = InFlight(&adm.probe_in_flight);
        if adm.max_in_flight > 0 && now > PROBE_MAX_IN_FLIGHT {
            let e = ApiError::unavailable("too many health and metrics requests in flight, retry shortly", 1);
            return (Ok(req.error_response(e).map_into_boxed_body()), false);
        }
        if let Some(ip) = adm.client(&req) {
            if let Err(e) = check_key(&adm.per_ip_probe, &ip, "of health and metrics from this address") {
                return (Ok(req.error_response(e).map_into_boxed_body()), false);
            }
        }
        return (next.call(req).await.map(|r| r.map_into_boxed_body()), true);
    }
    if let Some(budget) = budget_of(&req, &adm) {
        // Exempt from the per-address limit too: the admin may sit behind the same
        // proxy as the crowd.
        let now = budget.fetch_add(1, Ordering::AcqRel) + 1;
        let _guard = InFlight(budget);
        // `SECKILL_MAX_IN_FLIGHT=0` turns every in-flight bound off, the admin's too.
        if adm.max_in_flight > 0 && now > ADMIN_MAX_IN_FLIGHT {
            let e = ApiError::unavailable("too many admin requests in flight, retry shortly", 1);
            return (Ok(req.error_response(e).map_into_boxed_body()), false);
        }
        return (next.call(req).await.map(|r| r.map_into_boxed_body()), true);
    }
    // A long poll is held by a bound of its own (`SECKILL_MAX_HELD_WAITS`, in its
    // handler): held, it costs memory, not the crowd's in-flight slots.
    if long_poll(&req) {
        if let Err(e) = adm.check_ip(adm.client(&req)) {
            return (Ok(req.error_response(e).map_into_boxed_body()), false);
        }
        return (next.call(req).await.map(|r| r.map_into_boxed_body()), true);
    }
    let now = adm.in_flight.fetch_add(1, Ordering::AcqRel) + 1;
    let _guard = InFlight(&adm.in_flight);
    if adm.max_in_flight > 0 && now > adm.max_in_flight {
        let e = ApiError::unavailable("this instance is at capacity, retry shortly", 1);
        return (Ok(req.error_response(e).map_into_boxed_body()), false);
    }
    if let Err(e) = adm.check_ip(adm.client(&req)) {
        return (Ok(req.error_response(e).map_into_boxed_body()), false);
    }
    (next.call(req).await.map(|r| r.map_into_boxed_body()), true)
}

/// `GET /api/v1/orders/{id}?wait=N` with N above 0 (a long poll).
fn long_poll(req: &ServiceRequest) -> bool {
    req.method() == actix_web::http::Method::GET
        && req.path().starts_with("/api/v1/orders/")
        && req
            .query_string()
            .split('&')
            .filter_map(|kv| kv.strip_prefix("wait="))
            .any(|n| n.parse::<u64>().is_ok_and(|n| n > 0))
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
