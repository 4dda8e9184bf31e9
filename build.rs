//! cfg aliases for PostgreSQL APIs that span several major versions, so the code names the API
//! it uses rather than a list of versions (the `pgNN` feature selects the version; pgrx refuses
//! more than one). Add an alias here when a PostgreSQL release changes an API memory_ext calls.
//!
//! | cfg | API | versions |
//! |---|---|---|
//! | `pg_override_search_path` | `PushOverrideSearchPath` / `PopOverrideSearchPath` (removed in 17) | 15, 16 |
//! | `pg_insert_index_summarizing` | `ExecInsertIndexTuples(..., onlySummarizing)` | 16+ |
//! | `pg_lock_held_or_stronger` | `LockHeldByMe(tag, mode, orstronger)` | 17+ |
//! | `pg_index_scan_instrument` | `index_beginscan(..., IndexScanInstrumentation *, ...)` | 18+ |
//! | `pg_tupdesc_compact_attrs` | `TupleDescData.compact_attrs`, attributes after them (`TupleDescAttr`) | 18+ |

const MAJORS: [u32; 4] = [15, 16, 17, 18];

fn main() {
    let aliases: [(&str, fn(u32) -> bool); 5] = [
        ("pg_override_search_path", |v| v <= 16),
        ("pg_insert_index_summarizing", |v| v >= 16),
        ("pg_lock_held_or_stronger", |v| v >= 17),
        ("pg_index_scan_instrument", |v| v >= 18),
        ("pg_tupdesc_compact_attrs", |v| v >= 18),
    ];
    for (name, _) in &aliases {
        println!("cargo::rustc-check-cfg=cfg({name})");
    }
    let major = MAJORS.iter().copied().find(|v| std::env::var_os(format!("CARGO_FEATURE_PG{v}")).is_some());
    if let Some(v) = major {
        for (name, applies) in &aliases {
            if applies(v) {
                println!("cargo::rustc-cfg={name}");
            }
        }
    }
}
