//! Logging: `tracing` with `RUST_LOG` filtering; request ids come from
//! tracing-actix-web's root span, so every line of a request carries one.
use tracing_subscriber::{fmt, EnvFilter};

/// Installs the global subscriber once; later calls (tests) are no-ops.
pub fn init() {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info,sqlx=warn,lapin=warn"));
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stdout());
    let _ = fmt()
        .with_env_filter(filter)
        .with_target(false)
        .with_ansi(ansi)
        .try_init();
}
