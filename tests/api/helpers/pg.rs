//! Postgres alone, for the tests of its own rules (the schema's triggers and
//! indexes, the migrations): a voucher row, and waiting for a lock wait.
use sqlx::{PgPool, Postgres};
use std::time::{Duration, Instant};

/// Inserts a voucher (not a flash sale) and returns its id.
pub async fn insert_voucher_row<'e>(pg: impl sqlx::Executor<'e, Database = Postgres>) -> i64 {
    sqlx::query_scalar(
        "INSERT INTO vouchers (shop_id, title, pay_value, actual_value) VALUES (1, 'v', 1, 1) RETURNING id",
    )
    .fetch_one(pg)
    .await
    .unwrap()
}

/// Waits until a backend of this test's database waits for a lock: the statement
/// spawned last has reached what an open transaction holds.
pub async fn until_one_waits_for_a_lock(pg: &PgPool) {
    until_a_statement_waits_for_a_lock(pg, "%").await
}

/// Waits until a statement of this test's database whose text is `LIKE` `query`
/// waits for a lock (other backends of the test may wait too).
pub async fn until_a_statement_waits_for_a_lock(pg: &PgPool, query: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let waiting: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_stat_activity
              WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE $1",
        )
        .bind(query)
        .fetch_one(pg)
        .await
        .unwrap();
        if waiting > 0 {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "no statement like {query:?} waited for a lock"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
