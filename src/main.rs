//! Command line only: parse the arguments and call into the library.
use clap::Parser;

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    let cli = seckill::cli::Cli::parse();
    match seckill::cli::run(cli) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("seckill: {err:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
