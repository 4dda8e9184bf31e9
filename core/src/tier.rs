//! The sensitivity tier every rule speaks of (classification, detectors, retention, recall).

/// Sensitivity tier, ordered from least to most restrictive (matches the SQL enum order).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Tier {
    Public,
    Internal,
    Confidential,
    Restricted,
}

impl Tier {
    pub const ALL: [Tier; 4] = [Tier::Public, Tier::Internal, Tier::Confidential, Tier::Restricted];

    pub fn as_str(self) -> &'static str {
        match self {
            Tier::Public => "public",
            Tier::Internal => "internal",
            Tier::Confidential => "confidential",
            Tier::Restricted => "restricted",
        }
    }

    /// Exact, case-sensitive parse of an enum label (the SQL enum is case-sensitive too).
    pub fn parse(s: &str) -> Option<Tier> {
        Tier::ALL.into_iter().find(|t| t.as_str() == s)
    }

    /// BFSI risk band (seed: `aligns()`).
    pub fn risk_band(self) -> &'static str {
        match self {
            Tier::Public => "low",
            Tier::Internal => "medium",
            Tier::Confidential => "high",
            Tier::Restricted => "critical",
        }
    }
}
