//! SQL surface of feedback weights (docs/design.md#feedback-weights). The EMA and the misleading rule are in
//! `memory_core::feedback`; this moves rows: resolve ids, lock them, apply once per
//! (session, observation), write history, and emit one `memory.feedback` event per tenant.
//!
//! Ids are resolved in `memory.observations` first, then in every governed table registered with
//! a `weight` column (its `id` column must be uuid), in registration order; the first match wins.

use crate::errors::{code, MxError, OrRaise};
use memory_core::feedback::{ema, Decision, Observed, Outcome};
use pgrx::datum::DatumWithOid;
use pgrx::prelude::*;
use pgrx::spi::{quote_identifier, SpiClient};
use crate::trust::AsOwner;
use serde_json::{json, Map, Value};
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};


fn parse_outcome(s: &str) -> Result<Outcome, MxError> {
    Outcome::parse(s).ok_or_else(|| {
        MxError::bad_argument(format!("unknown outcome \"{s}\"")).hint("Use one of: accepted, rejected, rework.")
    })
}

#[pg_extern(immutable, parallel_safe, strict, schema = "memory_internal", name = "_ema")]
fn ema_sql(previous: f64, outcome: &str, alpha_success: f64, alpha_failure: f64) -> f64 {
    let o = parse_outcome(outcome).or_raise();
    ema(previous, o, alpha_success, alpha_failure).map_err(|e| MxError::bad_argument(e.to_string())).or_raise()
}

/// The misleading rule (memory_core::feedback::is_misleading) for SQL.
#[pg_extern(immutable, parallel_safe, strict, schema = "memory_internal", name = "_is_misleading")]
fn is_misleading_sql(failed_sessions: i64, successful_sessions: i64) -> bool {
    memory_core::feedback::is_misleading(failed_sessions, successful_sessions)
}

/// The CHECK of `memory.observations.weight`: true, or 22023 for a weight outside [0, 1] (a
/// client value must not steer recall; outcomes move weights within the range).
#[pg_extern(immutable, parallel_safe, strict, schema = "memory_internal", name = "_check_weight")]
fn check_weight(w: f64) -> bool {
    if !memory_core::feedback::weight_allowed(w) {
        MxError::bad_argument(format!("weight {w} is outside [0, 1]"))
            .hint("Leave weight to its default (1.0); memory.record_outcome moves it.")
            .raise();
    }
    true
}

/// A table whose rows carry a weight: memory.observations or a governed application table.
struct Source {
    rel: String,
    relid: pg_sys::Oid,
    id: String,
    org: Option<String>,
    project: Option<String>,
    weight: String,
    deleted: Option<String>,
    /// memory.observations: read and written as the extension owner.
    builtin: bool,
    /// Distributed by Citus (docs/design.md#scale-out): rows are locked and written per org, on its shard.
    distributed: bool,
}

impl Source {
    fn col(&self, c: &Option<String>) -> String {
        c.as_ref().map(|c| format!("t.{}::text", quote_identifier(c))).unwrap_or_else(|| "NULL::text".into())
    }

    /// On a distributed table, the condition naming one org (parameter `$2`): Citus then runs
    /// the statement on that org's shard alone.
    fn org_filter(&self) -> String {
        match (&self.org, self.distributed) {
            (Some(o), true) => format!(" AND t.{} OPERATOR(pg_catalog.=) $2::pg_catalog.text", quote_identifier(o)),
            _ => String::new(),
        }
    }

