//! The shipped deployment's Postgres set-up: the application runs as the
//! unprivileged role `deploy/postgres/init-app-role.sh` creates (docker-compose.yml
//! runs it), migrations included.
use crate::helpers::*;
use reqwest::StatusCode;
use sqlx::postgres::PgConnectOptions;
use std::str::FromStr;

/// Drops the role and its database however the test ends.
struct AppRole {
    role: String,
    db: String,
}

impl Drop for AppRole {
    fn drop(&mut self) {
        let (role, db) = (self.role.clone(), self.db.clone());
        let done = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                if let Ok(admin) = sqlx::PgPool::connect(&admin_db_url()).await {
                    let _ = sqlx::query(&format!("DROP DATABASE IF EXISTS \"{db}\" WITH (FORCE)"))
                        .execute(&admin)
                        .await;
                    let _ = sqlx::query(&format!("DROP ROLE IF EXISTS \"{role}\""))
                        .execute(&admin)
                        .await;
                }
            });
        });
        let _ = done.join();
    }
}

#[tokio::test]
async fn the_app_runs_as_the_unprivileged_role_the_init_script_creates() {
    let ns = Namespace::new().await;
    let admin = PgConnectOptions::from_str(&admin_db_url()).unwrap();
    let guard = AppRole {
        role: format!("{}_app", ns.name),
        db: format!("{}_appdb", ns.name),
    };
    let password = "init-script-test-password";
    let out = std::process::Command::new("sh")
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/postgres/init-app-role.sh"))
        .env("SECKILL_DB_PASSWORD", password)
        .env("SECKILL_DB_USER", &guard.role)
        .env("SECKILL_DB_NAME", &guard.db)
        .env("POSTGRES_USER", admin.get_username())
        .env("PGHOST", admin.get_host())
        .env("PGPORT", admin.get_port().to_string())
        .output()
        .expect("run the init script (needs psql)");
    assert!(
        out.status.success(),
        "init script: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let url = format!(
        "postgres://{}:{password}@{}:{}/{}",
        guard.role,
        admin.get_host(),
        admin.get_port(),
        guard.db
    );
    let app = TestApp::builder(&ns).env("DATABASE_URL", url).spawn().await;
    let (superuser, create_db, create_role): (bool, bool, bool) =
        sqlx::query_as("SELECT rolsuper, rolcreatedb, rolcreaterole FROM pg_roles WHERE rolname = current_user")
            .fetch_one(app.pg())
            .await
            .unwrap();
    assert_eq!((superuser, create_db, create_role), (false, false, false));
    // Migrated at start as that role, and serving: a sale and an order persisted.
    let v = app.flash_sale(3).await;
    let (status, body) = app.order(v, 1).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let order = format!("/api/v1/orders/{}", body["order_id"].as_str().unwrap());
    eventually(std::time::Duration::from_secs(10), || async {
        (app.get(&order, Some(&app.shopper(1))).await.1["status"] == "created").then_some(())
    })
    .await
    .expect("the order is persisted by the unprivileged role");
    app.shutdown().await;
    drop(guard);
}
