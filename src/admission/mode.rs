//! [`Mode`]: a flash sale's admission, as stored and served.
use serde::Serialize;
use utoipa::ToSchema;

/// How shoppers get the right to order a flash sale.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// Whoever reaches the order script first (no admission token).
    #[default]
    FirstCome,
    /// A waiting room: places (early arrivals shuffled), admitted at a rate.
    Queue,
    /// Entries until `draw_at`, then a verifiable draw.
    Raffle,
}

impl Mode {
    pub const ALL: [&'static str; 3] = ["first_come", "queue", "raffle"];

    pub fn as_str(self) -> &'static str {
        match self {
            Mode::FirstCome => "first_come",
            Mode::Queue => "queue",
            Mode::Raffle => "raffle",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "first_come" => Some(Mode::FirstCome),
            "queue" => Some(Mode::Queue),
            "raffle" => Some(Mode::Raffle),
            _ => None,
        }
    }

    /// Whether an order needs an admission token.
    pub fn gated(self) -> bool {
        self != Mode::FirstCome
    }
}

#[cfg(test)]
mod tests {
    use super::Mode;

    #[test]
    fn every_mode_reads_back_its_name() {
        for name in Mode::ALL {
            assert_eq!(Mode::parse(name).unwrap().as_str(), name);
        }
        assert_eq!(Mode::parse("lottery"), None);
        assert!(!Mode::FirstCome.gated() && Mode::Queue.gated() && Mode::Raffle.gated());
    }
}
