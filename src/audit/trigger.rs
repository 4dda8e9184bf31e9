//! The statement-level trigger of governed tables: one event per affected row, chained per
//! tenant through the shared `Appender`.

use super::append::{default_actor, Appender, EventRef, CHUNK};
use crate::errors::{code, MxError, OrRaise};
use memory_core::audit::{FlatPayload, Payload};
use memory_core::events;
use memory_core::protocol::AuditArgs;
use pgrx::prelude::*;
use crate::pg::transition::{Columns, Rows, Which};
use pgrx::spi::quote_identifier;
use std::cell::RefCell;
use std::collections::HashMap;

thread_local! {
    // Kept plans of the statements that read a table's transition tables, by (table, text): an
    // agent writes one row per transaction, and parsing and planning the read every time would
    // cost more than the rest of the append. Dropped when the table's relcache entry is
    // invalidated (ALTER TABLE, govern), so a plan never outlives the columns it reads.
    static TRIGGER_PLANS: RefCell<HashMap<(pg_sys::Oid, String), pgrx::spi::OwnedPreparedStatement>> = RefCell::new(HashMap::new());
    // Counts relcache invalidations seen by forget_plans: a plan taken out of TRIGGER_PLANS is put
    // back only if none came in while it was out.
    static PLANS_FORGOTTEN: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
    // What a trigger's firing for one kind of statement works out from its arguments and its
    // table (the column mapping, checked against the table's column types; the event type; the
    // read of the transition tables), by (trigger, operation): the same for every statement
    // until the table changes, and dropped with the plans.
    static STATEMENTS: RefCell<HashMap<(pg_sys::Oid, u32), std::rc::Rc<Statement>>> = RefCell::new(HashMap::new());
}

struct Statement {
    relid: pg_sys::Oid,
    map: AuditMap,
    event_type: &'static str,
    query: String,
    /// INSERT and DELETE: the transition table and its mapped columns in `query`'s order, read
    /// directly when a statement's rows fit in one chunk (UPDATE's join is left to the query).
    direct: Option<(Which, Columns)>,
}

/// A batch of rows in `Statement::query`'s column order, wherever it was read from.
trait Batch {
    fn len(&self) -> usize;
    fn text(&self, i: usize, c: usize) -> Option<&str>;
    fn bytes(&self, i: usize, c: usize) -> Option<&[u8]>;
}

impl Batch for crate::pg::spi::Fetched {
    fn len(&self) -> usize {
        crate::pg::spi::Fetched::len(self)
    }
    fn text(&self, i: usize, c: usize) -> Option<&str> {
        crate::pg::spi::Fetched::text(self, i, c)
    }
    fn bytes(&self, i: usize, c: usize) -> Option<&[u8]> {
        crate::pg::spi::Fetched::bytes(self, i, c)
    }
}

impl Batch for Rows {
    fn len(&self) -> usize {
        Rows::len(self)
    }
    fn text(&self, i: usize, c: usize) -> Option<&str> {
        Rows::text(self, i, c)
    }
    fn bytes(&self, i: usize, c: usize) -> Option<&[u8]> {
        Rows::bytes(self, i, c)
    }
}

/// Relcache callback: forget the plans of `relid` (InvalidOid: of every table).
pub(super) fn forget_plans(relid: pg_sys::Oid) {
    PLANS_FORGOTTEN.with(|g| g.set(g.get().wrapping_add(1)));
    STATEMENTS.with(|m| {
        let mut m = m.borrow_mut();
        if relid == pg_sys::InvalidOid {
            m.clear();
        } else {
            m.retain(|_, st| st.relid != relid);
        }
    });
    TRIGGER_PLANS.with(|p| {
        let mut p = p.borrow_mut();
        if relid == pg_sys::InvalidOid {
            p.clear();
        } else if p.keys().any(|k| k.0 == relid) {
            p.retain(|k, _| k.0 != relid);
        }
    });
}

