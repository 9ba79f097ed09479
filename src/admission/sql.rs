//! The admission tables as statements of other areas read them: a voucher's row,
//! as the sales area reads it, carries its queue's rate and pause. The admission
//! area says how.

/// Joins, to a statement on vouchers `v`, the row of the sale's queue as `q`, if
/// it has one; [`QUEUE_COLUMNS`] reads it.
pub const JOIN_QUEUE_OF_VOUCHER: &str = "LEFT JOIN admission_queues q ON q.voucher_id = v.id";

/// The queue's columns a voucher's row carries (`NULL` without a queue): its
/// admission rate, and how long it has been paused in all, in milliseconds.
pub const QUEUE_COLUMNS: &str = "q.admit_rate, (q.paused_secs * 1000)::bigint AS queue_paused_ms";
