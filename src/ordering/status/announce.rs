//! What the trigger of `migrations/0029_order_changes.sql` announces on
//! [`super::board::CHANNEL`]: the rows a committed change left.
use crate::ordering::model::Order;

/// One row an announcement names: its ids, shopper and sale, and (unless it was
/// deleted) the order as the change left it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Changed {
    pub id: i64,
    pub issued_id: Option<i64>,
    pub user: i64,
    pub voucher: i64,
    pub order: Option<Order>,
}

/// A row of an announcement: id, issued_id, user_id, voucher_id, status,
/// order_no, created_at, paid_at, cancelled_at.
type Row = (
    i64,
    Option<i64>,
    i64,
    i64,
    String,
    Option<String>,
    chrono::DateTime<chrono::Utc>,
    Option<chrono::DateTime<chrono::Utc>>,
    Option<chrono::DateTime<chrono::Utc>>,
);

#[derive(serde::Deserialize)]
struct Payload {
    op: String,
    rows: Vec<Row>,
}

/// The rows of an announcement's payload (see `migrations/0029_order_changes.sql`);
/// None for a payload of another shape (a ping).
pub fn parse(payload: &str) -> Option<Vec<Changed>> {
    use crate::id::{OrderId, UserId, VoucherId};
    let p: Payload = serde_json::from_str(payload).ok()?;
    let kept = p.op != "DELETE";
    Some(
        p.rows
            .into_iter()
            .map(
                |(id, issued_id, user, voucher, status, order_no, created_at, paid_at, cancelled_at)| Changed {
                    id,
                    issued_id,
                    user,
                    voucher,
                    order: kept.then(|| Order {
                        id: OrderId::new(issued_id.unwrap_or(id)),
                        order_no,
                        voucher_id: VoucherId::new(voucher),
                        user_id: UserId::new(user),
                        status,
                        created_at,
                        paid_at,
                        cancelled_at,
                    }),
                },
            )
            .collect(),
    )
}