    /// On a distributed table, the orgs (sorted) of the rows with these ids, read without a lock
    /// (the caller's orgs are checked on the rows read); None elsewhere (one locking read serves).
    fn orgs_of(&self, client: &SpiClient, ids: &[pgrx::Uuid]) -> Result<Option<BTreeSet<String>>, MxError> {
        let Some(org) = self.org.as_ref().filter(|_| self.distributed) else { return Ok(None) };
        let q = format!(
            "SELECT DISTINCT t.{o}::pg_catalog.text FROM {rel} t WHERE t.{id} OPERATOR(pg_catalog.=) ANY($1)",
            o = quote_identifier(org),
            rel = self.rel,
            id = quote_identifier(&self.id)
        );
        let mut out = BTreeSet::new();
        for row in client.select(q.as_str(), None, &[ids.to_vec().into()]).map_err(MxError::spi_in("feedback"))? {
            if let Some(o) = row.get::<String>(1).map_err(MxError::spi_in("feedback"))? {
                out.insert(o);
            }
        }
        Ok(Some(out))
    }
}

/// (id, org, project, weight, soft-deleted) of a row of the locking read.
type TargetRow = (pgrx::Uuid, Option<String>, Option<String>, f64, bool);

fn read_target(row: &pgrx::spi::SpiHeapTupleData) -> Result<TargetRow, MxError> {
    let e = MxError::spi_in("feedback");
    Ok((
        row.get::<pgrx::Uuid>(1).map_err(&e)?.ok_or_else(|| MxError::new(code::INTERNAL, "a weighted row without its id"))?,
        row.get(2).map_err(&e)?,
        row.get(3).map_err(&e)?,
        row.get::<f64>(4).map_err(&e)?.unwrap_or(f64::NAN),
        row.get::<bool>(5).map_err(&e)?.unwrap_or(false),
    ))
}

/// Weighted tables: memory.observations (read as the extension owner, rows limited to orgs the
/// caller may act for), then application tables the caller may SELECT and UPDATE itself (read
/// and written with the caller's rights; others are skipped, not failed).
fn sources(client: &SpiClient) -> Result<Vec<Source>, MxError> {
    let mut out = Vec::new();
    let rows = {
        let _owner = AsOwner::enter()?;
        client
            .select(
                // Application tables: the caller needs SELECT and UPDATE on them, and the mapped
                // columns must still have the types govern checked (a later ALTER could have
                // changed them to a type whose casts are the owner's code).
                // (The mapping's members are read as text here: nothing parses the options.)
                "SELECT g.relid::pg_catalog.regclass::pg_catalog.text, g.builtin, g.relid::pg_catalog.oid,
                        g.options OPERATOR(pg_catalog.->>) 'id', g.options OPERATOR(pg_catalog.->>) 'weight',
                        g.options OPERATOR(pg_catalog.->>) 'org', g.options OPERATOR(pg_catalog.->>) 'project',
                        g.options OPERATOR(pg_catalog.->>) 'soft_deleted', memory_internal._citus_distributed(g.relid)
                   FROM memory.governance_registry g
                  WHERE g.options OPERATOR(pg_catalog.?) 'weight'
                    AND (g.builtin OR (pg_catalog.has_table_privilege(memory_internal._caller(), g.relid, 'SELECT')
                                      AND pg_catalog.has_table_privilege(memory_internal._caller(), g.relid, 'UPDATE')
                                      AND memory_internal._column_type_is(g.relid, g.options OPERATOR(pg_catalog.->>) 'id', 'uuid')
                                      AND memory_internal._column_type_is(g.relid, g.options OPERATOR(pg_catalog.->>) 'weight', 'float8')
                                      AND memory_internal._column_type_is(g.relid, g.options OPERATOR(pg_catalog.->>) 'org', 'text', true)
                                      AND memory_internal._column_type_is(g.relid, g.options OPERATOR(pg_catalog.->>) 'project', 'text', true)
                                      AND memory_internal._column_type_is(g.relid, g.options OPERATOR(pg_catalog.->>) 'soft_deleted', 'timestamptz', true)))
                  ORDER BY g.builtin DESC, g.governed_at",
                None,
                &[],
            )
            .map_err(MxError::spi_in("feedback"))?
    };
    for row in rows {
        let rel: String = row.get(1).map_err(MxError::spi_in("feedback"))?.unwrap_or_default();
        let builtin = row.get::<bool>(2).map_err(MxError::spi_in("feedback"))?.unwrap_or(false);
        let relid = row.get::<pg_sys::Oid>(3).map_err(MxError::spi_in("feedback"))?.unwrap_or(pg_sys::InvalidOid);
        let s = |i: usize| row.get::<String>(i).map_err(MxError::spi_in("feedback"));
        if let (Some(id), Some(weight)) = (s(4)?, s(5)?) {
            let distributed = row.get::<bool>(9).map_err(MxError::spi_in("feedback"))?.unwrap_or(false);
            out.push(Source { rel, relid, id, org: s(6)?, project: s(7)?, weight, deleted: s(8)?, builtin, distributed });
        }
    }
    Ok(out)
}