/// Column mapping of `memory.audit_trigger` (TG_ARGV, see memory_core::protocol), and the table
/// the trigger fired on.
struct AuditMap {
    table: String,
    cols: AuditArgs,
}

impl AuditMap {
    fn parse(args: &[String], table: String) -> Result<Self, MxError> {
        let cols = AuditArgs::parse(args).map_err(|e| MxError::new(code::TRIGGER_PROTOCOL, e.to_string()))?;
        Ok(AuditMap { table, cols })
    }

    fn col(&self, alias: &str, c: &Option<String>) -> String {
        match c {
            Some(c) => format!("{alias}.{}::text", quote_identifier(c)),
            None => "NULL::text".into(),
        }
    }

    fn tier_expr(&self, alias: &str) -> String {
        match &self.cols.tier {
            Some(c) if self.cols.tier_json => format!("({alias}.{} OPERATOR(pg_catalog.->>) 'classification')", quote_identifier(c)),
            Some(c) => format!("{alias}.{}::text", quote_identifier(c)),
            None => "NULL::text".into(),
        }
    }

    /// id, content, org, project, workspace, user, tier of alias `t`.
    fn select_list(&self, alias: &str) -> String {
        [
            self.col(alias, &self.cols.id),
            self.col(alias, &self.cols.content),
            self.col(alias, &self.cols.org),
            self.col(alias, &self.cols.project),
            self.col(alias, &self.cols.workspace),
            self.col(alias, &self.cols.user),
            self.tier_expr(alias),
        ]
        .join(", ")
    }
}

#[pg_trigger(sql = r#"
CREATE FUNCTION "audit_trigger"() RETURNS TRIGGER LANGUAGE c AS 'MODULE_PATHNAME', 'memory_audit_trigger_checked';
"#)]
fn audit_trigger<'a>(
    trigger: &'a PgTrigger<'a>,
) -> Result<Option<PgHeapTuple<'a, AllocatedByPostgres>>, std::convert::Infallible> {
    audit_statement(trigger).or_raise();
    Ok(None)
}

/// Types a mapped column may have: the trigger reads them with built-in output functions only,
/// so no code of the table's owner (a cast, an operator, an output function of their own type)
/// runs while it appends.
fn check_column_types(td: &pg_sys::TriggerData, map: &AuditMap) -> Result<(), MxError> {
    const PLAIN: &[pg_sys::Oid] = &[
        pg_sys::TEXTOID, pg_sys::VARCHAROID, pg_sys::BPCHAROID, pg_sys::NAMEOID, pg_sys::UUIDOID,
        pg_sys::INT2OID, pg_sys::INT4OID, pg_sys::INT8OID,
    ];
    let type_of = |name: &str| crate::pg::tuple::column_type(td, name);
    let classification = crate::trust::classification_type();
    let checks: [(&str, &Option<String>, &[pg_sys::Oid]); 6] = [
        ("id", &map.cols.id, PLAIN),
        ("content", &map.cols.content, &[pg_sys::TEXTOID, pg_sys::VARCHAROID, pg_sys::BPCHAROID]),
        ("org", &map.cols.org, PLAIN),
        ("project", &map.cols.project, PLAIN),
        ("workspace", &map.cols.workspace, PLAIN),
        ("user", &map.cols.user, PLAIN),
    ];
    for (role, col, allowed) in checks {
        if let Some(c) = col {
            match type_of(c) {
                Some(t) if allowed.contains(&t) => {}
                Some(_) => {
                    return Err(MxError::new(code::TRIGGER_PROTOCOL, format!("the {role} column \"{c}\" has a type memory.audit_trigger does not read"))
                        .hint("Audited columns are text, varchar, char, name, uuid or integers; attach the trigger with memory.govern."))
                }
                None => return Err(MxError::new(code::TRIGGER_PROTOCOL, format!("the {role} column \"{c}\" does not exist"))),
            }
        }
    }
    if let Some(c) = &map.cols.tier {
        let ok = match type_of(c) {
            Some(t) if map.cols.tier_json => t == pg_sys::JSONBOID,
            Some(t) => t == pg_sys::TEXTOID || t == pg_sys::VARCHAROID || (t != pg_sys::InvalidOid && t == classification),
            None => false,
        };
        if !ok {
            return Err(MxError::new(code::TRIGGER_PROTOCOL, format!("the tier column \"{c}\" is missing or not memory.classification, text or jsonb")));
        }
    }
    Ok(())
}

