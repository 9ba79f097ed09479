//! `seckill-bench`: the load generator (`crowd`), the lock benchmark (`lock`) and
//! the raffle draw's latency benchmark (`raffle`),
//! kept out of the product so that their HTTP client and histograms are not the
//! service's dependencies. Settings come from the same environment as the service's.
mod crowd;
mod lock;
mod raffle;
mod redis_stats;

use anyhow::Result;
use clap::{Parser, Subcommand};
use seckill::config::Settings;

#[derive(Parser)]
#[command(name = "seckill-bench", about = "Load and lock benchmarks against seckill")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Fires a flash crowd at a running server and checks the invariants.
    Crowd(crowd::Args),
    /// Measures the distributed lock: uncontended rate and hand-over latency.
    Lock(lock::LockArgs),
    /// Latency of raffle reads and entries while a large raffle is closed and drawn.
    Raffle(raffle::RaffleArgs),
}

#[tokio::main]
async fn main() -> Result<()> {
    let cli = Cli::parse();
    let settings = Settings::from_env()?;
    match cli.command {
        Command::Crowd(args) => crowd::run(args, &settings).await,
        Command::Lock(args) => lock::run_lock(args, &settings).await,
        Command::Raffle(args) => raffle::run(args, &settings).await,
    }
}
