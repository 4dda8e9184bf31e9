//! Where a chain's audit rows are (docs/design.md#scale-out).
//!
//! On a single node: the tables `memory.audit_pending`, `memory.audit_heads`, `memory.audit_log`
//! and `memory.audit_seals`. On Citus, after `memory.distribute()`, those four are distributed by
//! `chain_id` and co-located: a chain's pending entries, head, log and seals are the shards of
//! one shard group, on the node that also holds its tenant's rows of every co-located table. The
//! audit code then works on that group's shards directly, as local tables of the node it runs on:
//! a trigger on a worker's shard writes its tenant's events into the co-located pending shard
//! beside it, and integration and verification run on each node over the groups it holds. Rows a
//! node cannot place locally (events appended on the coordinator, which holds no shards) go into
//! the node's `memory.audit_outbox` and from there, in the same transaction, into the distributed
//! `memory.audit_pending` through Citus.
//!
//! Nothing here runs unless `memory.audit_pending` is in Citus's metadata: the check is one
//! cached lookup per backend.

use crate::errors::MxError;
use pgrx::datum::DatumWithOid;
use pgrx::prelude::*;
use pgrx::spi::SpiClient;
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::Rc;

/// The audit tables of one place: the node's own tables, or one shard group's shards.
pub struct Tables {
    /// memory.audit_pending (or its shard).
    pub pending: pg_sys::Oid,
    /// memory.audit_log (or its shard, a partitioned table whose partitions are the shards of
    /// the log's partitions).
    pub log: pg_sys::Oid,
    /// memory.audit_heads (or its shard).
    pub heads: pg_sys::Oid,
    /// Qualified names of the shards, to put in place of the logical tables' names in SQL text;
    /// None: the logical tables themselves.
    pub names: Option<Names>,
}

/// Qualified names of one shard group's shards.
pub struct Names {
    pub pending: String,
    pub heads: String,
    pub log: String,
    pub seals: String,
}

impl Tables {
    /// `sql` with the logical audit tables' names replaced by this group's shards. The names are
    /// Citus's `shard_name()` (schema-qualified, quoted where needed).
    pub fn sql(&self, sql: &str) -> String {
        match &self.names {
            None => sql.to_string(),
            Some(n) => memory_core::shards::put_shard_names(
                sql,
                &[
                    ("memory.audit_pending", &n.pending),
                    ("memory.audit_heads", &n.heads),
                    ("memory.audit_seals", &n.seals),
                    ("memory.audit_log", &n.log),
                ],
            ),
        }
    }

    pub fn is_shard_group(&self) -> bool {
        self.names.is_some()
    }
}

thread_local! {
    // 0: not known yet, 1: a single node (or Citus without memory.distribute()), 2: distributed.
    static DISTRIBUTED: Cell<u8> = const { Cell::new(0) };
    // The oid of memory.audit_pending when DISTRIBUTED was read.
    static LOGICAL_PENDING: Cell<pg_sys::Oid> = const { Cell::new(pg_sys::InvalidOid) };
    // chain -> its shard group on this node (None: not on this node), until a relcache
    // invalidation of a table of the group, of a logical audit table, or of everything; at most
    // MAX_CHAINS chains (a backend that has seen more starts over), sharing one Tables per group.
    static GROUPS: RefCell<HashMap<String, Option<Rc<Tables>>>> = RefCell::new(HashMap::new());
    // shard group (its hash range's first value) -> its tables on this node.
    static BY_RANGE: RefCell<HashMap<String, Option<Rc<Tables>>>> = RefCell::new(HashMap::new());
    // The node's own tables, while not distributed.
    static LOCAL: RefCell<Option<Rc<Tables>>> = const { RefCell::new(None) };
    // memory.audit_outbox's oid.
    static OUTBOX: Cell<pg_sys::Oid> = const { Cell::new(pg_sys::InvalidOid) };
}

/// Relcache callback part.
pub(super) fn forget(relid: pg_sys::Oid) {
    let all = relid == pg_sys::InvalidOid || LOGICAL_PENDING.with(Cell::get) == relid;
    if all {
        DISTRIBUTED.with(|d| d.set(0));
    }
    forget_relid(&OUTBOX, relid);
    LOCAL.with(|l| {
        let mut l = l.borrow_mut();
        if all || l.as_ref().is_some_and(|t| t.pending == relid || t.log == relid) {
            *l = None;
        }
    });
    let stale = all || BY_RANGE.with(|g| g.borrow().values().flatten().any(|t| t.pending == relid || t.log == relid));
    if stale {
        // A shard of ours was moved, split or dropped: read every placement again.
        GROUPS.with(|g| g.borrow_mut().clear());
        BY_RANGE.with(|g| g.borrow_mut().clear());
    }
}

