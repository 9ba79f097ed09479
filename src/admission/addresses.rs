//! A sale's per-address cap on places and entries (`address_cap`): each client
//! address may take at most that many places in a queue or entries in a raffle.
//! Counted in Postgres ([`claim`]), in the transaction that makes the place or
//! the entry: the count's row lock serialises one address's concurrent joins,
//! and a join that rolls back takes its count back with it.
use sqlx::PgConnection;

/// A client address and the sale's cap on it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cap {
    pub addr: String,
    pub cap: i32,
}

/// Counts one more place or entry of `cap.addr` in `voucher`, in the caller's
/// transaction: false (nothing counted) if it has `cap.cap` already.
pub async fn claim(tx: &mut PgConnection, voucher: i64, cap: &Cap) -> Result<bool, sqlx::Error> {
    let n: Option<i32> = sqlx::query_scalar(
        "INSERT INTO admission_addresses (voucher_id, addr, n) VALUES ($1, $2, 1)
         ON CONFLICT (voucher_id, addr) DO UPDATE SET n = admission_addresses.n + 1
          WHERE admission_addresses.n < $3
         RETURNING n",
    )
    .bind(voucher)
    .bind(&cap.addr)
    .bind(cap.cap)
    .fetch_optional(&mut *tx)
    .await?;
    Ok(n.is_some())
}
