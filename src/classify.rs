//! SQL surface of classification (docs/design.md#classification): functions, the attachable trigger, org-rule cache.

use crate::errors::{code, MxError, OrRaise};
use crate::gucs;
use crate::pg::tuple;
use columns::ClassifyColumns;
use memory_core::classify::{
    apply_org_rules, classify as core_classify, derive_classification, explain, Decision, DetectorSet,
    OrgRule, SourceType, Target, Tier,
};
use memory_core::detect::{self, Detector};
use pgrx::prelude::*;
use pgrx::JsonB;
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::Rc;

mod columns;
mod lineage;

// ---------------------------------------------------------------------------------------------
// Org rules, compiled once per backend and org, dropped when memory.classification_rules changes.

thread_local! {
    static ORG_RULES: RefCell<HashMap<String, Rc<Vec<OrgRule>>>> = RefCell::new(HashMap::new());
    static LAST_ORG: RefCell<Option<(String, Rc<Vec<OrgRule>>)>> = const { RefCell::new(None) };
    // memory.classification_rules, whose changes drop the compiled rules (see relcache).
    static RULES_TABLE: Cell<pg_sys::Oid> = const { Cell::new(pg_sys::InvalidOid) };
}

/// Relcache invalidation: a change to the rules table (its row and TRUNCATE triggers, memory.rules_changed,
/// invalidates it) or a full invalidation drops every compiled rule set; a change to a governed
/// table drops its cached column mapping.
fn relcache(relid: pg_sys::Oid) {
    columns::forget_mapping(relid);
    if relid == pg_sys::InvalidOid || relid == RULES_TABLE.with(Cell::get) {
        ORG_RULES.with(|m| m.borrow_mut().clear());
        LAST_ORG.with(|l| *l.borrow_mut() = None);
    }
}

/// Learn the rules table's OID (on every cache miss: cheap, and it follows a re-created extension).
fn watch_rules_table() {
    let Ok(_owner) = crate::trust::AsOwner::enter() else { return };
    if let Ok(Some(o)) = crate::pg::spi::read_one::<pg_sys::Oid>("SELECT 'memory.classification_rules'::pg_catalog.regclass::pg_catalog.oid", &[]) {
        RULES_TABLE.with(|c| c.set(o));
    }
}

pub fn init() {
    crate::pg::callbacks::on_relcache(relcache);
}

fn rules_for(org: &str) -> Rc<Vec<OrgRule>> {
    // Rows of one statement usually share an org: check the last one before hashing.
    if let Some(r) = LAST_ORG.with(|l| l.borrow().as_ref().filter(|(o, _)| o == org).map(|(_, r)| r.clone())) {
        return r;
    }
    if let Some(r) = ORG_RULES.with(|m| m.borrow().get(org).cloned()) {
        LAST_ORG.with(|l| *l.borrow_mut() = Some((org.to_string(), r.clone())));
        return r;
    }
    let fill = crate::pg::callbacks::Fill::begin();
    let rules = load_rules(org);
    if fill.keep() {
        ORG_RULES.with(|m| m.borrow_mut().insert(org.to_string(), rules.clone()));
        LAST_ORG.with(|l| *l.borrow_mut() = Some((org.to_string(), rules.clone())));
    }
    rules
}