/// Who runs the statements on a source: the extension owner for memory.observations, the
/// table's owner for an application table.
/// (Held only for its Drop, which switches back.)
#[allow(dead_code)]
enum Guard {
    Owner(AsOwner),
    TableOwner(crate::trust::AsRole),
}

impl Guard {
    fn for_source(src: &Source) -> Result<Self, MxError> {
        Ok(if src.builtin { Guard::Owner(AsOwner::enter()?) } else { Guard::TableOwner(crate::trust::AsRole::table_owner(src.relid)?) })
    }
}

struct Target {
    source: usize,
    /// The row's org ('' for a NULL one, the platform's), and whether it was NULL.
    org: String,
    org_null: bool,
    project: Option<String>,
    weight: f64,
    deleted: bool,
}

type OutcomeRow = (pgrx::Uuid, Option<f64>, Option<f64>, Option<f64>, bool, String);

#[pg_extern(volatile, schema = "memory_internal", name = "_record_outcome")]
fn record_outcome(
    session_id: Option<&str>,
    outcome: Option<&str>,
    observation_ids: Option<Array<pgrx::Uuid>>,
) -> TableIterator<
    'static,
    (
        name!(observation_id, pgrx::Uuid),
        name!(previous_weight, Option<f64>),
        name!(new_weight, Option<f64>),
        name!(alpha, Option<f64>),
        name!(applied, bool),
        name!(reason, String),
    ),
> {
    let session = match session_id.map(str::trim) {
        Some(s) if !s.is_empty() => s.to_string(),
        _ => MxError::bad_argument("session_id must be a non-empty text").raise(),
    };
    let outcome = parse_outcome(outcome.unwrap_or("")).or_raise();
    let ids: Vec<pgrx::Uuid> = observation_ids.map(|a| a.iter().flatten().collect()).unwrap_or_default();
    let rows = if ids.is_empty() { Vec::new() } else { apply(&session, outcome, &ids).or_raise() };
    TableIterator::new(rows)
}

/// What the history says of the resolved ids: those this session already moved, the distinct
/// failed and successful sessions of each, and the α of each org.
struct History {
    recorded: HashSet<[u8; 16]>,
    counts: HashMap<[u8; 16], (i64, i64)>,
    alphas: HashMap<String, (f64, f64)>,
    /// The platform's α (memory.alpha_success, memory.alpha_failure), for orgs without their own.
    default_alphas: (f64, f64),
}

/// The writes one call makes: new weights by source, history rows, and one event per tenant.
#[derive(Default)]
struct Writes {
    updates: BTreeMap<usize, (Vec<pgrx::Uuid>, Vec<f64>, Vec<Option<String>>)>,
    hist: (Vec<pgrx::Uuid>, Vec<f64>, Vec<f64>, Vec<f64>, Vec<String>, Vec<Option<String>>),
    events: BTreeMap<(String, Option<String>), (Vec<String>, Map<String, Value>)>,
}