/// What a firing of `trigger` for `op` works out before reading any row (see STATEMENTS).
fn statement(trigger: &PgTrigger, td: &pg_sys::TriggerData, op: u32) -> Result<Statement, MxError> {
    // The table named in events is the one the trigger fired on.
    let map = AuditMap::parse(&trigger.extra_args().unwrap_or_default(), crate::pg::tuple::trigger_relation_name(td))?;
    check_column_types(td, &map)?;
    let new_tt = trigger.new_transition_table_name().ok().flatten().map(quote_identifier);
    let old_tt = trigger.old_transition_table_name().ok().flatten().map(quote_identifier);
    let (event_type, query): (&'static str, String) = match (op, new_tt, old_tt) {
        (pg_sys::TRIGGER_EVENT_INSERT, Some(n), _) => (events::STORE, format!("SELECT {} FROM {n} t", map.select_list("t"))),
        (pg_sys::TRIGGER_EVENT_DELETE, _, Some(o)) => (events::DELETE, format!("SELECT {} FROM {o} t", map.select_list("t"))),
        (pg_sys::TRIGGER_EVENT_UPDATE, Some(n), Some(o)) if map.cols.id.is_some() && map.cols.tier.is_some() => {
            let id = quote_identifier(map.cols.id.as_deref().unwrap_or_default());
            let (sel, tier_o, tier_t) = (map.select_list("t"), map.tier_expr("o"), map.tier_expr("t"));
            // A changed tier is a memory.reclassify event; a changed content a memory.update event
            // with both contents' hashes (column 8: 't' when the content changed; 9: the old
            // content) and, for memory.observations, the revision it kept (10: memory.revisions'
            // rev, written by the row trigger memory_revisions before this statement trigger; on
            // a Citus shard, whose statements may not read another distributed table, none).
            let (content_o, content_t) = (map.col("o", &map.cols.content), map.col("t", &map.cols.content));
            let shard = crate::pg::citus::logical_table(crate::pg::tuple::trigger_relid(td)).is_some();
            let rev = if map.table == "memory.observations" && map.cols.org.is_some() && !shard {
                format!(
                    "(SELECT pg_catalog.max(r.rev)::text FROM memory.revisions r WHERE r.org_id OPERATOR(pg_catalog.=) t.org_id AND r.memory_id OPERATOR(pg_catalog.=) t.{id})"
                )
            } else {
                "NULL::text".into()
            };
            let changed = format!("CASE WHEN {content_o} IS DISTINCT FROM {content_t} THEN 't' END, {content_o}, {rev}");
            let differs = format!("({tier_o} IS DISTINCT FROM {tier_t} OR {content_o} IS DISTINCT FROM {content_t})");
            let query = match &map.cols.org {
                None => format!(
                    "SELECT {sel}, {tier_o}, {changed} FROM {n} t JOIN {o} o ON o.{id} OPERATOR(pg_catalog.=) t.{id} WHERE {differs}"
                ),
                // A table keyed by (org, id) may update two orgs' rows sharing an id in one
                // statement: old and new rows are paired by id within their org first. A row
                // left over (moved to another org, or its id changed) is paired with the one
                // leftover old row of its id when each side has exactly one, and otherwise
                // recorded with no previous tier: never dropped, never paired across orgs by
                // guess.
                Some(_) => {
                    let (org_o, org_t) = (map.col("o", &map.cols.org), map.col("t", &map.cols.org));
                    format!(
                        "WITH lo AS (SELECT o.* FROM {o} o WHERE NOT EXISTS (SELECT 1 FROM {n} t WHERE t.{id} OPERATOR(pg_catalog.=) o.{id} AND {org_t} IS NOT DISTINCT FROM {org_o})),
                              ln AS (SELECT t.* FROM {n} t WHERE NOT EXISTS (SELECT 1 FROM {o} o WHERE o.{id} OPERATOR(pg_catalog.=) t.{id} AND {org_o} IS NOT DISTINCT FROM {org_t})),
                              lone AS (SELECT x.{id} FROM lo x GROUP BY x.{id} HAVING pg_catalog.count(*) OPERATOR(pg_catalog.=) 1
                                       INTERSECT SELECT y.{id} FROM ln y GROUP BY y.{id} HAVING pg_catalog.count(*) OPERATOR(pg_catalog.=) 1)
                         SELECT {sel}, {tier_o}, {changed} FROM {n} t JOIN {o} o ON o.{id} OPERATOR(pg_catalog.=) t.{id} AND {org_o} IS NOT DISTINCT FROM {org_t}
                          WHERE {differs}
                         UNION ALL
                         SELECT {sel}, {tier_o}, {changed} FROM ln t LEFT JOIN lo o ON o.{id} OPERATOR(pg_catalog.=) t.{id} AND t.{id} OPERATOR(pg_catalog.=) ANY (SELECT l.{id} FROM lone l)
                          WHERE {differs}"
                    )
                }
            };
            (events::RECLASSIFY, query)
        }
        // Attached by hand without the transition table its event needs, or AFTER UPDATE without
        // an id and a tier column: it would audit nothing, so it refuses to run.
        _ => {
            return Err(MxError::new(
                code::TRIGGER_PROTOCOL,
                "memory.audit_trigger needs a NEW TABLE for INSERT, an OLD TABLE for DELETE, and both plus id= and tier= for UPDATE",
            )
            .hint("Attach it with memory.govern(table, '{\"audit\": true}')."))
        }
    };
    let direct = match op {
        pg_sys::TRIGGER_EVENT_INSERT | pg_sys::TRIGGER_EVENT_DELETE => {
            let c = &map.cols;
            let names = [&c.id, &c.content, &c.org, &c.project, &c.workspace, &c.user, &c.tier].map(|n| n.as_deref());
            let which = if op == pg_sys::TRIGGER_EVENT_INSERT { Which::New } else { Which::Old };
            Some((which, Columns::plan(td, &names, c.tier_json.then_some(6), crate::trust::classification_type())?))
        }
        _ => None,
    };
    Ok(Statement { relid: crate::pg::tuple::trigger_relid(td), map, event_type, query, direct })
}