fn load_rules(org: &str) -> Rc<Vec<OrgRule>> {
    watch_rules_table();
    // Read as the extension owner: the rules table is closed, and an org's patterns are never
    // shown to the writer whose row they classify.
    let _owner = crate::trust::AsOwner::enter().or_raise();
    // Under a snapshot taken now, so a dropped cache is never refilled from an older snapshot
    // (spi::read_latest).
    let rows: Vec<(i64, String, String, String, Option<String>)> = Spi::connect(|client| {
        let table = crate::pg::spi::read_latest(
            client,
            c"SELECT r.id, r.tier::pg_catalog.text, r.target, r.pattern, r.source_type::pg_catalog.text
                FROM memory.classification_rules r
               WHERE r.org_id OPERATOR(pg_catalog.=) $1 AND r.enabled ORDER BY r.id",
            &[org.into()],
        )?;
        let mut out = Vec::new();
        for i in 0..table.len() {
            out.push((
                table.get::<i64>(i, 1)?.unwrap_or_default(),
                table.get::<String>(i, 2)?.unwrap_or_default(),
                table.get::<String>(i, 3)?.unwrap_or_default(),
                table.get::<String>(i, 4)?.unwrap_or_default(),
                table.get::<String>(i, 5)?,
            ));
        }
        Ok::<_, MxError>(out)
    })
    .or_raise();
    // Patterns were validated on write; a rule that still fails to compile (say, a size limit
    // lowered by an upgrade) is skipped rather than blocking every write of the org.
    let compiled = rows
        .into_iter()
        .filter_map(|(id, tier, target, pattern, st)| {
            let tier = Tier::parse(&tier)?;
            let target = Target::parse(&target)?;
            let st = st.as_deref().and_then(SourceType::parse);
            OrgRule::compile(id, tier, target, &pattern, st).ok()
        })
        .collect();
    Rc::new(compiled)
}

fn parse_source_type(s: Option<&str>) -> Result<Option<SourceType>, MxError> {
    match s {
        None => Ok(None),
        Some(s) => SourceType::parse(s).map(Some).ok_or_else(|| {
            MxError::bad_argument(format!("unknown source_type \"{s}\""))
                .hint("Use one of: decision, fact, preference, tool_result.")
        }),
    }
}

/// The full decision: built-in rules, detectors per GUC, then the org's rules (raise only).
pub fn decide(content: &[u8], paths: &[&str], st: Option<SourceType>, org: Option<&str>) -> Decision {
    decide_with(core_classify, content, paths, st, org)
}

/// `decide` with the built-in step chosen: the fast classifier, or `explain` for evidence.
fn decide_with(
    builtin: fn(&[u8], &[&str], Option<SourceType>, DetectorSet) -> Decision,
    content: &[u8],
    paths: &[&str],
    st: Option<SourceType>,
    org: Option<&str>,
) -> Decision {
    let base = builtin(content, paths, st, gucs::detector_set());
    match org {
        Some(org) => {
            let rules = rules_for(org);
            if rules.is_empty() {
                base
            } else {
                apply_org_rules(base, &rules, content, paths, st)
            }
        }
        None => base,
    }
}

/// Run `f` over the non-NULL source files (NULL elements and a NULL array mean no path).
fn with_paths<R>(files: &Option<Array<&str>>, f: impl FnOnce(&[&str]) -> R) -> R {
    let paths: Vec<&str> = files.as_ref().map(|a| a.iter().flatten().collect()).unwrap_or_default();
    f(&paths)
}

// ---------------------------------------------------------------------------------------------
// SQL functions. The public names (memory.classify, ...) are SQL wrappers in sql/classify.sql
// that cast to and from the enums; these take and return their labels.

/// TG_ARGV for memory.classify_trigger from a column mapping (memory_core::protocol);
/// memory.govern builds its CREATE TRIGGER with it. `stamps`: created, expires, purge, archive
/// and (or '') memory_type column names. `content_required`: a blank content is refused.
#[pg_extern(immutable, parallel_safe, schema = "memory_internal", name = "_classify_trigger_args")]
fn classify_trigger_argv(
    content: Option<String>,
    source_files: Option<String>,
    source_type: Option<String>,
    targets: Option<Vec<Option<String>>>,
    org: Option<String>,
    stamps: default!(Option<Vec<Option<String>>>, "NULL"),
    content_required: default!(Option<bool>, false),
) -> Option<Vec<String>> {
    use memory_core::protocol::{ClassifyArgs, StampArgs};
    let no_nulls = |v: Vec<Option<String>>, what: &str| -> Vec<String> {
        v.into_iter()
            .map(|c| c.ok_or_else(|| MxError::bad_argument(format!("{what} column names must not be NULL"))))
            .collect::<Result<Vec<_>, _>>()
            .or_raise()
    };
    let content = content?;
    let targets = no_nulls(targets?, "target");
    let stamps = stamps.map(|s| no_nulls(s, "stamp"));
    let stamps = stamps.and_then(|s| match s.as_slice() {
        [c, e, p, a, m] => Some(StampArgs {
            created: c.clone(),
            expires: e.clone(),
            purge: p.clone(),
            archive: a.clone(),
            memory_type: (!m.is_empty()).then(|| m.clone()),
        }),
        _ => None,
    });
    let content_required = content_required.unwrap_or(false);
    Some(ClassifyArgs { content, source_files, source_type, targets, org, stamps, content_required }.to_args())
}