/// Records `outcome` of `session` for `ids`: resolve (lock the rows, read their history),
/// decide (memory_core::feedback::decide, per id in the caller's order), write.
fn apply(session: &str, outcome: Outcome, ids: &[pgrx::Uuid]) -> Result<Vec<OutcomeRow>, MxError> {
    Spi::connect_mut(|client| {
        crate::pg::xact::ensure_xid();
        let srcs = sources(client)?;
        let found = resolve(client, &srcs, ids)?;
        let history = read_history(client, session, ids, &found)?;
        let (out, writes) = decide(ids, &found, &history, outcome)?;
        write(client, &srcs, session, outcome, writes)?;
        Ok(out)
    })
}

/// The rows the ids name, locked, source by source: the first source holding an id wins, and
/// with `memory.org_id` set only that org's rows (ids of the role's other orgs are not found);
/// without it, an id several of the caller's orgs hold is the acting org's.
fn resolve(client: &mut SpiClient, srcs: &[Source], ids: &[pgrx::Uuid]) -> Result<HashMap<[u8; 16], Target>, MxError> {
    let mut unique: Vec<pgrx::Uuid> = Vec::with_capacity(ids.len());
    let mut seen = HashSet::new();
    for id in ids {
        if seen.insert(*id.as_bytes()) {
            unique.push(*id);
        }
    }
    let mut found: HashMap<[u8; 16], Target> = HashMap::new();
    let acting: Option<String> = crate::gucs::ORG_ID.get().and_then(|c| c.to_str().ok().map(str::to_owned)).filter(|s| !s.is_empty());
    for (i, src) in srcs.iter().enumerate() {
        let pending: Vec<pgrx::Uuid> = unique.iter().filter(|u| !found.contains_key(u.as_bytes())).copied().collect();
        if pending.is_empty() {
            break;
        }
        let q = format!(
            "SELECT t.{id}, {org}, {proj}, t.{w}::pg_catalog.float8, {del} FROM {rel} t
              WHERE t.{id} OPERATOR(pg_catalog.=) ANY($1){per_org} ORDER BY t.{id}, {org} COLLATE \"C\" FOR UPDATE",
            id = quote_identifier(&src.id),
            org = src.col(&src.org),
            proj = src.col(&src.project),
            w = quote_identifier(&src.weight),
            del = src.deleted.as_ref().map(|d| format!("t.{} IS NOT NULL", quote_identifier(d))).unwrap_or_else(|| "false".into()),
            rel = src.rel,
            per_org = src.org_filter(),
        );
        // memory.observations as the extension owner (orgs checked below); an application
        // table as its owner, so its code never runs with the caller's rights.
        // Citus refuses FOR UPDATE over all shards: the orgs of the ids are read first, and
        // each org the caller may act for has its rows locked on its shard, in org order.
        let orgs = {
            let _g = Guard::for_source(src)?;
            src.orgs_of(client, &pending)?
        };
        let orgs = match orgs {
            Some(all) => {
                let mut mine = BTreeSet::new();
                for o in all {
                    // With memory.org_id set (a pool's tenant, memory-mcp's token org), only that
                    // org's rows: another org the login role may also act for is not this call's.
                    if acting.as_deref().is_none_or(|a| a == o) && crate::trust::may_act_for(Some(&o))? {
                        mine.insert(o);
                    }
                }
                Some(mine)
            }
            None => None,
        };
        let rows = {
            let _g = Guard::for_source(src)?;
            match orgs {
                Some(orgs) => {
                    let mut rows = Vec::new();
                    for org in orgs {
                        let t = client.update(q.as_str(), None, &[pending.clone().into(), org.into()]).map_err(MxError::spi_in("feedback"))?;
                        rows.extend(t.map(|r| read_target(&r)));
                    }
                    rows
                }
                None => client
                    .update(q.as_str(), None, &[pending.into()])
                    .map_err(MxError::spi_in("feedback"))?
                    .map(|r| read_target(&r))
                    .collect(),
            }
        };
        for row in rows {
            let (id, org, project, weight, deleted) = row?;
            // A row of an org the caller may not act for is not there for it.
            if !crate::trust::may_act_for(org.as_deref())? {
                continue;
            }
            // With memory.org_id set, only that org's rows (a row of a table without an org
            // column has none to compare).
            if let (Some(a), Some(o)) = (acting.as_deref(), org.as_deref()) {
                if a != o {
                    continue;
                }
            }
            // An id several of the caller's orgs hold is the acting org's (memory.org_id)
            // when that org holds it, and otherwise the greatest org's: rows come in org
            // order, so the last one stays unless the acting org's came first.
            if found.get(id.as_bytes()).is_some_and(|t| !t.org_null && acting.as_deref() == Some(t.org.as_str())) {
                continue;
            }
            found.insert(*id.as_bytes(), Target { source: i, org_null: org.is_none(), org: org.unwrap_or_default(), project, weight, deleted });
        }
    }

    Ok(found)
}