/// Chains remembered per backend before the map starts over.
const MAX_CHAINS: usize = 10_000;

/// Whether the audit tables are distributed by Citus on this database.
pub fn distributed(client: &SpiClient) -> Result<bool, MxError> {
    match DISTRIBUTED.with(Cell::get) {
        1 => return Ok(false),
        2 => return Ok(true),
        _ => {}
    }
    let row = run(
        client,
        "SELECT 'memory.audit_pending'::pg_catalog.regclass::pg_catalog.oid,
                pg_catalog.to_regclass('pg_catalog.pg_dist_partition') IS NOT NULL",
        &[],
        &[],
        Some(1),
    )?
    .first();
    let pending = row.get::<pg_sys::Oid>(1).map_err(MxError::spi_in("audit"))?.unwrap_or(pg_sys::InvalidOid);
    let citus = row.get::<bool>(2).map_err(MxError::spi_in("audit"))?.unwrap_or(false);
    // pg_dist_partition exists only where Citus is installed: the statement naming it is
    // prepared only then.
    let dist = citus
        && client
            .select(
                "SELECT 1 FROM pg_catalog.pg_dist_partition WHERE logicalrelid = 'memory.audit_pending'::pg_catalog.regclass",
                Some(1),
                &[],
            )
            .map_err(MxError::spi_in("audit"))?
            .len()
            > 0;
    LOGICAL_PENDING.with(|c| c.set(pending));
    DISTRIBUTED.with(|d| d.set(if dist { 2 } else { 1 }));
    Ok(dist)
}

/// The node's own audit tables (not distributed).
pub fn local(client: &SpiClient) -> Result<Rc<Tables>, MxError> {
    if let Some(t) = LOCAL.with(|l| l.borrow().clone()) {
        return Ok(t);
    }
    let row = run(
        client,
        "SELECT 'memory.audit_pending'::pg_catalog.regclass::pg_catalog.oid, 'memory.audit_log'::pg_catalog.regclass::pg_catalog.oid,
                'memory.audit_heads'::pg_catalog.regclass::pg_catalog.oid",
        &[],
        &[],
        Some(1),
    )?
    .first();
    let t = Rc::new(Tables {
        pending: row.get::<pg_sys::Oid>(1).map_err(MxError::spi_in("audit"))?.unwrap_or(pg_sys::InvalidOid),
        log: row.get::<pg_sys::Oid>(2).map_err(MxError::spi_in("audit"))?.unwrap_or(pg_sys::InvalidOid),
        heads: row.get::<pg_sys::Oid>(3).map_err(MxError::spi_in("audit"))?.unwrap_or(pg_sys::InvalidOid),
        names: None,
    });
    LOCAL.with(|l| *l.borrow_mut() = Some(t.clone()));
    Ok(t)
}

/// The shards of the four audit tables that share the hash range starting at `minvalue`, when
/// they are on this node: (logical table, shard oid or 0, shard name).
const GROUP_QUERY: &str = "
SELECT t.name, COALESCE(pg_catalog.to_regclass(pg_catalog.shard_name(t.rel, d.shardid))::pg_catalog.oid, 0::pg_catalog.oid),
       pg_catalog.shard_name(t.rel, d.shardid)
  FROM (VALUES ('pending', 'memory.audit_pending'::pg_catalog.regclass), ('heads', 'memory.audit_heads'::pg_catalog.regclass),
               ('log', 'memory.audit_log'::pg_catalog.regclass), ('seals', 'memory.audit_seals'::pg_catalog.regclass)) t(name, rel)
  JOIN pg_catalog.pg_dist_shard d ON d.logicalrelid OPERATOR(pg_catalog.=) t.rel AND d.shardminvalue OPERATOR(pg_catalog.=) $1
  JOIN pg_catalog.pg_dist_placement p ON p.shardid OPERATOR(pg_catalog.=) d.shardid
 WHERE p.groupid OPERATOR(pg_catalog.=) (SELECT groupid FROM pg_catalog.pg_dist_local_group)";

fn read_group(client: &SpiClient, minvalue: &str) -> Result<Option<Rc<Tables>>, MxError> {
    let mut pending = None;
    let mut log = None;
    let mut heads = None;
    let mut names: [Option<String>; 4] = Default::default();
    for row in client.select(GROUP_QUERY, None, &[minvalue.into()]).map_err(MxError::spi_in("audit"))? {
        let table: String = row.get(1).map_err(MxError::spi_in("audit"))?.unwrap_or_default();
        let oid: pg_sys::Oid = row.get(2).map_err(MxError::spi_in("audit"))?.unwrap_or(pg_sys::InvalidOid);
        let name: String = row.get(3).map_err(MxError::spi_in("audit"))?.unwrap_or_default();
        if oid == pg_sys::InvalidOid {
            // Placed here by the metadata but not (or no longer) present: a move in progress.
            return Ok(None);
        }
        let at = match table.as_str() {
            "pending" => {
                pending = Some(oid);
                0
            }
            "heads" => {
                heads = Some(oid);
                1
            }
            "log" => {
                log = Some(oid);
                2
            }
            _ => 3,
        };
        names[at] = Some(name);
    }
    match (pending, log, heads, names) {
        (Some(pending), Some(log), Some(heads), [Some(p), Some(h), Some(l), Some(s)]) => Ok(Some(Rc::new(Tables {
            pending,
            log,
            heads,
            names: Some(Names { pending: p, heads: h, log: l, seals: s }),
        }))),
        _ => Ok(None),
    }
}