fn audit_statement(trigger: &PgTrigger) -> Result<(), MxError> {
    let td = trigger.trigger_data();
    // Rows loaded by a restore (memory.restore_mode, superuser-only) are not new writes: the log
    // comes back with them.
    if crate::gucs::restore_mode() && td.tg_event & pg_sys::TRIGGER_EVENT_OPMASK == pg_sys::TRIGGER_EVENT_INSERT {
        return Ok(());
    }
    let ev = td.tg_event;
    if ev & pg_sys::TRIGGER_EVENT_ROW != 0 || ev & pg_sys::TRIGGER_EVENT_TIMINGMASK != pg_sys::TRIGGER_EVENT_AFTER {
        return Err(MxError::new(code::TRIGGER_PROTOCOL, "memory.audit_trigger must be fired AFTER ... FOR EACH STATEMENT with transition tables")
            .hint("Attach it with memory.govern(table, '{\"audit\": true}')."));
    }
    let op = ev & pg_sys::TRIGGER_EVENT_OPMASK;
    let key = (crate::pg::tuple::trigger_oid(td), op);
    let st = match STATEMENTS.with(|m| m.borrow().get(&key).cloned()) {
        Some(st) => st,
        None => {
            let seen = PLANS_FORGOTTEN.with(|g| g.get());
            let st = std::rc::Rc::new(statement(trigger, td, op)?);
            if PLANS_FORGOTTEN.with(|g| g.get()) == seen {
                STATEMENTS.with(|m| m.borrow_mut().insert(key, st.clone()));
            }
            st
        }
    };
    let (map, event_type, query) = (&st.map, st.event_type, &st.query);
    let reason = crate::gates::downgrade_reason();

    Spi::connect(|client| {
        // Every row's org must be one the writing role may act for (Appender::lock checks it).
        let mut ap = Appender::new(client)?;
        if map.cols.org.is_none() {
            ap.vouch_platform_chain();
        }
        // memory-mcp's remember inserts one row: a statement of more rows is not its call, whatever
        // the setting says (the setting is still checked, so a malformed one fails the INSERT).
        // (The statement's row count, read once: it also chooses the direct read below.)
        let direct_rows = st.direct.as_ref().and_then(|(which, _)| crate::pg::transition::count(td, *which));
        let mcp = mcp_call(map.table.as_str(), event_type)?.filter(|_| direct_rows == Some(1));
        let mut rows = RowEvents {
            actor: default_actor(&ap),
            mcp: mcp.as_ref().map(|(t, c)| (t.as_str(), c.as_str())),
            table: map.table.as_str(),
            event_type,
            reason: reason.as_deref(),
            pseudonyms: HashMap::new(),
            sha: [0u8; 64],
            sha_prev: [0u8; 64],
        };
        // A statement whose rows fit in one chunk (an agent's single-row INSERT) is read straight
        // from its transition table; the same columns as the query's, as the query casts them.
        if let Some((which, columns)) = &st.direct {
            if direct_rows.is_some_and(|n| n < CHUNK) {
                let batch = Rows::read(td, *which, columns)?;
                if batch.len() == 0 {
                    return Ok(());
                }
                ap.lock(client, (0..batch.len()).map(|i| batch.text(i, 2).unwrap_or("")).collect::<Vec<_>>())?;
                ap.reserve(batch.len());
                rows.push(&mut ap, client, &batch)?;
                return ap.finish(client);
            }
        }
        // The query reads the transition tables by name: registered with this connection (the
        // direct read above needs no registration).
        crate::pg::spi::register_trigger_data(td);
        let cols = if event_type == events::RECLASSIFY { 11 } else { 7 };
        // The plan is prepared with this call's transition tables registered (SPI resolves them
        // by name, the same names on every call) and kept for the next statements.
        let key = (crate::pg::tuple::trigger_relid(td), query.clone());
        if !TRIGGER_PLANS.with(|p| p.borrow().contains_key(&key)) {
            let plan = client.prepare(query.as_str(), &[]).map_err(MxError::spi_in("audit"))?.keep();
            TRIGGER_PLANS.with(|p| p.borrow_mut().insert(key.clone(), plan));
        }
        // The plan is taken out while the cursor opens: opening it can accept invalidation
        // messages, whose relcache callback (forget_plans) needs the map, and a borrow held across
        // it failed with "RefCell already borrowed" under concurrent DDL.
        let plan = TRIGGER_PLANS.with(|p| p.borrow_mut().remove(&key)).expect("prepared above");
        let seen = PLANS_FORGOTTEN.with(|g| g.get());
        let mut cursor = client.open_cursor(&plan, &[]);
        if PLANS_FORGOTTEN.with(|g| g.get()) == seen {
            TRIGGER_PLANS.with(|p| p.borrow_mut().insert(key.clone(), plan));
        }
        let mut batch = crate::pg::spi::Fetched::default();
        if !batch.fetch(&mut cursor, CHUNK, cols)? {
            return Ok(());
        }
        // Lock every chain the statement touches before chaining anything, in order. A statement
        // that fits in one chunk names its chains itself; a bigger one is scanned for them.
        if batch.len() < CHUNK {
            let chains: Vec<&str> = (0..batch.len()).map(|i| batch.text(i, 2).unwrap_or("")).collect();
            ap.lock(client, chains)?;
        } else {
            let orgs_q = format!(
                "SELECT DISTINCT coalesce(org, '') FROM ({query}) q(id, content, org, project, workspace, usr, tier{})",
                if event_type == events::RECLASSIFY { ", old_tier, changed, old_content, rev" } else { "" }
            );
            let mut chains = Vec::new();
            for row in client.select(orgs_q.as_str(), None, &[]).map_err(MxError::spi_in("audit"))? {
                chains.push(row.get::<String>(1).map_err(MxError::spi_in("audit"))?.unwrap_or_default());
            }
            ap.lock(client, chains.iter().map(String::as_str))?;
        }
        ap.reserve(batch.len());
        loop {
            rows.push(&mut ap, client, &batch)?;
            if !batch.fetch(&mut cursor, CHUNK, cols)? {
                break;
            }
        }
        ap.finish(client)
    })
}