/// 0.3.0's `memory_internal._classify_trigger_args` (six arguments, no `content_required`) by its
/// C symbol, which the scripts of earlier releases declare: `ALTER EXTENSION memory_ext UPDATE`
/// from 0.1.0 or 0.2.0 runs their `memory.govern` with this library before 0.4.0's definitions
/// replace it, and a call of six arguments must not reach the seven-argument entry (pgrx refuses
/// to unbox an argument the call does not have). No SQL of 0.4.0 declares it.
#[pg_extern(immutable, parallel_safe, sql = false)]
fn classify_trigger_args(
    content: Option<String>,
    source_files: Option<String>,
    source_type: Option<String>,
    targets: Option<Vec<Option<String>>>,
    org: Option<String>,
    stamps: Option<Vec<Option<String>>>,
) -> Option<Vec<String>> {
    classify_trigger_argv(content, source_files, source_type, targets, org, stamps, Some(false))
}

/// The message for a mapped column of the wrong type (memory_core::protocol), for memory.govern.
#[pg_extern(immutable, parallel_safe, strict, schema = "memory_internal", name = "_column_type_message")]
fn column_type_message(role: &str, column: &str, table: &str) -> String {
    memory_core::protocol::column_type_message(role, column, table)
}

/// An org's rules classify only for roles that may act for the org (42501): a match is a bit of
/// its patterns.
fn check_org(org_id: Option<&str>) {
    if let Some(org) = org_id {
        crate::trust::require_org(Some(org)).or_raise();
    }
}

#[pg_extern(stable, parallel_restricted, schema = "memory_internal", name = "_classify")]
fn classify_label(
    content: Option<&str>,
    source_files: Option<Array<&str>>,
    source_type: Option<&str>,
    org_id: Option<&str>,
) -> Option<&'static str> {
    let st = parse_source_type(source_type).or_raise();
    check_org(org_id);
    let content = content?;
    Some(with_paths(&source_files, |paths| decide(content.as_bytes(), paths, st, org_id)).tier.as_str())
}

#[pg_extern(stable, parallel_restricted, schema = "memory_internal", name = "_classify_explain")]
fn classify_explain(
    content: Option<&str>,
    source_files: Option<Array<&str>>,
    source_type: Option<&str>,
    org_id: Option<&str>,
) -> Option<JsonB> {
    let st = parse_source_type(source_type).or_raise();
    check_org(org_id);
    let content = content?;
    let (d, n_paths) =
        with_paths(&source_files, |paths| (decide_with(explain, content.as_bytes(), paths, st, org_id), paths.len()));
    Some(JsonB(serde_json::json!({
        "tier": d.tier.as_str(),
        "rule": d.rule.name(),
        "risk_band": d.tier.risk_band(),
        "evidence": d.evidence,
        "detectors": d.detectors.names(),
        "detector_set": gucs::detector_setting(),
        "org_id": org_id,
        "paths_considered": n_paths,
    })))
}