/// The tables that hold `chain` on this node: the node's own tables when the audit tables are
/// not distributed; on Citus, the chain's shard group if it is placed on this node, else None.
pub fn for_chain(client: &SpiClient, chain: &str) -> Result<Option<Rc<Tables>>, MxError> {
    if !distributed(client)? {
        return local(client).map(Some);
    }
    if let Some(t) = GROUPS.with(|g| g.borrow().get(chain).cloned()) {
        return Ok(t);
    }
    let mut minvalue: Option<String> = None;
    for row in client
        .select(
            "SELECT d.shardminvalue FROM pg_catalog.pg_dist_shard d
              WHERE d.shardid OPERATOR(pg_catalog.=) pg_catalog.get_shard_id_for_distribution_column('memory.audit_pending'::pg_catalog.regclass, $1)",
            Some(1),
            &[chain.into()],
        )
        .map_err(MxError::spi_in("audit"))?
    {
        minvalue = row.get(1).map_err(MxError::spi_in("audit"))?;
    }
    let t = match minvalue {
        Some(m) => match BY_RANGE.with(|g| g.borrow().get(&m).cloned()) {
            Some(t) => t,
            None => {
                let t = read_group(client, &m)?;
                BY_RANGE.with(|g| g.borrow_mut().insert(m, t.clone()));
                t
            }
        },
        None => None,
    };
    GROUPS.with(|g| {
        let mut g = g.borrow_mut();
        if g.len() >= MAX_CHAINS {
            g.clear();
        }
        g.insert(chain.to_string(), t.clone());
    });
    Ok(t)
}

/// Whether the metadata places `chain`'s shard group on this node while its shards are not all
/// here (verification must not take that for a chain with no entries).
pub fn missing_here(client: &SpiClient, chain: &str) -> Result<bool, MxError> {
    let mut placed: Option<String> = None;
    for row in client
        .select(
            "SELECT d.shardminvalue FROM pg_catalog.pg_dist_shard d
               JOIN pg_catalog.pg_dist_placement p ON p.shardid OPERATOR(pg_catalog.=) d.shardid
              WHERE d.shardid OPERATOR(pg_catalog.=) pg_catalog.get_shard_id_for_distribution_column('memory.audit_pending'::pg_catalog.regclass, $1)
                AND p.groupid OPERATOR(pg_catalog.=) (SELECT groupid FROM pg_catalog.pg_dist_local_group)",
            Some(1),
            &[chain.into()],
        )
        .map_err(MxError::spi_in("audit"))?
    {
        placed = row.get(1).map_err(MxError::spi_in("audit"))?;
    }
    match placed {
        Some(m) => Ok(read_group(client, &m)?.is_none()),
        None => Ok(false),
    }
}

/// Every shard group of the audit tables placed on this node (none on a coordinator without
/// shards), and the hash ranges of those the metadata places here whose shards are not all
/// present (a move in progress, or a shard dropped or renamed).
pub fn local_groups(client: &SpiClient) -> Result<(Vec<Rc<Tables>>, Vec<String>), MxError> {
    let mut mins = Vec::new();
    for row in client
        .select(
            "SELECT d.shardminvalue FROM pg_catalog.pg_dist_shard d
               JOIN pg_catalog.pg_dist_placement p ON p.shardid OPERATOR(pg_catalog.=) d.shardid
              WHERE d.logicalrelid OPERATOR(pg_catalog.=) 'memory.audit_pending'::pg_catalog.regclass
                AND p.groupid OPERATOR(pg_catalog.=) (SELECT groupid FROM pg_catalog.pg_dist_local_group)
              ORDER BY d.shardminvalue::bigint",
            None,
            &[],
        )
        .map_err(MxError::spi_in("audit"))?
    {
        mins.push(row.get::<String>(1).map_err(MxError::spi_in("audit"))?.unwrap_or_default());
    }
    let mut out = Vec::new();
    let mut missing = Vec::new();
    for m in mins {
        match read_group(client, &m)? {
            Some(t) => out.push(t),
            None => missing.push(m),
        }
    }
    Ok((out, missing))
}