/// What turns a statement's rows into events: the same for every batch of the statement.
struct RowEvents<'s> {
    actor: String,
    /// memory-mcp's call (tool, client) that this statement's `memory.store` events record.
    mcp: Option<(&'s str, &'s str)>,
    table: &'s str,
    event_type: &'static str,
    reason: Option<&'s str>,
    /// Pseudonyms of the statement's users: each is an HMAC, and a statement usually writes for
    /// few users.
    pseudonyms: HashMap<String, String>,
    sha: [u8; 64],
    sha_prev: [u8; 64],
}

impl RowEvents<'_> {
    /// Append one event per row of `batch` (columns as in `Statement::query`).
    fn push(&mut self, ap: &mut Appender, client: &pgrx::spi::SpiClient, batch: &impl Batch) -> Result<(), MxError> {
        let (table, event_type) = (self.table, self.event_type);
        for i in 0..batch.len() {
            let id = batch.text(i, 0);
            let org = batch.text(i, 2);
            let user = batch.text(i, 5);
            let tier = batch.text(i, 6);
            let fresh;
            let user_p: Option<&str> = match user {
                None => None,
                // One row (an agent's statement): the backend's cache answers, no map of the
                // statement's own.
                Some(u) if batch.len() == 1 => {
                    fresh = ap.pseudonym(u);
                    Some(fresh.as_str())
                }
                Some(u) => {
                    if !self.pseudonyms.contains_key(u) && self.pseudonyms.len() < 100_000 {
                        self.pseudonyms.insert(u.to_string(), ap.pseudonym(u));
                    }
                    match self.pseudonyms.get(u) {
                        Some(p) => Some(p.as_str()),
                        None => {
                            fresh = ap.pseudonym(u);
                            Some(fresh.as_str())
                        }
                    }
                }
            };
            // Members in RFC 8785 key order (FlatPayload checks it).
            let (project, workspace) = (batch.text(i, 3), batch.text(i, 4));
            match event_type {
                t if t == events::STORE => {
                    let content = batch.bytes(i, 1).map(|c| memory_core::audit::sha256_hex_in(c, &mut self.sha));
                    if let Some((tool, caller)) = self.mcp {
                        let store = [("classification", tier), ("content_sha256", content), ("id", id), ("mcp_client", Some(caller)),
                                     ("mcp_tool", Some(tool)), ("table", Some(table)), ("userId", user_p)];
                        append_event(ap, client, &self.actor, events::STORE, &store, org, project, workspace)?;
                    } else {
                        let store = [("classification", tier), ("content_sha256", content), ("id", id), ("table", Some(table)), ("userId", user_p)];
                        append_event(ap, client, &self.actor, events::STORE, &store, org, project, workspace)?;
                    }
                }
                t if t == events::DELETE => {
                    let delete = [("classification", tier), ("id", id), ("table", Some(table)), ("userId", user_p)];
                    append_event(ap, client, &self.actor, events::DELETE, &delete, org, project, workspace)?;
                }
                _ => {
                    // An UPDATE: both contents' hashes when the content changed (a correction) and
                    // the revision kept, then the change of tier when there is one.
                    if batch.text(i, 8).is_some() {
                        let content = batch.bytes(i, 1).map(|c| memory_core::audit::sha256_hex_in(c, &mut self.sha));
                        let previous = batch.bytes(i, 9).map(|c| memory_core::audit::sha256_hex_in(c, &mut self.sha_prev));
                        let update = [("classification", tier), ("content_sha256", content), ("id", id), ("previous_content_sha256", previous),
                                      ("rev", batch.text(i, 10)), ("table", Some(table)), ("userId", user_p)];
                        append_event(ap, client, &self.actor, events::UPDATE, &update, org, project, workspace)?;
                    }
                    let from = batch.text(i, 7);
                    if from != tier {
                        let reclassify = [("from", from), ("id", id), ("reason", self.reason), ("table", Some(table)), ("to", tier), ("userId", user_p)];
                        append_event(ap, client, &self.actor, events::RECLASSIFY, &reclassify, org, project, workspace)?;
                    }
                }
            }
        }
        Ok(())
    }
}