/// The history of the resolved ids (read as the extension owner).
fn read_history(client: &SpiClient, session: &str, ids: &[pgrx::Uuid], found: &HashMap<[u8; 16], Target>) -> Result<History, MxError> {
    let (alpha_s, alpha_f) = (crate::gucs::ALPHA_SUCCESS.get(), crate::gucs::ALPHA_FAILURE.get());
    let mut unique = HashSet::new();
    // History is per (org, observation): a uuid that another tenant's table happens to hold
    // never shares its sessions or its counts.
    let key: Vec<pgrx::Uuid> = ids.iter().filter(|u| found.contains_key(u.as_bytes()) && unique.insert(*u.as_bytes())).copied().collect();
    let key_orgs: Vec<String> = key.iter().map(|u| found[u.as_bytes()].org.clone()).collect();
    let mut recorded = HashSet::new();
    let owner = AsOwner::enter()?;
    for row in client
        .select(
            "SELECT h.observation_id FROM memory.observation_weight_history h
               JOIN unnest($2::pg_catalog.uuid[], $3::pg_catalog.text[]) AS k(id, org)
                 ON h.observation_id OPERATOR(pg_catalog.=) k.id AND h.org_id OPERATOR(pg_catalog.=) k.org
              WHERE h.session_id OPERATOR(pg_catalog.=) $1",
            None,
            &[session.into(), key.clone().into(), key_orgs.clone().into()],
        )
        .map_err(MxError::spi_in("feedback"))?
    {
        if let Some(id) = row.get::<pgrx::Uuid>(1).map_err(MxError::spi_in("feedback"))? {
            recorded.insert(*id.as_bytes());
        }
    }
    let mut counts: HashMap<[u8; 16], (i64, i64)> = HashMap::new();
    for row in client
        .select(
            "SELECT h.observation_id,
                    pg_catalog.count(DISTINCT h.session_id) FILTER (WHERE h.outcome OPERATOR(pg_catalog.<>) 'accepted'),
                    pg_catalog.count(DISTINCT h.session_id) FILTER (WHERE h.outcome OPERATOR(pg_catalog.=) 'accepted')
               FROM memory.observation_weight_history h
               JOIN unnest($1::pg_catalog.uuid[], $2::pg_catalog.text[]) AS k(id, org)
                 ON h.observation_id OPERATOR(pg_catalog.=) k.id AND h.org_id OPERATOR(pg_catalog.=) k.org
              GROUP BY 1",
            None,
            &[key.into(), key_orgs.into()],
        )
        .map_err(MxError::spi_in("feedback"))?
    {
        if let Some(id) = row.get::<pgrx::Uuid>(1).map_err(MxError::spi_in("feedback"))? {
            counts.insert(*id.as_bytes(), (row.get(2).map_err(MxError::spi_in("feedback"))?.unwrap_or(0), row.get(3).map_err(MxError::spi_in("feedback"))?.unwrap_or(0)));
        }
    }
    let orgs: Vec<String> = found.values().map(|t| t.org.clone()).collect::<HashSet<_>>().into_iter().collect();
    let mut alphas: HashMap<String, (f64, f64)> = HashMap::new();
    for row in client
        .select(
            "SELECT s.org_id, s.alpha_success, s.alpha_failure FROM memory.org_settings s WHERE s.org_id OPERATOR(pg_catalog.=) ANY($1)",
            None,
            &[orgs.into()],
        )
        .map_err(MxError::spi_in("feedback"))?
    {
        let org: String = row.get(1).map_err(MxError::spi_in("feedback"))?.unwrap_or_default();
        let a_s = row.get::<f64>(2).map_err(MxError::spi_in("feedback"))?.unwrap_or(alpha_s);
        let a_f = row.get::<f64>(3).map_err(MxError::spi_in("feedback"))?.unwrap_or(alpha_f);
        alphas.insert(org, (a_s, a_f));
    }
    drop(owner);
    Ok(History { recorded, counts, alphas, default_alphas: (alpha_s, alpha_f) })
}