/// memory.audit_outbox's oid: where a node puts events whose chain is placed elsewhere.
pub fn outbox(client: &SpiClient) -> Result<pg_sys::Oid, MxError> {
    cached_relid(&OUTBOX, client, "SELECT 'memory.audit_outbox'::pg_catalog.regclass::pg_catalog.oid")
}

/// Moves what this transaction put into memory.audit_outbox into the distributed
/// memory.audit_pending (Citus routes each row to its chain's shard), and empties the outbox.
pub fn ship_outbox(client: &SpiClient) -> Result<(), MxError> {
    // Only rows of this transaction are in the outbox: every writer ships and deletes its own
    // rows before it commits, and a rolled-back writer's rows are invisible.
    client
        .select(
            "INSERT INTO memory.audit_pending (id, ord, chain_id, event_type, written_at, actor_id, org_id, project_id, workspace_id,
                                               payload, key_id, pending_hash)
             SELECT id, ord, chain_id, event_type, written_at, actor_id, org_id, project_id, workspace_id, payload, key_id, pending_hash
               FROM memory.audit_outbox",
            None,
            &[],
        )
        .map_err(MxError::spi_in("audit"))?;
    client.select("DELETE FROM memory.audit_outbox", None, &[]).map_err(MxError::spi_in("audit"))?;
    Ok(())
}

/// `command` run on every node of the Citus cluster, this one included, each in its own
/// transaction (`run_command_on_all_nodes`), as the extension owner: (node id, whether it
/// succeeded, its result or error text), in node order.
pub fn on_all_nodes(client: &SpiClient, command: &str) -> Result<Vec<(i32, bool, String)>, MxError> {
    let _owner = crate::trust::AsOwner::enter()?;
    let mut out = Vec::new();
    for row in client
        .select(
            "SELECT nodeid, success, result FROM pg_catalog.run_command_on_all_nodes($1) ORDER BY nodeid",
            None,
            &[command.into()],
        )
        .map_err(MxError::spi_in("audit"))?
    {
        out.push((
            row.get::<i32>(1).map_err(MxError::spi_in("audit"))?.unwrap_or_default(),
            row.get::<bool>(2).map_err(MxError::spi_in("audit"))?.unwrap_or(false),
            row.get::<String>(3).map_err(MxError::spi_in("audit"))?.unwrap_or_default(),
        ));
    }
    Ok(out)
}

/// Run one of the fixed statements through its kept plan.
pub(super) fn run<'conn>(
    client: &SpiClient<'conn>,
    sql: &'static str,
    types: &[pg_sys::Oid],
    args: &[DatumWithOid],
    limit: Option<std::ffi::c_long>,
) -> Result<pgrx::spi::SpiTupleTable<'conn>, MxError> {
    crate::pg::spi::kept(client, sql, types, args, limit).map_err(MxError::spi_in("audit"))
}

/// `run` on the tables of `tables`: the kept plan for the node's own tables, the statement with
/// the shard names put in (planned each time) for a Citus shard group.
pub(super) fn run_in<'conn>(
    client: &SpiClient<'conn>,
    tables: &Tables,
    sql: &'static str,
    types: &[pg_sys::Oid],
    args: &[DatumWithOid],
    limit: Option<std::ffi::c_long>,
) -> Result<pgrx::spi::SpiTupleTable<'conn>, MxError> {
    if !tables.is_shard_group() {
        return run(client, sql, types, args, limit);
    }
    client.select(tables.sql(sql).as_str(), limit, args).map_err(MxError::spi_in("audit"))
}


/// An oid kept per backend until its relation's relcache entry is invalidated.
pub(super) type RelidCache = std::thread::LocalKey<std::cell::Cell<pg_sys::Oid>>;

/// The oid `query` reads, from `cache` when it has one.
pub(super) fn cached_relid(cache: &'static RelidCache, client: &SpiClient, query: &'static str) -> Result<pg_sys::Oid, MxError> {
    let cached = cache.with(std::cell::Cell::get);
    if cached != pg_sys::InvalidOid {
        return Ok(cached);
    }
    let oid = run(client, query, &[], &[], Some(1))?
        .first()
        .get::<pg_sys::Oid>(1)
        .map_err(MxError::spi_in("audit"))?
        .unwrap_or(pg_sys::InvalidOid);
    cache.with(|c| c.set(oid));
    Ok(oid)
}

/// Relcache callback part: forget `cache` when `relid` is its relation (InvalidOid: any).
pub(super) fn forget_relid(cache: &'static RelidCache, relid: pg_sys::Oid) {
    cache.with(|c| {
        if relid == pg_sys::InvalidOid || c.get() == relid {
            c.set(pg_sys::InvalidOid);
        }
    });
}
