//! One order request as the edge hands it over: [`OrderPlacer::take`] runs its
//! checks in the order they cost, then places it.
use super::OrderPlacer;
use crate::id::{OrderId, UserId, VoucherId};
use crate::ordering::refusal::{NotAdmitted, NotTaken, Refusal};

impl OrderPlacer {
    /// Shopper `user`'s order of sale `voucher`, in the order the checks cost: what
    /// this process answers alone (from its cache and clock: no place in the rate
    /// limiter is spent on the crowd after a sell-out or outside the window), the
    /// admission token of a queue or raffle sale (`admission_token`, checked in
    /// process), the per-shopper rate limit (`limit`, the edge's), then the order
    /// ([`OrderPlacer::place`]).
    pub async fn take<L>(
        &self,
        voucher: VoucherId,
        user: UserId,
        admission_token: Option<&str>,
        limit: impl FnOnce() -> Result<(), L>,
    ) -> Result<OrderId, NotTaken<L>> {
        let judged = self.judge_early(voucher).map_err(NotTaken::Refused)?;
        if judged.admission().gated() {
            self.admitted(admission_token, user, voucher, judged.queue_paused_ms())
                .map_err(|n| NotTaken::Refused(Refusal::NotAdmitted(n)))?;
        }
        limit().map_err(NotTaken::Limited)?;
        self.place(judged, user).await.map_err(NotTaken::Refused)
    }

    /// Whether `token` admits `user` to order `voucher` now (whose queue's pauses
    /// that ended add up to `paused_ms`).
    fn admitted(
        &self,
        token: Option<&str>,
        user: UserId,
        voucher: VoucherId,
        paused_ms: i64,
    ) -> Result<(), NotAdmitted> {
        use crate::admission::token::Refused;
        let token = token.ok_or(NotAdmitted::Required)?;
        self.admission
            .signer
            .check_admission(token, user.get(), voucher.get(), paused_ms, self.clock.unix_secs())
            .map_err(|refused| match refused {
                Refused::Expired => NotAdmitted::Expired,
                Refused::Invalid(why) => NotAdmitted::Invalid(why),
            })
    }
}