/// Decides every id, in the caller's order: the result rows and the writes they need.
fn decide(ids: &[pgrx::Uuid], found: &HashMap<[u8; 16], Target>, history: &History, outcome: Outcome) -> Result<(Vec<OutcomeRow>, Writes), MxError> {
    let mut out: Vec<OutcomeRow> = Vec::with_capacity(ids.len());
    let mut w = Writes::default();
    let mut done: HashSet<[u8; 16]> = HashSet::new();
    for id in ids {
        let b = *id.as_bytes();
        let Some(t) = found.get(&b) else {
            out.push((*id, None, None, None, false, "not_found".into()));
            continue;
        };
        if !done.insert(b) {
            out.push((*id, Some(t.weight), None, None, false, "duplicate_in_call".into()));
            continue;
        }
        let (failed_sessions, successful_sessions) = history.counts.get(&b).copied().unwrap_or((0, 0));
        let seen = Observed { weight: t.weight, soft_deleted: t.deleted, already_recorded: history.recorded.contains(&b), failed_sessions, successful_sessions };
        let (a_s, a_f) = history.alphas.get(&t.org).copied().unwrap_or(history.default_alphas);
        let (new, alpha) = match memory_core::feedback::decide(&seen, outcome, a_s, a_f).map_err(|e| MxError::bad_argument(e.to_string()))? {
            Decision::Skipped(reason) => {
                let previous = (reason != "non_finite_weight").then_some(t.weight);
                out.push((*id, previous, None, None, false, reason.into()));
                continue;
            }
            Decision::Applied { new, alpha } => (new, alpha),
        };
        out.push((*id, Some(t.weight), Some(new), Some(alpha), true, "applied".into()));
        let u = w.updates.entry(t.source).or_default();
        u.0.push(*id);
        u.1.push(new);
        u.2.push((!t.org_null).then(|| t.org.clone()));
        w.hist.0.push(*id);
        w.hist.1.push(t.weight);
        w.hist.2.push(new);
        w.hist.3.push(alpha);
        w.hist.4.push(t.org.clone());
        w.hist.5.push(t.project.clone());
        let e = w.events.entry((t.org.clone(), None)).or_insert_with(|| (Vec::new(), Map::new()));
        e.0.push(id.to_string());
        e.1.insert(id.to_string(), json!({ "previous": t.weight, "new": new }));
    }
    Ok((out, w))
}


