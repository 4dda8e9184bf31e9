//! Lineage's pure rules (SPEC §18, docs/reference.md#lineage): the checks of a `derived_from`
//! list, the trust ranks of source types and the floors a derived memory takes from its sources.
//! The classify trigger's Rust pass applies them to an INSERT into memory.observations (the
//! PL/pgSQL triggers of sql/lineage.sql keep the same rules for an UPDATE).

use crate::classify::SourceType;

/// At most this many sources a memory.
pub const MAX_SOURCES: usize = 1000;

/// A `derived_from` list refused (22023).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SourcesError {
    /// An array of arrays.
    Dimensions,
    /// More than MAX_SOURCES ids (the number given).
    TooMany(usize),
    /// A NULL element (1-based position).
    Null(usize),
    /// The memory's own id.
    Itself,
}

impl SourcesError {
    /// The message, as sql/lineage.sql's memory_internal._lineage_ids words it (`own`: the
    /// memory's id, for `Itself`).
    pub fn message(&self, own: &str) -> String {
        match self {
            SourcesError::Dimensions => "derived_from takes a one-dimensional array of memory ids".into(),
            SourcesError::TooMany(n) => format!("derived_from names at most 1,000 memories ({n} given)"),
            SourcesError::Null(i) => format!("derived_from takes no NULL id (element {i})"),
            SourcesError::Itself => format!("memory {own} cannot be derived from itself"),
        }
    }

    pub fn hint(&self) -> &'static str {
        match self {
            SourcesError::Dimensions => "Pass ARRAY[id, id, ...]: the memories this one was made from.",
            SourcesError::TooMany(_) => "Derive from the memories the text was made from; a summary of more is better made from summaries.",
            SourcesError::Null(_) => "Leave NULLs out of derived_from.",
            SourcesError::Itself => "derived_from names other memories: a cycle in lineage is refused.",
        }
    }
}

/// The sources of a `derived_from` array (`ndims` dimensions, elements in order, None for NULL)
/// of the memory `own`: each once, in the order first given; None for an empty array (no
/// sources). Checked in this order: dimensions, count, NULLs, the memory itself.
pub fn sources<T: Copy + PartialEq>(own: Option<T>, ids: &[Option<T>], ndims: i32) -> Result<Option<Vec<T>>, SourcesError> {
    if ids.is_empty() {
        return Ok(None);
    }
    if ndims > 1 {
        return Err(SourcesError::Dimensions);
    }
    if ids.len() > MAX_SOURCES {
        return Err(SourcesError::TooMany(ids.len()));
    }
    if let Some(i) = ids.iter().position(Option::is_none) {
        return Err(SourcesError::Null(i + 1));
    }
    if own.is_some() && ids.contains(&own) {
        return Err(SourcesError::Itself);
    }
    let mut out: Vec<T> = Vec::with_capacity(ids.len());
    for id in ids.iter().flatten() {
        if !out.contains(id) {
            out.push(*id);
        }
    }
    Ok(Some(out))
}

/// How much a source type is trusted: 1 (decision, most) to 5 (NULL, unknown; least).
pub fn trust_rank(st: Option<SourceType>) -> i32 {
    match st {
        Some(SourceType::Decision) => 1,
        Some(SourceType::Fact) => 2,
        Some(SourceType::Preference) => 3,
        Some(SourceType::ToolResult) => 4,
        None => 5,
    }
}

/// The source type of a trust rank (5, or any rank out of 1..=4: None).
pub fn trust_type(rank: i32) -> Option<SourceType> {
    usize::try_from(rank - 1).ok().and_then(|i| SourceType::ALL.get(i).copied())
}

/// The source type a derived memory written as `written` keeps when its least trusted source
/// has rank `worst` (None: no live source): Some(new) when it must be lowered, None when it
/// stays. Summarising never upgrades authority.
pub fn trust_floor(written: Option<SourceType>, worst: Option<i32>) -> Option<Option<SourceType>> {
    let worst = worst?;
    (trust_rank(written) < worst).then(|| trust_type(worst))
}

