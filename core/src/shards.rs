//! Citus shard names in statements (docs/design.md#scale-out): the audit code runs its fixed statements against
//! one shard group's shards by putting each shard's name where its table's name is.

/// `sql` with each `(table, shard)` of `names` put in: `table` is replaced only where it stands
/// as a whole qualified name (not followed by another identifier character), so
/// `memory.audit_log` never rewrites `memory.audit_log_default`.
pub fn put_shard_names(sql: &str, names: &[(&str, &str)]) -> String {
    let mut out = String::with_capacity(sql.len() + 32);
    let bytes = sql.as_bytes();
    let mut i = 0;
    'scan: while i < sql.len() {
        for (table, shard) in names {
            if bytes[i..].starts_with(table.as_bytes()) {
                let after = bytes.get(i + table.len()).copied();
                let before = i.checked_sub(1).map(|j| bytes[j]);
                let ident = |c: u8| c.is_ascii_alphanumeric() || c == b'_' || c == b'$' || c >= 0x80;
                if !after.is_some_and(ident) && !before.is_some_and(|c| ident(c) || c == b'.') {
                    out.push_str(shard);
                    i += table.len();
                    continue 'scan;
                }
            }
        }
        // Copy up to the next character boundary.
        let c = sql[i..].chars().next().unwrap_or_default();
        out.push(c);
        i += c.len_utf8().max(1);
    }
    out
}

/// The shard id a relation name ends in when it has the shape Citus gives a shard's name
/// (`<table>_<shardid>`); None for any other name. (Whether it is a shard is Citus's metadata to
/// say: `events_2024` has the shape too.)
pub fn shard_id_suffix(name: &str) -> Option<i64> {
    let (table, digits) = name.rsplit_once('_')?;
    if table.is_empty() || digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::{put_shard_names, shard_id_suffix};

    #[test]
    fn shard_id_suffixes() {
        assert_eq!(shard_id_suffix("observations_102060"), Some(102060));
        assert_eq!(shard_id_suffix("audit_log_2026_11_102026"), Some(102026));
        assert_eq!(shard_id_suffix("events_2024"), Some(2024));
        assert_eq!(shard_id_suffix("observations"), None);
        assert_eq!(shard_id_suffix("audit_log_default"), None);
        assert_eq!(shard_id_suffix("notes_"), None);
        assert_eq!(shard_id_suffix("_42"), None);
        assert_eq!(shard_id_suffix("t_12a"), None);
        assert_eq!(shard_id_suffix("t_99999999999999999999"), None);
    }

    const NAMES: [(&str, &str); 4] = [
        ("memory.audit_pending", "memory.audit_pending_102010"),
        ("memory.audit_heads", "memory.audit_heads_102018"),
        ("memory.audit_seals", "memory.audit_seals_102042"),
        ("memory.audit_log", "memory.audit_log_102026"),
    ];

    #[test]
    fn whole_names_only() {
        assert_eq!(
            put_shard_names("SELECT seq FROM memory.audit_heads WHERE chain_id = $1", &NAMES),
            "SELECT seq FROM memory.audit_heads_102018 WHERE chain_id = $1"
        );
        assert_eq!(put_shard_names("DELETE FROM memory.audit_log_default", &NAMES), "DELETE FROM memory.audit_log_default");
        assert_eq!(put_shard_names("x.memory.audit_log", &NAMES), "x.memory.audit_log");
        assert_eq!(
            put_shard_names("SELECT 1 FROM memory.audit_heads UNION SELECT 2 FROM memory.audit_log\nUNION SELECT 3 FROM memory.audit_pending", &NAMES),
            "SELECT 1 FROM memory.audit_heads_102018 UNION SELECT 2 FROM memory.audit_log_102026\nUNION SELECT 3 FROM memory.audit_pending_102010"
        );
    }

    #[test]
    fn text_around_is_kept_byte_for_byte() {
        let sql = "SELECT 'é' FROM memory.audit_seals WHERE chain_id = $1 COLLATE \"C\" -- ünï";
        assert_eq!(put_shard_names(sql, &NAMES), sql.replace("memory.audit_seals", "memory.audit_seals_102042"));
        assert_eq!(put_shard_names("", &NAMES), "");
        assert_eq!(put_shard_names("memory.audit_log", &NAMES), "memory.audit_log_102026");
    }

    #[test]
    fn no_names_no_change() {
        let sql = "SELECT * FROM memory.audit_log";
        assert_eq!(put_shard_names(sql, &[]), sql);
    }
}
