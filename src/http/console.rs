//! The admin console (`GET /admin/`): one static page (HTML, CSS and vanilla JS
//! in `static/admin/`, compiled into the binary) that talks to the admin API with
//! a token the admin gives it. Served with a Content-Security-Policy that allows
//! this origin's script, style and API only (no inline script or style, no
//! framing). The page is revalidated on every load (`no-cache`); its script and
//! style are named with a hash of their text, so a new build's page never runs an
//! old cached script and an unchanged one is not fetched again.
use super::responses::{RateLimited, Unavailable};
use actix_web::http::header;
use actix_web::{web, HttpRequest, HttpResponse};
use std::sync::LazyLock;

const HTML: &str = include_str!("../../static/admin/index.html");
const CSS: &str = include_str!("../../static/admin/console.css");
/// The script, kept in three files by concern (the token, the API and the list;
/// the live view; the actions) and served as one, in this order.
const JS: &str = concat!(
    include_str!("../../static/admin/console/api_and_list.js"),
    include_str!("../../static/admin/console/live.js"),
    include_str!("../../static/admin/console/actions.js"),
);

/// Nothing but this origin: the script and style files, and the API (`connect-src`).
/// `img-src data:` lets a canvas be saved; nothing inline runs.
pub const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
     connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// FNV-1a of the assets: changes whenever either does.
static VERSION: LazyLock<String> = LazyLock::new(|| {
    let hash = CSS.bytes().chain(JS.bytes()).fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    format!("{hash:016x}")
});

static PAGE: LazyLock<String> = LazyLock::new(|| HTML.replace("{{version}}", &VERSION));

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route("/admin/", web::get().to(page))
        .route("/admin", web::get().to(redirect))
        .route("/admin/console.css", web::get().to(css))
        .route("/admin/console.js", web::get().to(js));
}

/// The admin console: a page that asks for an admin token (or reads it from the
/// URL fragment `#token=<jwt>`, then removes it from the URL) and drives the admin
/// endpoints of this document.
#[utoipa::path(get, path = "/admin/", tag = "docs",
    responses((status = 200, description = "the admin console (HTML)", content_type = "text/html", body = String),
        RateLimited, Unavailable))]
pub async fn page() -> HttpResponse {
    HttpResponse::Ok()
        .content_type("text/html; charset=utf-8")
        .insert_header((header::CACHE_CONTROL, "no-cache"))
        .insert_header((header::CONTENT_SECURITY_POLICY, CSP))
        .insert_header((header::X_CONTENT_TYPE_OPTIONS, "nosniff"))
        .insert_header((header::REFERRER_POLICY, "no-referrer"))
        .insert_header((header::X_FRAME_OPTIONS, "DENY"))
        .body(PAGE.as_str())
}

async fn redirect() -> HttpResponse {
    HttpResponse::PermanentRedirect()
        .insert_header((header::LOCATION, "/admin/"))
        .finish()
}

/// An asset: cached for good under its current version, revalidated otherwise.
fn asset(req: &HttpRequest, content_type: &str, body: &'static str) -> HttpResponse {
    let current = req.query_string() == format!("v={}", *VERSION);
    HttpResponse::Ok()
        .content_type(content_type)
        .insert_header((
            header::CACHE_CONTROL,
            if current {
                "public, max-age=31536000, immutable"
            } else {
                "no-cache"
            },
        ))
        .insert_header((header::X_CONTENT_TYPE_OPTIONS, "nosniff"))
        .body(body)
}

async fn css(req: HttpRequest) -> HttpResponse {
    asset(&req, "text/css; charset=utf-8", CSS)
}

async fn js(req: HttpRequest) -> HttpResponse {
    asset(&req, "text/javascript; charset=utf-8", JS)
}
