//! The connection as callers that must not touch an unrepaired server get it:
//! together with the epoch it is verified for, or nothing (answer 503).
use super::conn::Conn;
use super::handle::Redis;
use super::identity::Verified;
use redis::RedisError;

impl Redis {
    /// The connection and the epoch it is verified for, if this server's state is
    /// repaired and vouched for by Postgres; `None` while it is not (answer 503).
    pub async fn verified(&self) -> Result<Option<(Conn, i64)>, RedisError> {
        let c = self.current_conn().await?;
        Ok(match self.identity.get() {
            Some(v) if !v.repairing && v.run_id == c.run_id => Some((c, v.epoch)),
            _ => None,
        })
    }

    /// Like [`Redis::verified`], for one sale: also during a repair that does not
    /// touch it.
    pub async fn verified_for(&self, voucher: i64) -> Result<Option<(Conn, i64)>, RedisError> {
        let c = self.current_conn().await?;
        Ok(match self.identity.get() {
            Some(v) if v.sells(voucher) && v.run_id == c.run_id => Some((c, v.epoch)),
            _ => None,
        })
    }

    /// Like [`Redis::verified`], but also during a repair: the connection, the
    /// epoch, and the sales under repair (`None` when none is; a scope of every
    /// sale when every sale is). For a caller that serves many sales at once.
    pub async fn serving(&self) -> Result<Option<(Conn, i64, Option<Verified>)>, RedisError> {
        let c = self.current_conn().await?;
        Ok(match self.identity.get() {
            Some(v) if v.run_id == c.run_id => {
                let epoch = v.epoch;
                Some((c, epoch, v.repairing.then_some(v)))
            }
            _ => None,
        })
    }

    /// Like [`Redis::verified`], but also during a repair: for counters, whose keys
    /// carry the epoch, so that values issued by a server that went back are never
    /// issued again.
    pub async fn for_counters(&self) -> Result<Option<(Conn, i64)>, RedisError> {
        let c = self.current_conn().await?;
        Ok(match self.identity.get() {
            Some(v) if v.run_id == c.run_id => Some((c, v.epoch)),
            _ => None,
        })
    }
}