/// `memory.detect`: the names of the detectors (all, or those named) that match `content`,
/// folded first. Names only: a matched value never leaves the function.
#[pg_extern(immutable, parallel_safe, schema = "memory_internal", name = "_detect")]
fn detect_names(content: Option<&str>, detectors: Option<Array<&str>>) -> Option<Vec<&'static str>> {
    let set = match detectors {
        None => DetectorSet::all(),
        Some(names) => {
            let mut set = DetectorSet::NONE;
            for name in names.iter() {
                let name = name
                    .ok_or_else(|| MxError::bad_argument("detector names must not be NULL"))
                    .or_raise();
                let d = Detector::parse(name)
                    .ok_or_else(|| {
                        MxError::bad_argument(format!("unknown detector \"{name}\""))
                            .hint(format!("Detectors: {}.", DetectorSet::all().names().join(", ")))
                    })
                    .or_raise();
                set.insert(d);
            }
            set
        }
    };
    Some(detect::find(content?, set).names())
}

/// `memory.detectors()`: every detector with its tier, what validates it and its context words.
#[pg_extern(immutable, parallel_safe, schema = "memory_internal", name = "_detectors")]
fn detectors_table() -> TableIterator<
    'static,
    (name!(name, &'static str), name!(tier, &'static str), name!(validation, &'static str), name!(context_words, Vec<&'static str>)),
> {
    TableIterator::new(
        Detector::ALL.into_iter().map(|d| (d.name(), d.tier().as_str(), d.validation(), d.context_words().to_vec())),
    )
}

/// The sensitive-input gate of user contexts (MX007, docs/design.md#consent-and-drift): the names of the detectors that
/// match the values of one context's fields together (memory_core::context::detect_fields: each
/// value alone, all of them concatenated in the order given, every ordered pair, and the decoded
/// text of base64 and hex tokens of 16+ characters), in memory.detectors() order. Called with one
/// value per field to name the field, then with all of them. NULL elements are skipped; names
/// only, never a matched value.
#[pg_extern(immutable, parallel_safe, strict, schema = "memory_internal", name = "_detect_fields")]
fn detect_fields(values: Array<&str>) -> Vec<&'static str> {
    let values: Vec<&str> = values.iter().flatten().collect();
    memory_core::context::detect_fields(&values, DetectorSet::all()).names()
}

/// One slice value as memory.load_slices renders it in the `<user_context>` block
/// (memory_core::context::render_value): `&`, `<`, `>` escaped, their look-alikes folded to
/// `&lt;`/`&gt;`, line separators and other control characters as a space.
#[pg_extern(immutable, parallel_safe, strict, schema = "memory_internal", name = "_render_context_value")]
fn render_context_value(value: &str) -> String {
    memory_core::context::render_value(value)
}

#[pg_extern(immutable, parallel_safe, strict, schema = "memory_internal", name = "_risk_band")]
fn risk_band(tier: &str) -> &'static str {
    Tier::parse(tier)
        .map(Tier::risk_band)
        .ok_or_else(|| MxError::bad_argument(format!("unknown classification \"{tier}\"")))
        .or_raise()
}

/// The tier of `metadata->>'classification'` (memory.derive_classification passes the text, so
/// no JSON of any depth or size is parsed here).
#[pg_extern(immutable, parallel_safe, schema = "memory_internal", name = "_derive_classification")]
fn derive_label(label: Option<&str>) -> &'static str {
    derive_classification(label).as_str()
}

/// Whether a restore is loading rows (memory.restore_mode), for the PL/pgSQL triggers. Calling into
/// the library defines the setting first, so a value a session set as a placeholder before the
/// library was loaded (which would not need superuser) is never what they read.
#[pg_extern(stable, parallel_safe, schema = "memory_internal", name = "_restore_mode")]
fn restore_mode() -> bool {
    crate::gucs::restore_mode()
}

/// Whether memory.restore_mode is on, without refusing a pg_restore session that lacks it (for the
/// DDL guard: a restore's DDL is not a write of rows).
#[pg_extern(stable, parallel_safe, schema = "memory_internal", name = "_restore_mode_on")]
fn restore_mode_on() -> bool {
    crate::gucs::RESTORE_MODE.get()
}

