//! Migration 0019 on a database that already holds orders: the indexes it
//! replaces allowed exactly what its one index allows, so it applies to any data
//! they let in, and afterwards a shopper still has one live order per voucher.
//! And it takes its strongest lock first, so a cancellation that read the table
//! before the migration started and updates it afterwards does not deadlock
//! with it.
use crate::helpers::*;
use sqlx::PgPool;

const UNIQUE_VIOLATION: &str = "23505";

/// The namespace's database with the migrations before 0019 applied, through
/// sqlx's migrator on a copy of those files (the same files, the same
/// checksums: the full set applies 0019 on top).
async fn database_before_0019(ns: &Namespace) -> PgPool {
    let dir = std::env::temp_dir().join(format!("migrations-before-0019-{}", ns.name));
    std::fs::create_dir_all(&dir).unwrap();
    for entry in std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/migrations")).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_str().unwrap().to_owned();
        let version: u32 = name[..4].parse().unwrap();
        if version < 19 {
            std::fs::copy(&path, dir.join(&name)).unwrap();
        }
    }
    let pg = PgPool::connect(&ns.vars["DATABASE_URL"]).await.unwrap();
    sqlx::migrate::Migrator::new(dir.as_path())
        .await
        .unwrap()
        .run(&pg)
        .await
        .unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    pg
}

/// Inserts an order; the database's answer.
async fn order(pg: &PgPool, id: i64, user: i64, voucher: i64, status: &str) -> Result<(), sqlx::Error> {
    let order_no = (status != "failed").then(|| format!("N{id}"));
    sqlx::query(
        "INSERT INTO voucher_orders (id, user_id, voucher_id, status, created_at, order_no)
         VALUES ($1, $2, $3, $4, now(), $5)",
    )
    .bind(id)
    .bind(user)
    .bind(voucher)
    .bind(status)
    .bind(order_no)
    .execute(pg)
    .await
    .map(|_| ())
}

fn code(e: &sqlx::Error) -> Option<String> {
    e.as_database_error().and_then(|d| d.code()).map(|c| c.into_owned())
}

#[tokio::test]
async fn the_migration_applies_to_orders_the_old_indexes_allowed_and_keeps_their_rule() {
    let ns = Namespace::new().await;
    let pg = database_before_0019(&ns).await;
    let (v, w) = (insert_voucher_row(&pg).await, insert_voucher_row(&pg).await);
    // Everything the old indexes allowed, for one shopper and voucher: cancelled
    // and failed orders side by side with one live order; the same shopper live
    // on another voucher.
    for (id, user, voucher, status) in [
        (1, 7, v, "cancelled"),
        (2, 7, v, "cancelled"),
        (3, 7, v, "failed"),
        (4, 7, v, "failed"),
        (5, 7, v, "created"),
        (6, 7, w, "paid"),
        (7, 8, v, "paid"),
        (8, 8, w, "cancelled"),
    ] {
        order(&pg, id, user, voucher, status).await.unwrap();
    }
    sqlx::migrate!("./migrations").run(&pg).await.unwrap();

    let indexes: Vec<String> = sqlx::query_scalar(
        "SELECT indexname::text FROM pg_indexes WHERE tablename = 'voucher_orders' ORDER BY indexname",
    )
    .fetch_all(&pg)
    .await
    .unwrap();
    assert_eq!(
        indexes,
        [
            "voucher_orders_cancelled_idx",
            "voucher_orders_issued_idx",
            "voucher_orders_live_per_shopper",
            "voucher_orders_order_no_key",
            "voucher_orders_pkey",
            "voucher_orders_unpaid_idx",
        ]
    );
    let rows: i64 = sqlx::query_scalar("SELECT count(*) FROM voucher_orders")
        .fetch_one(&pg)
        .await
        .unwrap();
    assert_eq!(rows, 8);
    let collation: String = sqlx::query_scalar(
        "SELECT collation_name::text FROM information_schema.columns
          WHERE table_name = 'voucher_orders' AND column_name = 'order_no'",
    )
    .fetch_one(&pg)
    .await
    .unwrap();
    assert_eq!(collation, "C");

    // The rule after it: no second live order (created or paid), any number of
    // orders that are not live, and no business number twice.
    for status in ["created", "paid"] {
        let e = order(&pg, 20, 7, v, status).await.unwrap_err();
        assert_eq!(code(&e).as_deref(), Some(UNIQUE_VIOLATION), "{status}: {e}");
        let e = order(&pg, 21, 8, v, status).await.unwrap_err();
        assert_eq!(code(&e).as_deref(), Some(UNIQUE_VIOLATION), "{status}: {e}");
    }
    order(&pg, 22, 7, v, "cancelled").await.unwrap();
    order(&pg, 23, 8, v, "failed").await.unwrap();
    order(&pg, 24, 8, w, "created").await.unwrap();
    let e = sqlx::query("UPDATE voucher_orders SET order_no = 'N5' WHERE id = 7")
        .execute(&pg)
        .await
        .unwrap_err();
    assert_eq!(code(&e).as_deref(), Some(UNIQUE_VIOLATION), "{e}");
    pg.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_migration_and_a_cancellation_racing_both_finish() {
    let ns = Namespace::new().await;
    let pg = database_before_0019(&ns).await;
    let v = insert_voucher_row(&pg).await;
    order(&pg, 1, 7, v, "created").await.unwrap();
    // A cancellation as `lifecycle` makes one: it reads the order's voucher, then
    // (here, once the migration waits for it) updates the order.
    let mut cancel = pg.begin().await.unwrap();
    let read: i64 = sqlx::query_scalar("SELECT voucher_id FROM voucher_orders WHERE id = 1")
        .fetch_one(&mut *cancel)
        .await
        .unwrap();
    assert_eq!(read, v);
    let migrating = {
        let pg = pg.clone();
        tokio::spawn(async move { sqlx::migrate!("./migrations").run(&pg).await })
    };
    until_one_waits_for_a_lock(&pg).await;
    sqlx::query("UPDATE voucher_orders SET status = 'cancelled', cancelled_at = now() WHERE id = 1")
        .execute(&mut *cancel)
        .await
        .expect("the cancellation's update (a deadlock with the migration fails it)");
    cancel.commit().await.unwrap();
    migrating.await.unwrap().expect("the migration, after the cancellation");
    let status: String = sqlx::query_scalar("SELECT status FROM voucher_orders WHERE id = 1")
        .fetch_one(&pg)
        .await
        .unwrap();
    assert_eq!(status, "cancelled");
    order(&pg, 2, 7, v, "created").await.unwrap();
    pg.close().await;
}
