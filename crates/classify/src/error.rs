//! The crate's one error type: every way a rule set can be refused when a
//! classifier is built, or a ClassBench parameter file when it is read.
//! Lookups never fail.

use thiserror::Error;

/// Why a rule set or a configuration was refused.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ClassifyError {
    #[error("rule {rule}: {field} range {lo}..={hi} is empty (the low end is above the high end)")]
    EmptyRange {
        rule: usize,
        field: &'static str,
        lo: u16,
        hi: u16,
    },
    #[error("rule {rule}: vlan {value} is not a VLAN id (0..=4095)")]
    VlanOutOfRange { rule: usize, value: u16 },
    #[error("rule {rule}: {field} prefix length {len} is longer than the address ({max} bits)")]
    PrefixTooLong {
        rule: usize,
        field: &'static str,
        len: u8,
        max: u8,
    },
    #[error("rule {rule}: its addresses and family disagree (an IPv4 prefix never matches an IPv6 packet)")]
    FamilyConflict { rule: usize },
    #[error("{rules} rules: at most {limit} are supported")]
    TooManyRules { rules: usize, limit: usize },
    #[error("the rules expand to more than {limit} internal entries (port and VLAN ranges become several prefixes each); use fewer or wider ranges")]
    TooManyEntries { limit: usize },
    #[error("the full USS construction would make more than {limit} uniflows (rules wider than the sub-prefix masks around them are cut into many); use the uniflow cache instead")]
    TooManyUniflows { limit: usize },
    #[error("a fast-path cache needs a capacity of at least 1 entry")]
    ZeroCapacity,
    #[error("ClassBench parameter file, line {line}: {reason}")]
    SeedFormat { line: usize, reason: String },
}
