//! [`Settings::check_bind`]: the development JWT secret serves a loopback address only.
use super::secret::MIN_JWT_SECRET_BYTES;
use super::settings::Settings;
use anyhow::{bail, Context, Result};

impl Settings {
    /// Refuses to serve HTTP with the development secret (published in the
    /// repository: anyone could mint admin tokens) on anything but a loopback
    /// address, whether the variable is unset or set to that secret. A name that
    /// cannot be resolved now is refused too (it could resolve to a public address
    /// by the time the server binds).
    pub fn check_bind(&self) -> Result<()> {
        use std::net::ToSocketAddrs;
        if !self.auth.jwt_secret_is_dev {
            return Ok(());
        }
        let addrs: Vec<_> = self
            .http
            .http_addr
            .to_socket_addrs()
            .map(|a| a.collect())
            .with_context(|| {
                format!(
                    "SECKILL_JWT_SECRET is the development secret and SECKILL_HTTP_ADDR ({}) does not resolve: \
                     set SECKILL_JWT_SECRET to {MIN_JWT_SECRET_BYTES}+ random bytes (e.g. openssl rand -hex 32)",
                    self.http.http_addr
                )
            })?;
        if addrs.iter().any(|a: &std::net::SocketAddr| !a.ip().is_loopback()) {
            bail!(
                "SECKILL_JWT_SECRET is not set (or is the development secret) and SECKILL_HTTP_ADDR ({}) is not a loopback address: \
                 the development secret is public, anyone could mint admin tokens; \
                 set SECKILL_JWT_SECRET to {MIN_JWT_SECRET_BYTES}+ random bytes (e.g. openssl rand -hex 32)",
                self.http.http_addr
            );
        }
        Ok(())
    }
}
