//! Orders: placing one (the hot path), the ID worker, the message that carries
//! accepted orders from the outbox to the worker, and status lookups.
pub mod id_worker;
pub mod lifecycle;
pub mod model;
pub mod place;
pub mod routes_lifecycle;
pub mod status;

pub use model::{Order, OrderMsg};

use actix_web::web;

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route("/vouchers/{id}/orders", web::post().to(place::place))
        .route("/vouchers/{id}/orders/mine", web::get().to(status::mine))
        .route("/orders/{order_id}", web::get().to(status::get))
        .route("/orders/{order_id}/pay", web::post().to(routes_lifecycle::pay))
        .route("/orders/{order_id}/cancel", web::post().to(routes_lifecycle::cancel));
}
