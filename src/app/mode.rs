//! What one process runs ([`Mode`]) and the knobs tests turn ([`Options`]).
use crate::clock::Clock;

/// What one process runs (the subcommands of CONTRACT.md).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// API, outbox relay and order worker.
    All,
    /// API and outbox relay.
    Serve,
    /// Order worker only.
    Worker,
}

impl Mode {
    pub(super) fn serves_http(self) -> bool {
        self != Mode::Worker
    }
    pub(super) fn relays(self) -> bool {
        self != Mode::Worker
    }
    pub(super) fn works(self) -> bool {
        self != Mode::Serve
    }
    /// Its subcommand's name.
    pub fn name(self) -> &'static str {
        match self {
            Mode::All => "all",
            Mode::Serve => "serve",
            Mode::Worker => "worker",
        }
    }
}

/// Knobs tests turn; production uses the defaults.
#[derive(Clone)]
pub struct Options {
    pub clock: Clock,
    /// Run the relay (tests turn it off to leave orders in the outbox).
    pub relay: bool,
    /// Run the worker where the mode has one.
    pub worker: bool,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            clock: Clock::system(),
            relay: true,
            worker: true,
        }
    }
}
