//! `seckill-bench`: the load generator (`crowd`) and the lock benchmark (`lock`),
//! kept out of the product so that their HTTP client and histograms are not the
//! service's dependencies. Settings come from the same environment as the service's.
mod bench;

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
    Crowd(bench::Args),
    /// Measures the distributed lock: uncontended rate and hand-over latency.
    Lock(bench::LockArgs),
}

#[tokio::main]
async fn main() -> Result<()> {
    let cli = Cli::parse();
    let settings = Settings::from_env()?;
    match cli.command {
        Command::Crowd(args) => bench::run(args, &settings).await,
        Command::Lock(args) => bench::run_lock(args, &settings).await,
    }
}
