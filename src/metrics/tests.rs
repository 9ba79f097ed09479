//! Unit tests of the metrics: bounded labels, the rendered page.
use super::*;

#[test]
fn labels_are_bounded_by_the_code() {
    use actix_web::http::Method;
    assert_eq!(method_label(&Method::POST), "POST");
    assert_eq!(method_label(&Method::from_bytes(b"M17").unwrap()), "other");
    assert!(is_order_path("/api/v1/vouchers/123/orders"));
    assert!(!is_order_path("/api/v1/vouchers/12x/orders"));
    assert!(!is_order_path("/api/v1/vouchers//orders"));
    assert!(!is_order_path("/api/v1/vouchers/1/orders/mine"));
}

#[test]
fn rendering_shows_the_counters() {
    let m = Metrics::new();
    m.order("accepted");
    assert!(m
        .render()
        .contains("seckill_order_requests_total{outcome=\"accepted\"} 1"));
}
