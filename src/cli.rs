//! The command line (CONTRACT.md): `all`, `serve`, `worker`, `migrate`, `token`,
//! `outbox-formats`, `raffle verify`
//! (the load generator is the `seckill-bench` crate in `bench/`).
use crate::app::{self, Application, Mode};
use crate::config::Settings;
use crate::http::auth::{JwtKeys, Role};
use anyhow::{Context, Result};
use clap::{Parser, Subcommand, ValueEnum};

#[derive(Parser, Debug)]
#[command(name = "seckill", version, about = "Flash-sale voucher ordering backend")]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// API, outbox relay and order worker in one process (the local default).
    All,
    /// API and outbox relay only.
    Serve,
    /// Order worker only.
    Worker,
    /// Applies pending migrations and exits.
    Migrate,
    /// Prints a signed token.
    Token {
        /// The user id (`sub`).
        #[arg(long)]
        user: i64,
        #[arg(long, value_enum)]
        role: Option<RoleArg>,
        #[arg(long, default_value_t = 3600)]
        ttl_secs: u64,
        /// Prints tokens for COUNT consecutive users starting at --user, one per line
        /// (for load tools that need many distinct shoppers).
        #[arg(long, default_value_t = 1)]
        count: u32,
    },
    /// The outbox format fence: the format writers write and the processes
    /// announced as reading outbox entries (CHANGELOG.md, 0024).
    OutboxFormats {
        #[command(subcommand)]
        action: Option<FormatAction>,
    },
    /// A raffle's draw, checked from outside.
    Raffle {
        #[command(subcommand)]
        action: RaffleAction,
    },
}

#[derive(Subcommand, Debug)]
pub enum RaffleAction {
    /// Recomputes a raffle's draw from the public endpoints alone (its summary and
    /// entries) and says whether the published winners match the rule: exit 0 if
    /// they do, 1 if not.
    Verify {
        voucher: i64,
        /// The API's base URL.
        #[arg(long, default_value = "http://127.0.0.1:8080")]
        url: String,
    },
}

#[derive(Subcommand, Debug)]
pub enum FormatAction {
    /// Lists the decision and the announced processes (the default).
    List,
    /// Declares a crashed process gone: its announcement no longer holds the
    /// format writers write back.
    Forget {
        /// The process, as `seckill outbox-formats` lists it.
        process: String,
        /// Also a process that renewed its announcement within the last 30 s.
        #[arg(long)]
        force: bool,
    },
    /// Lowers the format writers write (a rollback to an older binary); refused
    /// while a process that reads a newer one is announced.
    Lower {
        #[arg(long)]
        to: u32,
    },
}

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum RoleArg {
    Admin,
    Service,
}

pub fn run(cli: Cli) -> Result<()> {
    if let Command::Token {
        user,
        role,
        ttl_secs,
        count,
    } = cli.command
    {
        return mint_tokens(user, role, ttl_secs, count);
    }
    if let Command::Raffle {
        action: RaffleAction::Verify { voucher, url },
    } = &cli.command
    {
        // Public endpoints only: no settings, no secret, no database.
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
        let verified = runtime.block_on(crate::admission::verify::verify(url, *voucher))?;
        println!("raffle {voucher}: {verified}");
        return Ok(());
    }
    crate::telemetry::init();
    let settings = Settings::from_env()?;
    let mut runtime = tokio::runtime::Builder::new_multi_thread();
    if settings.pipeline.runtime_threads > 0 {
        runtime.worker_threads(settings.pipeline.runtime_threads);
    }
    let runtime = runtime.enable_all().build().context("starting the async runtime")?;
    runtime.block_on(async move {
        let mode = match cli.command {
            Command::All => Mode::All,
            Command::Serve => Mode::Serve,
            Command::Worker => Mode::Worker,
            Command::Migrate => {
                let pg = app::pg_pool(&settings)?;
                let sequences = crate::numbers::Sequences::new(pg.clone(), crate::clock::Clock::system());
                app::migrate(&pg, &sequences, &settings).await?;
                println!("migrations applied");
                return Ok(());
            }
            Command::Token { .. } | Command::Raffle { .. } => unreachable!("handled above"),
            Command::OutboxFormats { action } => {
                let pg = app::pg_pool(&settings)?;
                return outbox_formats(&pg, action.unwrap_or(FormatAction::List)).await;
            }
        };
        Application::build(settings, mode).await?.run_until_stopped().await
    })
}

/// `seckill token`: `count` tokens for the users from `user` on, as the server
/// would accept them (never longer-lived than it takes).
fn mint_tokens(user: i64, role: Option<RoleArg>, ttl_secs: u64, count: u32) -> Result<()> {
    let settings = Settings::from_env()?;
    if settings.auth.jwt_secret_is_dev {
        eprintln!("warning: SECKILL_JWT_SECRET is not set; signing with the DEVELOPMENT secret");
    }
    anyhow::ensure!(user > 0, "--user must be a positive id");
    let role = match role {
        None => Role::Shopper,
        Some(RoleArg::Admin) => Role::Admin,
        Some(RoleArg::Service) => Role::Service,
    };
    let keys = JwtKeys::from_settings(&settings.auth);
    // Never mint what the server refuses.
    anyhow::ensure!(
        ttl_secs <= keys.max_ttl_secs(),
        "--ttl-secs {ttl_secs} is longer than the server accepts (SECKILL_JWT_MAX_TTL_SECS = {})",
        keys.max_ttl_secs()
    );
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    for u in user..user.saturating_add(count as i64) {
        use std::io::Write;
        writeln!(out, "{}", keys.mint(u, role, ttl_secs))?;
    }
    Ok(())
}

/// `seckill outbox-formats`.
async fn outbox_formats(pg: &sqlx::PgPool, action: FormatAction) -> Result<()> {
    use crate::ordering::outbox::format;
    match action {
        FormatAction::List => {
            let (writes, by, procs) = format::list(pg).await?;
            println!("writers write outbox format {writes} (decided by {by})");
            println!(
                "{:<34} {:>5} {:<6} {:<20} {:>8} {:<25} seen",
                "process", "reads", "mode", "host", "pid", "started"
            );
            for p in procs {
                println!(
                    "{:<34} {:>5} {:<6} {:<20} {:>8} {:<25} {}",
                    p.process,
                    p.reads,
                    p.mode,
                    p.host,
                    p.pid,
                    p.started_at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
                    p.seen_at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
                );
            }
        }
        FormatAction::Forget { process, force } => {
            anyhow::ensure!(
                format::forget(pg, &process, force).await?,
                "no process {process} is announced"
            );
            println!("{process} declared gone");
        }
        FormatAction::Lower { to } => {
            format::lower(pg, to, "seckill outbox-formats lower").await?;
            println!("writers write outbox format {to} from their next check on");
        }
    }
    Ok(())
}
