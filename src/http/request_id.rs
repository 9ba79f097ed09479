//! `X-Request-Id` on every answer: the caller's own when it sent a usable one, so
//! that a client, a proxy and our logs name a request alike; otherwise one made
//! here. The id is also the `request_id` of the request's log lines
//! ([`super::request_span`]).
//!
//! A caller's id is taken only if it is 1 to [`MAX_LEN`] characters of
//! `[A-Za-z0-9._:+/=@-]`: anything else (too long, spaces, control characters)
//! could forge log lines or bloat every line of the request, so it is replaced
//! rather than refused (the request itself is fine).
//!
//! This middleware is the outermost one: the answers admission control and the
//! router give (429, 503, 404) carry the header too.
use actix_web::body::{BoxBody, MessageBody};
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::http::header::{HeaderName, HeaderValue};
use actix_web::middleware::Next;
use actix_web::HttpMessage;

pub const HEADER: HeaderName = HeaderName::from_static("x-request-id");

/// Longest caller-chosen id kept.
pub const MAX_LEN: usize = 128;

/// The request's id, in its extensions for the log span.
#[derive(Clone)]
pub struct RequestId(pub HeaderValue);

/// The caller's id if it is usable.
fn from_caller(value: Option<&HeaderValue>) -> Option<HeaderValue> {
    let v = value?;
    let bytes = v.as_bytes();
    let usable = (1..=MAX_LEN).contains(&bytes.len())
        && bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || b"._:+/=@-".contains(b));
    usable.then(|| v.clone())
}

fn fresh() -> HeaderValue {
    let id = uuid::Uuid::new_v4().simple().to_string();
    HeaderValue::from_str(&id).expect("hex digits are a header value")
}

pub async fn tag(
    req: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<BoxBody>, actix_web::Error> {
    let id = from_caller(req.headers().get(&HEADER)).unwrap_or_else(fresh);
    req.extensions_mut().insert(RequestId(id.clone()));
    // Handlers' and extractors' errors arrive here as responses already (actix
    // renders them at the route), and so do admission's refusals. (The request
    // cannot be kept aside to render an `Err` here: a clone made before routing
    // makes the router panic.)
    let mut res = next.call(req).await?.map_into_boxed_body();
    res.headers_mut().insert(HEADER, id);
    Ok(res)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_callers_id_is_kept_only_if_short_and_plain() {
        let ok = HeaderValue::from_static("abc-123_X.y:z+/=@");
        assert_eq!(from_caller(Some(&ok)), Some(ok));
        for bad in ["", "a b", "a\tb", "é", "<script>"] {
            let v = HeaderValue::from_bytes(bad.as_bytes()).unwrap();
            assert_eq!(from_caller(Some(&v)), None, "{bad:?}");
        }
        let long = HeaderValue::from_str(&"a".repeat(MAX_LEN + 1)).unwrap();
        assert_eq!(from_caller(Some(&long)), None);
        let longest = HeaderValue::from_str(&"a".repeat(MAX_LEN)).unwrap();
        assert!(from_caller(Some(&longest)).is_some());
        assert_eq!(fresh().len(), 32);
    }
}
