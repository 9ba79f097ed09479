//! A sale's repair lease: a row of Postgres's (`sale_states.repairer`,
//! `repair_until`), taken without waiting, renewed every third of it while the
//! repairer works, dropped when it is done. A repairer frozen or cut off for longer
//! loses it, and another takes the sale over; every step of a repair is fenced in
//! Redis, so one that lost its lease writes nothing.
use super::desk::Recovery;
use anyhow::{bail, Context, Result};

impl Recovery {
    /// Renews the sale's lease every third of it; returns (an error) once this
    /// process no longer holds it.
    pub(super) async fn keep_lease(&self, voucher: i64) -> anyhow::Error {
        loop {
            tokio::time::sleep(self.lease / 3).await;
            if let Err(e) = self.renew_lease(voucher).await {
                return e;
            }
        }
    }

    /// Takes the sale's repair lease if nobody holds it (or its holder's ran out).
    pub(super) async fn take_lease(&self, voucher: i64) -> Result<bool> {
        sqlx::query("INSERT INTO sale_states (namespace, voucher_id) VALUES ($1, $2) ON CONFLICT DO NOTHING")
            .bind(self.namespace())
            .bind(voucher)
            .execute(&self.pg)
            .await
            .context("making a sale's state")?;
        let got = sqlx::query(
            "UPDATE sale_states SET repairer = $3, repair_until = clock_timestamp() + make_interval(secs => $4)
              WHERE namespace = $1 AND voucher_id = $2
                AND (repairer IS NULL OR repairer = $3 OR repair_until < clock_timestamp())",
        )
        .bind(self.namespace())
        .bind(voucher)
        .bind(&self.me)
        .bind(self.lease.as_secs_f64())
        .execute(&self.pg)
        .await
        .context("taking a sale's repair lease")?
        .rows_affected();
        Ok(got == 1)
    }

    /// Renews the lease; an error if this process no longer holds it.
    pub(super) async fn renew_lease(&self, voucher: i64) -> Result<()> {
        let held = sqlx::query(
            "UPDATE sale_states SET repair_until = clock_timestamp() + make_interval(secs => $4)
              WHERE namespace = $1 AND voucher_id = $2 AND repairer = $3",
        )
        .bind(self.namespace())
        .bind(voucher)
        .bind(&self.me)
        .bind(self.lease.as_secs_f64())
        .execute(&self.pg)
        .await
        .context("renewing a sale's repair lease")?
        .rows_affected();
        if held != 1 {
            bail!("the repair lease of sale {voucher} ran out and was taken over; this repair stops");
        }
        Ok(())
    }

    pub(super) async fn drop_lease(&self, voucher: i64) {
        let _ = sqlx::query(
            "UPDATE sale_states SET repairer = NULL, repair_until = NULL
              WHERE namespace = $1 AND voucher_id = $2 AND repairer = $3",
        )
        .bind(self.namespace())
        .bind(voucher)
        .bind(&self.me)
        .execute(&self.pg)
        .await;
    }
}
