//! Duplicates at write and context packing (sql/remember.sql, SPEC §17): the shell of
//! `memory_core::dedup` (the normalised text's hash, the org's setting) and
//! `memory_core::packing` (near-duplicates, MMR, the token budget).

use crate::errors::{MxError, OrRaise};
use crate::pg::spi::read_latest;
use memory_core::dedup::{check_setting, norm_hash};
use memory_core::packing::{line_for, pack, Candidate};
use pgrx::prelude::*;
use pgrx::JsonB;
use std::cell::{Cell, RefCell};
use std::collections::HashMap;

/// SHA-256 (hex) of the normalised text: NFKC, case-folded, white space collapsed and trimmed.
#[pg_extern(immutable, parallel_safe, strict, schema = "memory_internal", name = "_dedup_hash")]
fn dedup_hash(content: &str) -> String {
    norm_hash(content)
}

thread_local! {
    // org -> its dedup mode (memory.org_settings.dedup; exact without a row), and the OID of
    // memory.org_settings: its row and TRUNCATE triggers invalidate its relcache entry, which
    // drops the cache (sql/retention.sql, memory_rules_changed).
    static MODES: RefCell<HashMap<String, String>> = RefCell::new(HashMap::new());
    static SETTINGS: Cell<pg_sys::Oid> = const { Cell::new(pg_sys::InvalidOid) };
    // Whether memory.org_settings is a Citus table (None: not asked since its last change). Its
    // rows then change on the shards' placements, whose triggers invalidate nothing here: no
    // mode is kept.
    static DISTRIBUTED: Cell<Option<bool>> = const { Cell::new(None) };
}

fn relcache(relid: pg_sys::Oid) {
    if relid == pg_sys::InvalidOid || relid == SETTINGS.with(Cell::get) {
        MODES.with(|m| m.borrow_mut().clear());
        DISTRIBUTED.with(|d| d.set(None));
    }
}

pub fn init() {
    crate::pg::callbacks::on_relcache(relcache);
}

/// The org's dedup mode for memory.remember: off, exact or near (exact when the org has no
/// settings row). Read once per backend and org, as the extension owner under a snapshot taken
/// now, until memory.org_settings changes: memory.remember's hot path then runs one statement
/// fewer. Not kept where memory.org_settings is a Citus table (its changes invalidate nothing on
/// the coordinator).
#[pg_extern(stable, parallel_restricted, schema = "memory_internal", name = "_dedup_mode")]
fn dedup_mode(org: Option<&str>) -> String {
    let key = org.unwrap_or("").to_string();
    if let Some(m) = MODES.with(|m| m.borrow().get(&key).cloned()) {
        return m;
    }
    (|| {
        let fill = crate::pg::callbacks::Fill::begin();
        let _owner = crate::trust::AsOwner::enter()?;
        let oid = crate::pg::spi::read_one::<pg_sys::Oid>("SELECT pg_catalog.to_regclass('memory.org_settings')::pg_catalog.oid", &[])
            .map_err(MxError::spi_in("remember"))?;
        let oid = oid.unwrap_or(pg_sys::InvalidOid);
        SETTINGS.with(|c| c.set(oid));
        let distributed = match DISTRIBUTED.with(Cell::get) {
            Some(d) => d,
            None => {
                let citus = crate::pg::spi::read_one::<bool>("SELECT pg_catalog.to_regclass('pg_catalog.pg_dist_partition') IS NOT NULL", &[])
                    .map_err(MxError::spi_in("remember"))?
                    .unwrap_or(false);
                // (pg_dist_partition exists only where Citus is installed: asked only then.)
                let d = citus
                    && crate::pg::spi::read_one::<bool>(
                        "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_dist_partition WHERE logicalrelid OPERATOR(pg_catalog.=) $1)",
                        &[oid.into()],
                    )
                    .map_err(MxError::spi_in("remember"))?
                    .unwrap_or(false);
                DISTRIBUTED.with(|c| c.set(Some(d)));
                d
            }
        };
        let mode = Spi::connect(|client| {
            let r = read_latest(
                client,
                c"SELECT s.dedup FROM memory.org_settings s WHERE s.org_id OPERATOR(pg_catalog.=) $1",
                &[org.into()],
            )?;
            if r.len() == 0 {
                return Ok::<_, MxError>(None);
            }
            r.get::<String>(0, 1)
        })?
        .unwrap_or_else(|| "exact".to_string());
        if fill.keep() && !distributed {
            MODES.with(|m| m.borrow_mut().insert(key, mode.clone()));
        }
        Ok::<_, MxError>(mode)
    })()
    .or_raise()
}

/// 22023 unless `mode` is off, exact or near and `threshold` is in (0, 1].
#[pg_extern(immutable, parallel_safe, schema = "memory_internal", name = "_dedup_setting_check")]
fn dedup_setting_check(mode: Option<&str>, threshold: Option<f64>) -> bool {
    check_setting(mode.unwrap_or("NULL"), threshold.unwrap_or(f64::NAN))
        .map_err(|e| MxError::bad_argument(format!("memory.org_settings: {e}")).hint(
            "dedup is off, exact (the default) or near; dedup_threshold a number in (0, 1] (default 0.95).",
        ))
        .or_raise();
    true
}

fn candidate(v: &serde_json::Value) -> Option<Candidate> {
    let id = v.get("id")?.as_str()?;
    let content = v.get("content")?.as_str()?;
    let date = v.get("date").and_then(|d| d.as_str()).unwrap_or("");
    let embedding = v
        .get("embedding")
        .and_then(|e| e.as_array())
        .and_then(|a| a.iter().map(|x| x.as_f64().map(|f| f as f32)).collect::<Option<Vec<f32>>>());
    Some(Candidate {
        id: id.to_string(),
        line: line_for(id, date, content),
        text: content.to_string(),
        score: v.get("score").and_then(|s| s.as_f64()).unwrap_or(0.0),
        embedding,
    })
}

/// memory.context's block from recall's rows (a JSON array of {id, date, content, score,
/// embedding}, best first, as text: any jsonb is then a clean 22023 or a block): {text, ids,
/// tokens, omitted}. The budget and diversity are checked by the caller.
#[pg_extern(immutable, parallel_safe, strict, schema = "memory_internal", name = "_context_pack")]
fn context_pack(candidates: &str, budget: i32, diversity: f64, near: f64) -> JsonB {
    let rows: Vec<serde_json::Value> = serde_json::from_str(candidates)
        .map_err(|e| MxError::bad_argument(format!("memory_internal._context_pack: the candidates are not a JSON array ({e})")))
        .or_raise();
    let Some(cands) = rows.iter().map(candidate).collect::<Option<Vec<Candidate>>>() else {
        MxError::bad_argument("memory_internal._context_pack: a candidate lacks its id or content").raise()
    };
    let p = pack(&cands, usize::try_from(budget).unwrap_or(0), diversity.clamp(0.0, 1.0), near);
    JsonB(serde_json::json!({ "text": p.text, "ids": p.ids, "tokens": p.tokens, "omitted": p.omitted }))
}