/// Writes the weights per source, the history rows, and one `memory.feedback` event per tenant.
fn write(client: &mut SpiClient, srcs: &[Source], session: &str, outcome: Outcome, w: Writes) -> Result<(), MxError> {
    let Writes { updates, hist, events } = w;
    for (src, (uids, weights, orgs)) in updates {
        let s = &srcs[src];
        // Each row in its own org: a uuid another tenant's row also carries is not written.
        let q = format!(
            "UPDATE {rel} t SET {w} = u.w FROM unnest($1::pg_catalog.uuid[], $2::pg_catalog.float8[], $3::pg_catalog.text[]) AS u(id, w, org)
              WHERE t.{id} OPERATOR(pg_catalog.=) u.id{same_org}",
            rel = s.rel,
            w = quote_identifier(&s.weight),
            id = quote_identifier(&s.id),
            same_org = match &s.org {
                Some(o) if s.distributed => format!(" AND t.{} OPERATOR(pg_catalog.=) $4::pg_catalog.text", quote_identifier(o)),
                Some(o) => format!(" AND t.{}::pg_catalog.text IS NOT DISTINCT FROM u.org", quote_identifier(o)),
                None => String::new(),
            },
        );
        let _g = Guard::for_source(s)?;
        if s.distributed && s.org.is_some() {
            // On Citus, one org's rows at a time, on its shard (as they were locked).
            // (A distributed table's org, its distribution column, is never NULL.)
            let mut by_org: BTreeMap<String, (Vec<pgrx::Uuid>, Vec<f64>)> = BTreeMap::new();
            for ((u, w), o) in uids.into_iter().zip(weights).zip(orgs) {
                let e = by_org.entry(o.unwrap_or_default()).or_default();
                e.0.push(u);
                e.1.push(w);
            }
            for (org, (u, w)) in by_org {
                let orgs = vec![Some(org.clone()); u.len()];
                client.update(q.as_str(), None, &[u.into(), w.into(), orgs.into(), org.into()]).map_err(MxError::spi_in("feedback"))?;
            }
        } else {
            client.update(q.as_str(), None, &[uids.into(), weights.into(), orgs.into()]).map_err(MxError::spi_in("feedback"))?;
        }
    }
    if !hist.0.is_empty() {
        let projects_by_org: HashMap<String, HashSet<Option<String>>> =
            hist.4.iter().zip(hist.5.iter()).fold(HashMap::new(), |mut m, (o, p)| {
                m.entry(o.clone()).or_default().insert(p.clone());
                m
            });
        let args: Vec<DatumWithOid> = vec![
            session.into(),
            outcome.as_str().into(),
            hist.0.into(),
            hist.1.into(),
            hist.2.into(),
            hist.3.into(),
            hist.4.into(),
            hist.5.into(),
        ];
        let owner = AsOwner::enter()?;
        client
            .update(
                "INSERT INTO memory.observation_weight_history
                        (observation_id, session_id, outcome, previous_weight, new_weight, alpha, org_id, project_id)
                 SELECT u.i, $1, $2::memory.outcome, u.p, u.n, u.a, u.o, u.pr
                   FROM unnest($3::pg_catalog.uuid[], $4::pg_catalog.float8[], $5::pg_catalog.float8[],
                                          $6::pg_catalog.float8[], $7::pg_catalog.text[], $8::pg_catalog.text[]) AS u(i, p, n, a, o, pr)",
                None,
                &args,
            )
            .map_err(MxError::spi_in("feedback"))?;
        drop(owner);
        // One memory.feedback event per tenant, through the audit appender itself (the orgs
        // were checked above; the appender checks them again).
        let mut ap = crate::audit::Appender::new(client)?;
        let actor = crate::audit::default_actor(&ap);
        for ((org, _), (applied_ids, deltas)) in events {
            // The seed's payload; projectId when every update of the tenant shares one.
            let project = projects_by_org.get(&org).filter(|p| p.len() == 1).and_then(|p| p.iter().next().cloned().flatten());
            let payload = json!({
                "sessionId": session, "outcome": outcome.as_str(), "observationIds": applied_ids,
                "weightDeltasById": deltas, "orgId": org, "projectId": project,
            });
            ap.push(
                client,
                crate::audit::Pending {
                    event_type: std::borrow::Cow::Borrowed(memory_core::events::FEEDBACK),
                    org_id: Some(org.clone()).filter(|o| !o.is_empty()),
                    project_id: project,
                    workspace_id: None,
                    actor_id: Some(actor.clone()),
                    payload,
                    payload_text: None,
                },
            )?;
        }
        ap.finish(client)?;
    }
    Ok(())
}