/// Raises 22023 when an org rule's pattern does not compile; used by the rules table trigger.
#[pg_extern(immutable, parallel_safe, strict, schema = "memory_internal", name = "_check_rule_pattern")]
fn check_rule_pattern(pattern: &str) -> bool {
    OrgRule::compile(0, Tier::Restricted, Target::Content, pattern, None)
        .map_err(|e| MxError::bad_argument(e.to_string()).hint("Org rules use Rust regex syntax; add (?i) for case-insensitive matching."))
        .or_raise();
    true
}

/// Row trigger (and TRUNCATE statement trigger) on memory_ext's rule, policy, grant and key
/// tables: tell every backend (at commit) and this one (at the next command) to drop what it
/// cached from that table.
#[pg_trigger(sql = r#"
CREATE FUNCTION "rules_changed"() RETURNS TRIGGER LANGUAGE c AS 'MODULE_PATHNAME', 'memory_rules_changed_checked';
"#)]
fn rules_changed<'a>(
    trigger: &'a PgTrigger<'a>,
) -> Result<Option<PgHeapTuple<'a, AllocatedByPostgres>>, std::convert::Infallible> {
    let relid = trigger.relid().unwrap_or(pg_sys::InvalidOid);
    crate::pg::callbacks::invalidate_relation(relid);
    // On Citus the trigger fires on a shard or reference-table copy (`<table>_<shardid>`), while
    // the caches are keyed by the table itself: invalidate that too, on this node. (It fires per
    // row: only a name of that shape is looked up.)
    if let Some(logical) = crate::pg::citus::logical_table(relid) {
        crate::pg::callbacks::invalidate_relation(logical);
    }
    Ok(None)
}

// ---------------------------------------------------------------------------------------------
// The attachable trigger.

/// `memory.classify_trigger()`: BEFORE INSERT OR UPDATE FOR EACH ROW.
/// TG_ARGV: content column, source-files column (or ''), source-type column (or ''), target
/// column, then optional `org=<column>` and further `target=<column>` arguments.
#[pg_trigger(sql = r#"
CREATE FUNCTION "classify_trigger"() RETURNS TRIGGER LANGUAGE c AS 'MODULE_PATHNAME', 'memory_classify_trigger_checked';
"#)]
fn classify_trigger<'a>(
    trigger: &'a PgTrigger<'a>,
) -> Result<Option<PgHeapTuple<'a, AllocatedByPostgres>>, std::convert::Infallible> {
    Ok(Some(classify_row(trigger).or_raise()))
}

fn classify_row(trigger: &PgTrigger) -> Result<PgHeapTuple<'static, AllocatedByPostgres>, MxError> {
    let row = tuple::RowTrigger::new(trigger.trigger_data(), "memory.classify_trigger")?;
    // A restore (memory.restore_mode, superuser-only) loads rows as they were: tier and stamps
    // included, whatever the policies loaded so far say.
    if crate::gucs::restore_mode() && !row.is_update() {
        return Ok(row.unchanged());
    }
    let mut cols = ClassifyColumns::acquire(&row)?;
    cols.load(&row);
    // A memory with nothing in it is refused where content is required (nothing is written).
    if cols.blank_content_written(row.is_update()) {
        cols.release();
        return Err(MxError::bad_argument(format!("the content of a row of {} is empty or blank", row.relname()))
            .hint("A memory needs content: write some text (white space alone is refused)."));
    }
    // A row's org is one the writing role may act for (42501, with the hint naming
    // memory.grant_org), before row-level security or the audit trigger would refuse it with
    // less to say: owning a table never lets a role write another tenant's rows.
    if let Some(org) = cols.org().filter(|o| !o.is_empty()) {
        crate::trust::require_org(Some(org))?;
    }
    // Lineage (an INSERT into memory.observations with derived_from): the sources checked, the
    // trust floor taken before classification, the tier floor and the retention ceiling after.
    let floors = if row.is_update() { None } else { cols.lineage_floors()? };
    let mut tier = decide_row(&row, &mut cols)?;
    if let Some(t) = floors.as_ref().and_then(|f| f.tier) {
        tier = tier.max(t);
    }
    // Retention stamps follow the tier: set on insert, re-set when the tier changes (reclassify
    // included); a policy change alone never backdates a row.
    if cols.has_stamps() {
        // An UPDATE never lengthens retention: a later created_at is refused, and stamps the
        // statement (or a trigger of the owner's) moved later are computed again.
        let (touched, later) = if row.is_update() { cols.stamps_lengthened() } else { (false, false) };
        if later {
            return Err(MxError::bad_argument("created_at may not move later on UPDATE (it would lengthen retention)")
                .hint("Leave created_at as it is, or move it earlier; memory_ext computes expires_at, purge_after and archive_at."));
        }
        let restamp = !row.is_update() || touched || cols.tiers(true)?.map(|r| r.1) != Some(tier);
        if restamp {
            cols.stamp(tier)?;
        }
    }
    if let Some(f) = &floors {
        cols.cap_retention(f);
    }
    let out = cols.store(&row, tier);
    cols.release();
    Ok(out)
}

