//! [`Admission`]: fair admission as the edges call it. A handler joins a queue,
//! reads a place, its turn or the frontier, enters or reads a raffle, submits a
//! beacon round, through it, never through a pool of its own.
use super::addresses::Cap;
use super::advance::{self, Admitted, Frontier, Turn};
use super::draw::{self, Submitted};
use super::queue::{self, Joined, NotJoined};
use super::raffle::{self, Entered, PublicEntry, Summary, Winner};
use super::{frontier, signing};
use crate::id::{UserId, VoucherId};
use anyhow::Result;
use chrono::{DateTime, Utc};
use sqlx::PgPool;

/// What the edges hold of fair admission: the keys, this instance's cached queue
/// frontiers and raffle summaries, and the pools its tables are read with.
pub struct Admission {
    pub signer: signing::Signer,
    pub frontiers: frontier::Frontiers,
    /// Each raffle's public summary, refreshed at most every
    /// [`raffle::SUMMARY_REFRESH`] per instance.
    pub summaries: frontier::PerSale<Summary>,
    /// The request handlers' pool.
    pg: PgPool,
    /// The background tasks' pool (a draw started by a request runs on it).
    background_pg: PgPool,
}

impl Admission {
    /// The keys derived from `root` (`SECKILL_ADMISSION_SECRET`, or the JWT
    /// secret where it is unset).
    pub fn new(root: &str, pg: PgPool, background_pg: PgPool) -> Self {
        Self {
            signer: signing::Signer::new(root),
            frontiers: frontier::Frontiers::default(),
            summaries: frontier::PerSale::default(),
            pg,
            background_pg,
        }
    }

    /// The place of `user` in the queue of `voucher` ([`queue::place_of`]).
    pub async fn place_of(&self, voucher: VoucherId, user: UserId) -> Result<Option<Option<i64>>> {
        queue::place_of(&self.pg, voucher.get(), user.get()).await
    }

    /// Joins `user` to the queue of `voucher` ([`queue::join`]).
    pub async fn join(
        &self,
        voucher: VoucherId,
        user: UserId,
        begin_at: DateTime<Utc>,
        cap: Option<&Cap>,
    ) -> Result<std::result::Result<Joined, NotJoined>> {
        queue::join(&self.pg, voucher.get(), user.get(), begin_at, cap).await
    }

    /// The turn of `place` in the queue of `voucher`, once the frontier passed it.
    pub async fn turn_of(&self, voucher: VoucherId, place: i64) -> Result<Option<Turn>> {
        advance::turn_of(&self.pg, voucher.get(), place).await
    }

    /// The last `limit` shoppers the frontier passed, of `admitted`.
    pub async fn recent_admitted(&self, voucher: VoucherId, admitted: i64, limit: i64) -> Result<Vec<Admitted>> {
        advance::recent_admitted(&self.pg, voucher.get(), admitted, limit).await
    }

    /// Sets the queue's admission rate; whether the sale has a queue.
    pub async fn set_rate(&self, voucher: VoucherId, rate: i32) -> Result<bool> {
        advance::set_rate(&self.pg, voucher.get(), rate).await
    }

    /// The queue's frontier now: this instance's, at most [`frontier::REFRESH`]
    /// old, else moved as far as its rate allows ([`advance::advance`];
    /// `units_left` reads the sale's stock when the frontier may move).
    pub async fn frontier<F, Fut>(
        &self,
        voucher: VoucherId,
        begin_at: DateTime<Utc>,
        turn_secs: i64,
        units_left: F,
    ) -> Result<Frontier>
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = Result<i64>>,
    {
        let pg = self.pg.clone();
        self.frontiers
            .get(voucher.get(), frontier::REFRESH, || async move {
                advance::advance(&pg, voucher.get(), begin_at, units_left, turn_secs).await
            })
            .await
    }

    /// The raffle entry of `user` and whether it won, if it entered.
    pub async fn raffle_entry(&self, voucher: VoucherId, user: UserId) -> Result<Option<(String, Option<bool>)>> {
        raffle::mine(&self.pg, voucher.get(), user.get()).await
    }

    /// Enters `user` in the raffle of `voucher` ([`raffle::enter`]).
    pub async fn enter(&self, voucher: VoucherId, user: UserId, cap: Option<&Cap>) -> Result<Entered> {
        raffle::enter(&self.pg, &self.signer.raffle, voucher.get(), user.get(), cap).await
    }

    /// A page of the raffle's public entries.
    pub async fn raffle_entries(
        &self,
        voucher: VoucherId,
        after: Option<&str>,
        limit: i64,
        won_only: bool,
    ) -> Result<Vec<PublicEntry>> {
        raffle::entries(&self.pg, voucher.get(), after, limit, won_only).await
    }

    /// The raffle's public summary, read now.
    pub async fn raffle_summary(&self, voucher: VoucherId) -> Result<Summary> {
        raffle::summary(&self.pg, voucher.get()).await
    }

    /// The raffle's public summary, this instance's if at most
    /// [`raffle::SUMMARY_REFRESH`] old.
    pub async fn cached_raffle_summary(&self, voucher: VoucherId) -> Result<Summary> {
        let pg = self.pg.clone();
        self.summaries
            .get(voucher.get(), raffle::SUMMARY_REFRESH, || async move {
                raffle::summary(&pg, voucher.get()).await
            })
            .await
    }

    /// The raffle's first `limit` winners.
    pub async fn winners_of(&self, voucher: VoucherId, limit: i64) -> Result<Vec<Winner>> {
        raffle::winners_of(&self.pg, voucher.get(), limit).await
    }

    /// Records the beacon's round for the raffle of `voucher` ([`draw::submit`]).
    pub async fn submit_beacon(&self, voucher: VoucherId, round: i64, signature: &str) -> Result<Submitted> {
        draw::submit(&self.pg, voucher.get(), round, signature).await
    }

    /// Draws the raffle of `voucher` in the background, on the background pool;
    /// a failure is logged (the background tick tries again).
    pub fn draw_soon(&self, voucher: VoucherId) {
        let pg = self.background_pg.clone();
        tokio::spawn(async move {
            if let Err(e) = draw::settle(&pg, voucher.get()).await {
                tracing::warn!(voucher_id = voucher.get(), error = ?e, "raffle not drawn after its beacon; the next tick tries again");
            }
        });
    }
}