/// memory-mcp's call (`memory.mcp_call`) when this statement's events are its record: a
/// malformed setting is `22023`; a well-formed one for another kind of event is no record. A
/// statement whose events never carry a call does not read the setting, so a malformed one fails
/// only the INSERT it would mark (docs/audit.md), not a delete or another table's write.
fn mcp_call(table: &str, event_type: &str) -> Result<Option<(String, String)>, MxError> {
    if !events::mcp_call_recordable(event_type, table) {
        return Ok(None);
    }
    let Some(setting) = crate::gucs::MCP_CALL.get() else { return Ok(None) };
    let setting = setting.to_string_lossy();
    match events::mcp_call(&setting) {
        Err(why) => Err(MxError::bad_argument(why).hint("memory-mcp sets it with set_config('memory.mcp_call', 'remember:<client>', true).")),
        Ok(Some((tool, client))) if events::mcp_call_recorded_by(tool, event_type, table) => Ok(Some((tool.to_string(), client.to_string()))),
        Ok(_) => Ok(None),
    }
}

/// Append one event of a row of a governed table.
#[allow(clippy::too_many_arguments)]
fn append_event(
    ap: &mut Appender,
    client: &pgrx::spi::SpiClient,
    actor: &str,
    event_type: &'static str,
    members: &[(&str, Option<&str>)],
    org: Option<&str>,
    project_id: Option<&str>,
    workspace_id: Option<&str>,
) -> Result<(), MxError> {
    let payload = FlatPayload::new(members).ok_or_else(|| MxError::new(code::INTERNAL, "audit payload keys out of order"))?;
    ap.push_ref(
        client,
        EventRef {
            event_type,
            org_id: org,
            project_id,
            workspace_id,
            actor_id: Some(actor),
            payload: Payload::Flat(payload),
            payload_text: None,
            payload_jsonb: None,
            prefix: None,
        },
    )?;
    Ok(())
}

/// TG_ARGV for memory.audit_trigger from a column mapping (memory_core::protocol); memory.govern
/// builds its CREATE TRIGGER with it.
#[allow(clippy::too_many_arguments)]
#[pg_extern(immutable, parallel_safe, schema = "memory_internal", name = "_audit_trigger_args")]
fn audit_trigger_args(
    id: Option<String>,
    content: Option<String>,
    org: Option<String>,
    project: Option<String>,
    workspace: Option<String>,
    user: Option<String>,
    tier: Option<String>,
    tier_json: default!(Option<bool>, false),
) -> Vec<String> {
    AuditArgs { id, content, org, project, workspace, user, tier, tier_json: tier_json.unwrap_or(false) }.to_args()
}

// The SQL entry point: `39P01` when called other than as a trigger (see src/pg/trigger.rs).
crate::checked_trigger_entry!(memory_audit_trigger_checked, pg_finfo_memory_audit_trigger_checked, "memory.audit_trigger()", audit_trigger_wrapper);
