//! The rule of the foreign key `voucher_orders.voucher_id -> vouchers`, which
//! migration 0018 checks once per statement (triggers) instead of once per row: an
//! order names a voucher that exists, a voucher with orders stays, an order never
//! changes voucher, and an insert racing a deletion of its voucher loses one way or
//! the other, never both win.
use crate::helpers::*;
use sqlx::{PgPool, Postgres};

const FOREIGN_KEY_VIOLATION: &str = "23503";

/// The namespace's database with every migration applied (no app: this is
/// Postgres's rule alone).
async fn database(ns: &Namespace) -> PgPool {
    let pg = PgPool::connect(&ns.vars["DATABASE_URL"]).await.unwrap();
    sqlx::migrate!("./migrations").run(&pg).await.unwrap();
    pg
}

/// Inserts one `created` order per (id, voucher) in one statement.
async fn insert<'e>(pg: impl sqlx::Executor<'e, Database = Postgres>, rows: &[(i64, i64)]) -> Result<u64, sqlx::Error> {
    let (ids, vouchers): (Vec<i64>, Vec<i64>) = rows.iter().copied().unzip();
    sqlx::query(
        "INSERT INTO voucher_orders (id, user_id, voucher_id, status, created_at)
         SELECT id, id, v, 'created', now() FROM UNNEST($1::bigint[], $2::bigint[]) AS t(id, v)",
    )
    .bind(&ids)
    .bind(&vouchers)
    .execute(pg)
    .await
    .map(|r| r.rows_affected())
}

fn refused_by_the_key<T: std::fmt::Debug>(r: Result<T, sqlx::Error>) {
    match r {
        Err(sqlx::Error::Database(e)) if e.code().as_deref() == Some(FOREIGN_KEY_VIOLATION) => {}
        other => panic!("expected foreign_key_violation, got {other:?}"),
    }
}

async fn orders(pg: &PgPool) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM voucher_orders")
        .fetch_one(pg)
        .await
        .unwrap()
}

#[tokio::test]
async fn orders_name_vouchers_that_exist_and_vouchers_with_orders_stay() {
    let ns = Namespace::new().await;
    let pg = database(&ns).await;
    let (v, w, unordered) = (
        insert_voucher_row(&pg).await,
        insert_voucher_row(&pg).await,
        insert_voucher_row(&pg).await,
    );
    assert_eq!(insert(&pg, &[(1, v), (2, w), (3, v)]).await.unwrap(), 3);
    // One row of a statement naming a missing voucher fails the whole statement.
    refused_by_the_key(insert(&pg, &[(4, v), (5, w + unordered + 1000)]).await);
    assert_eq!(orders(&pg).await, 3);
    refused_by_the_key(
        sqlx::query("DELETE FROM vouchers WHERE id = $1")
            .bind(v)
            .execute(&pg)
            .await,
    );
    refused_by_the_key(
        sqlx::query("UPDATE vouchers SET id = $2 WHERE id = $1")
            .bind(w)
            .bind(w + unordered + 1000)
            .execute(&pg)
            .await,
    );
    refused_by_the_key(sqlx::query("TRUNCATE vouchers CASCADE").execute(&pg).await);
    refused_by_the_key(
        sqlx::query("UPDATE voucher_orders SET voucher_id = $1 WHERE id = 1")
            .bind(w)
            .execute(&pg)
            .await,
    );
    // What the key never refused still passes: other columns of either row, and a
    // voucher without orders going away.
    sqlx::query("UPDATE voucher_orders SET status = 'paid', paid_at = now() WHERE id = 1")
        .execute(&pg)
        .await
        .unwrap();
    sqlx::query("UPDATE vouchers SET title = 'renamed' WHERE id = $1")
        .bind(v)
        .execute(&pg)
        .await
        .unwrap();
    let gone = sqlx::query("DELETE FROM vouchers WHERE id = $1")
        .bind(unordered)
        .execute(&pg)
        .await
        .unwrap();
    assert_eq!(gone.rows_affected(), 1);
    pg.close().await;
}

/// An insert whose transaction is open holds its voucher: a deletion waits for it,
/// then fails. A deletion whose transaction is open holds the voucher: an insert
/// waits for it, then fails. Either way the order and the voucher are not both lost
/// and found.
#[tokio::test]
async fn an_insert_and_the_deletion_of_its_voucher_never_both_succeed() {
    let ns = Namespace::new().await;
    let pg = database(&ns).await;
    let (v, w) = (insert_voucher_row(&pg).await, insert_voucher_row(&pg).await);

    let mut inserting = pg.begin().await.unwrap();
    insert(&mut *inserting, &[(1, v)]).await.unwrap();
    let deleting = {
        let pg = pg.clone();
        tokio::spawn(async move {
            sqlx::query("DELETE FROM vouchers WHERE id = $1")
                .bind(v)
                .execute(&pg)
                .await
        })
    };
    until_one_waits_for_a_lock(&pg).await;
    assert!(!deleting.is_finished(), "the deletion waits for the open insert");
    inserting.commit().await.unwrap();
    refused_by_the_key(deleting.await.unwrap());
    assert_eq!(orders(&pg).await, 1);

    let mut deleting = pg.begin().await.unwrap();
    sqlx::query("DELETE FROM vouchers WHERE id = $1")
        .bind(w)
        .execute(&mut *deleting)
        .await
        .unwrap();
    let inserting = {
        let pg = pg.clone();
        tokio::spawn(async move { insert(&pg, &[(2, w)]).await })
    };
    until_one_waits_for_a_lock(&pg).await;
    assert!(!inserting.is_finished(), "the insert waits for the open deletion");
    deleting.commit().await.unwrap();
    refused_by_the_key(inserting.await.unwrap());
    assert_eq!(orders(&pg).await, 1);
    pg.close().await;
}