/// A retention stamp no later than the sources' earliest (`least` of SQL: NULL is no bound).
pub fn ceiling(stamp: Option<i64>, sources: Option<i64>) -> Option<i64> {
    match (stamp, sources) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// The key of a memory's lineage lock, as SQL spells it (`'memory_ext.lineage:' || id::text`:
/// the uuid's text form, lower-case hex in groups of 8-4-4-4-12), written without a formatter
/// (a derived insert takes one per source).
pub const LOCK_PREFIX: &str = "memory_ext.lineage:";

/// `LOCK_PREFIX` followed by the text form of the uuid `id` (55 bytes of ASCII).
pub fn lock_key(id: &[u8; 16]) -> [u8; 55] {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut out = [0u8; 55];
    out[..19].copy_from_slice(LOCK_PREFIX.as_bytes());
    let mut at = 19;
    for (k, b) in id.iter().enumerate() {
        if matches!(k, 4 | 6 | 8 | 10) {
            out[at] = b'-';
            at += 1;
        }
        out[at] = HEX[(b >> 4) as usize];
        out[at + 1] = HEX[(b & 15) as usize];
        at += 2;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lock_key_is_the_text_form_of_sql() {
        let id = [0x6f, 0x9a, 0x1c, 0x02, 0xb7, 0x3e, 0x4d, 0x10, 0x8f, 0x00, 0xff, 0x12, 0x34, 0x56, 0x78, 0x9a];
        assert_eq!(std::str::from_utf8(&lock_key(&id)).unwrap(), "memory_ext.lineage:6f9a1c02-b73e-4d10-8f00-ff123456789a");
        assert_eq!(std::str::from_utf8(&lock_key(&[0; 16])).unwrap(), "memory_ext.lineage:00000000-0000-0000-0000-000000000000");
    }

    #[test]
    fn sources_are_checked_in_order_and_kept_once() {
        assert_eq!(sources::<u8>(Some(9), &[], 1), Ok(None));
        assert_eq!(sources(Some(9), &[Some(1), Some(2), Some(1)], 1), Ok(Some(vec![1, 2])));
        assert_eq!(sources(None, &[Some(3)], 1), Ok(Some(vec![3])));
        assert_eq!(sources(Some(9), &[Some(1)], 2), Err(SourcesError::Dimensions));
        let many: Vec<Option<u16>> = (0..1001).map(Some).collect();
        assert_eq!(sources(None, &many, 1), Err(SourcesError::TooMany(1001)));
        assert_eq!(sources(None, &many[..1000], 1).map(|v| v.map(|v| v.len())), Ok(Some(1000)));
        assert_eq!(sources(Some(9), &[Some(1), None], 1), Err(SourcesError::Null(2)));
        assert_eq!(sources(Some(9), &[Some(1), Some(9)], 1), Err(SourcesError::Itself));
        // A NULL is told before the memory itself, as the SQL checks do.
        assert_eq!(sources(Some(9), &[Some(9), None], 1), Err(SourcesError::Null(2)));
    }

    #[test]
    fn messages_match_the_sql_checks() {
        assert_eq!(SourcesError::TooMany(1001).message(""), "derived_from names at most 1,000 memories (1001 given)");
        assert_eq!(SourcesError::Null(2).message(""), "derived_from takes no NULL id (element 2)");
        assert_eq!(SourcesError::Itself.message("abc"), "memory abc cannot be derived from itself");
        assert_eq!(SourcesError::Dimensions.message(""), "derived_from takes a one-dimensional array of memory ids");
    }

    #[test]
    fn trust_ranks_round_trip() {
        for st in SourceType::ALL {
            assert_eq!(trust_type(trust_rank(Some(st))), Some(st));
        }
        assert_eq!(trust_rank(None), 5);
        assert_eq!(trust_type(5), None);
        assert_eq!(trust_type(0), None);
    }

    #[test]
    fn trust_is_never_above_the_least_trusted_source() {
        assert_eq!(trust_floor(Some(SourceType::Decision), Some(4)), Some(Some(SourceType::ToolResult)));
        assert_eq!(trust_floor(Some(SourceType::Decision), Some(5)), Some(None));
        assert_eq!(trust_floor(Some(SourceType::ToolResult), Some(2)), None);
        assert_eq!(trust_floor(None, Some(1)), None);
        assert_eq!(trust_floor(Some(SourceType::Fact), None), None);
    }

    #[test]
    fn retention_ends_no_later_than_the_sources() {
        assert_eq!(ceiling(Some(10), Some(5)), Some(5));
        assert_eq!(ceiling(Some(3), Some(5)), Some(3));
        assert_eq!(ceiling(None, Some(5)), Some(5));
        assert_eq!(ceiling(Some(3), None), Some(3));
        assert_eq!(ceiling(None, None), None);
    }
}
