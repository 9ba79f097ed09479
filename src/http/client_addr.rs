//! The client's address: the TCP peer, or, when the peer is a trusted proxy
//! (`SECKILL_TRUSTED_PROXIES`), the nearest address in `X-Forwarded-For` that is
//! not one. Read right to left: each trusted proxy appends the address it got the
//! request from, so the entries left of the last untrusted one are the client's
//! to forge.
use actix_web::http::header::HeaderMap;
use ipnet::IpNet;
use std::net::IpAddr;

/// The sale's per-address cap and the address of `req`'s client, if the sale has one.
pub fn cap_of(
    req: &actix_web::HttpRequest,
    trusted: &[IpNet],
    flash: &crate::sales::model::FlashSale,
) -> Option<crate::admission::addresses::Cap> {
    let cap = flash.address_cap?;
    let addr = client_addr(req.peer_addr().map(|a| a.ip()), req.headers(), trusted)?;
    Some(crate::admission::addresses::Cap {
        addr: cap_key(addr),
        cap,
    })
}

/// What a per-address cap counts: an IPv4 address (also written IPv4-mapped), or
/// an IPv6 address's /64 (one subscriber's network: its host bits are theirs to
/// rotate).
pub fn cap_key(addr: IpAddr) -> String {
    match addr {
        IpAddr::V4(v4) => v4.to_string(),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => v4.to_string(),
            None => {
                let net = ipnet::Ipv6Net::new(v6, 64)
                    .map(|n| n.trunc())
                    .unwrap_or_else(|_| v6.into());
                net.to_string()
            }
        },
    }
}

/// 403 `address_cap_reached`.
pub fn cap_reached(cap: i32, what: &str) -> super::error::ApiError {
    super::error::ApiError::new(
        actix_web::http::StatusCode::FORBIDDEN,
        "address_cap_reached",
        format!("this address has taken the sale's {cap} {what}"),
    )
}

pub fn client_addr(peer: Option<IpAddr>, headers: &HeaderMap, trusted: &[IpNet]) -> Option<IpAddr> {
    let mut addr = peer?;
    let is_trusted = |a: &IpAddr| trusted.iter().any(|n| n.contains(a));
    if !is_trusted(&addr) {
        return Some(addr);
    }
    let forwarded: Vec<&str> = headers
        .get_all("x-forwarded-for")
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .collect();
    for entry in forwarded.iter().rev() {
        match entry.parse::<IpAddr>() {
            Ok(a) => {
                addr = a;
                if !is_trusted(&addr) {
                    return Some(addr);
                }
            }
            // Garbage: what lies left of it says nothing; the last address read stands.
            Err(_) => return Some(addr),
        }
    }
    Some(addr)
}

#[cfg(test)]
mod tests {
    use super::*;
    use actix_web::http::header::{HeaderName, HeaderValue};

    fn headers(xff: &[&str]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for v in xff {
            h.append(
                HeaderName::from_static("x-forwarded-for"),
                HeaderValue::from_str(v).unwrap(),
            );
        }
        h
    }

    #[test]
    fn a_trusted_proxy_names_the_client_and_nobody_else_does() {
        let trusted: Vec<IpNet> = vec!["10.0.0.0/8".parse().unwrap(), "192.0.2.1/32".parse().unwrap()];
        let ip = |s: &str| Some(s.parse::<IpAddr>().unwrap());
        // An untrusted peer: its header is ignored.
        assert_eq!(
            client_addr(ip("203.0.113.9"), &headers(&["1.2.3.4"]), &trusted),
            ip("203.0.113.9")
        );
        // Through two trusted proxies: the first address they did not add.
        assert_eq!(
            client_addr(ip("10.1.1.1"), &headers(&["6.6.6.6, 1.2.3.4", "192.0.2.1"]), &trusted),
            ip("1.2.3.4")
        );
        // No header: the proxy itself.
        assert_eq!(client_addr(ip("10.1.1.1"), &headers(&[]), &trusted), ip("10.1.1.1"));
        // Garbage stops the walk.
        assert_eq!(
            client_addr(ip("10.1.1.1"), &headers(&["1.2.3.4, junk"]), &trusted),
            ip("10.1.1.1")
        );
        // A cap counts an IPv6 client's /64, and an IPv4-mapped address as IPv4.
        assert_eq!(cap_key("2001:db8:1:2:aaaa::1".parse().unwrap()), "2001:db8:1:2::/64");
        assert_eq!(
            cap_key("2001:db8:1:2:bbbb::9".parse().unwrap()),
            cap_key("2001:db8:1:2:aaaa::1".parse().unwrap())
        );
        assert_eq!(cap_key("::ffff:192.0.2.5".parse().unwrap()), "192.0.2.5");
        assert_eq!(cap_key("192.0.2.5".parse().unwrap()), "192.0.2.5");
        // Nothing trusted: the peer, always.
        assert_eq!(client_addr(ip("10.1.1.1"), &headers(&["1.2.3.4"]), &[]), ip("10.1.1.1"));
    }
}