/// The tier to store. INSERT: the computed tier, with the writer's as a floor. UPDATE: no target
/// may be lowered (MX004) unless memory.reclassify opened the gate; changed inputs re-classify,
/// never below the old tier.
fn decide_row(row: &tuple::RowTrigger, cols: &mut ClassifyColumns) -> Result<Tier, MxError> {
    let written = cols.tiers(false)?;
    if !row.is_update() {
        return Ok(written.map(|w| w.1).max(Some(classify_row_inputs(cols)?.tier)).unwrap_or(Tier::Internal));
    }
    let old_tier = cols.tiers(true)?.map(|r| r.1);
    let downgrade_ok = crate::gates::downgrade_allowed_on() == row.relid();
    if let (Some(o), Some((lowest, _))) = (old_tier, written) {
        if lowest < o && !downgrade_ok {
            let rel = row.relname();
            let hint = if rel == "memory.observations" {
                "Use memory.reclassify(id, tier, reason) to lower a tier; it is audited."
            } else {
                "A governed table's tier is never lowered by UPDATE (memory.reclassify does it for memory.observations)."
            };
            return Err(MxError::new(
                code::DOWNGRADE,
                format!("classification of a row of {rel} cannot be lowered from {} to {}", o.as_str(), lowest.as_str()),
            )
            .hint(hint));
        }
    }
    let written = written.map(|w| w.1);
    if downgrade_ok && written.is_some() {
        return Ok(written.unwrap_or(Tier::Internal));
    }
    // A row that holds no tier yet (written before the table was governed) is classified now.
    let computed = if cols.inputs_changed() || old_tier.is_none() { Some(classify_row_inputs(cols)?.tier) } else { None };
    Ok(written.max(computed).max(old_tier).unwrap_or(Tier::Internal))
}

fn classify_row_inputs(cols: &mut ClassifyColumns) -> Result<Decision, MxError> {
    let st = cols.source_type()?;
    // An org's rules classify a row only for a writer that may act for the org: otherwise every
    // write would be an oracle on another tenant's patterns (docs/design.md#trust-boundary). Orgs without rules cost
    // nothing here; the answer is cached per transaction.
    if let Some(org) = cols.org() {
        if !rules_for(org).is_empty() {
            crate::trust::require_org(Some(org))?;
        }
    }
    Ok(cols.with_source_files(|paths| decide(cols.content(), paths, st, cols.org())))
}

// The SQL entry point: `39P01` when called other than as a trigger (see src/pg/trigger.rs).
crate::checked_trigger_entry!(memory_rules_changed_checked, pg_finfo_memory_rules_changed_checked, "memory.rules_changed()", rules_changed_wrapper);

// The SQL entry point: `39P01` when called other than as a trigger (see src/pg/trigger.rs).
crate::checked_trigger_entry!(memory_classify_trigger_checked, pg_finfo_memory_classify_trigger_checked, "memory.classify_trigger()", classify_trigger_wrapper);
