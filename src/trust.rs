//! The trust boundary's low-level pieces (docs/design.md#trust-boundary): who the caller is, running fixed internal
//! statements as the extension owner, running maintenance statements as a table's owner, the
//! per-transaction tenant cache, and the governance gate that lets `memory.govern` and
//! `memory.ungovern` (and nothing else) drop memory_ext triggers.
//!
//! Identity. The *caller* is the user of the innermost running SECURITY DEFINER function (or
//! function with a SET clause) that is not one of memory_ext's own, as PostgreSQL's fmgr hook
//! reports them (`pg::identity`), else the role the session acts as (`SET ROLE` or the login).
//! So memory_ext's own SECURITY DEFINER functions still see who called them, and another role's
//! SECURITY DEFINER function that calls memory_ext acts with that role's identity, never with
//! its caller's. Exceptions, all failing closed:
//! - inside a maintenance statement that memory_ext runs as a table's owner (`AsRole`), the
//!   caller is that owner, so code of the table's owner never borrows the maintenance role's orgs;
//! - inside any other security-restricted operation (PostgreSQL runs index expressions,
//!   materialized views and the like as their owner, whoever started it) the caller is nobody;
//! - when the library was loaded in the middle of such a call (the frames below were not seen),
//!   the caller is nobody until the transaction ends; `CREATE EXTENSION` sets
//!   `session_preload_libraries` for its database so that new sessions load it at start.
//!
//! Privileged work. `AsOwner` switches to the extension owner and pins `search_path` to
//! `pg_catalog, pg_temp` for the statements memory_ext itself sends (reading keys, rules and
//! policies, writing the log): the same thing a SECURITY DEFINER function with a `SET` clause
//! does, but around a block of Rust, so triggers and functions can stay SECURITY INVOKER and run
//! the caller's part of the work with the caller's rights. Code inside must only run fixed,
//! schema-qualified SQL on memory_ext's own tables and on values of built-in types.

use crate::errors::{code, keep_sqlstate, MxError, OrRaise};
use crate::pg::{callbacks, identity};
use pgrx::prelude::*;
use std::cell::{Cell, RefCell};
use std::collections::HashMap;

thread_local! {
    // The identity a maintenance statement run as a table's owner acts as (see AsRole).
    static OVERRIDE: Cell<pg_sys::Oid> = const { Cell::new(pg_sys::InvalidOid) };
    // Delegated callers taken on (memory_internal._delegated_caller): the subtransaction each was taken
    // on in, and the override before it.
    static DELEGATED: RefCell<Vec<(pg_sys::SubTransactionId, pg_sys::Oid)>> = const { RefCell::new(Vec::new()) };
    // (caller, org) -> its clearance there (None: it may not act for the org); dropped when
    // memory.org_grants or any role changes.
    static TIERS: RefCell<HashMap<(pg_sys::Oid, String), Option<String>>> = RefCell::new(HashMap::new());
    // Tables whose memory_ext triggers memory.govern / memory.ungovern may drop in this transaction.
    static GATE: RefCell<Vec<pg_sys::Oid>> = const { RefCell::new(Vec::new()) };
}

const PINNED_PATH: &std::ffi::CStr = c"pg_catalog, pg_temp";

thread_local! {
    // The oids of schemas `memory` and `memory_internal` as last looked up (InvalidOid: not yet,
    // or not there); dropped whenever a schema changes (callbacks::on_schema_change). Every
    // governed row asks for them (the caller, the extension): two syscache lookups saved a row.
    static SCHEMAS: Cell<[pg_sys::Oid; 2]> = const { Cell::new([pg_sys::InvalidOid; 2]) };
}

/// memory_ext's schemas: `memory` (the API) and `memory_internal` (its internal functions). A
/// function in either is memory_ext's own (its frames are looked through when finding the caller).
/// A schema that is not there is looked up again at the next call.
fn our_schemas() -> [pg_sys::Oid; 2] {
    let mut s = SCHEMAS.with(Cell::get);
    if s.contains(&pg_sys::InvalidOid) {
        s = [identity::namespace_oid(c"memory"), identity::namespace_oid(c"memory_internal")];
        SCHEMAS.with(|c| c.set(s));
    }
    s
}

/// The oid of schema `memory`, which keys the caches below (they are also dropped on every
/// schema change: a re-created extension may keep the schema and its oid).
fn memory_schema() -> pg_sys::Oid {
    our_schemas()[0]
}

thread_local! {
    // (schema oid, extension owner, memory.classification, memory.org_grants)
    static EXT: Cell<(pg_sys::Oid, pg_sys::Oid, pg_sys::Oid, pg_sys::Oid)> =
        const { Cell::new((pg_sys::InvalidOid, pg_sys::InvalidOid, pg_sys::InvalidOid, pg_sys::InvalidOid)) };
}

fn ext() -> Result<(pg_sys::Oid, pg_sys::Oid, pg_sys::Oid), MxError> {
    let nsp = memory_schema();
    if nsp == pg_sys::InvalidOid {
        return Err(MxError::new(code::NOT_INSTALLED, "memory_ext is not installed in this database"));
    }
    let (cached, owner, class, grants) = EXT.with(Cell::get);
    if cached == nsp {
        return Ok((owner, class, grants));
    }
    let (owner, class, grants, version) = Spi::connect(|c| {
        let row = c
            .select(
                "SELECT e.extowner, pg_catalog.to_regtype('memory.classification')::pg_catalog.oid,
                        pg_catalog.to_regclass('memory.org_grants')::pg_catalog.oid, e.extversion
                   FROM pg_catalog.pg_extension e WHERE e.extname OPERATOR(pg_catalog.=) 'memory_ext'",
                Some(1),
                &[],
            )?
            .first();
        Ok::<_, pgrx::spi::Error>((
            row.get::<pg_sys::Oid>(1)?,
            row.get::<pg_sys::Oid>(2)?,
            row.get::<pg_sys::Oid>(3)?,
            row.get::<String>(4)?,
        ))
    })
    .map_err(|e| MxError::spi("trust", e))?;
    let owner = owner.ok_or_else(|| MxError::new(code::NOT_INSTALLED, "memory_ext is not installed in this database"))?;
    // A new library under an earlier release's SQL (a package installed, ALTER EXTENSION UPDATE
    // not yet run): nothing runs against tables that are not there yet. Not cached, so the
    // update is seen at once. (The update script itself runs with the new version recorded.)
    let library = env!("CARGO_PKG_VERSION");
    if version.as_deref() != Some(library) {
        return Err(MxError::new(
            code::NOT_INSTALLED,
            format!("this database has memory_ext {} and the library installed is {library}", version.unwrap_or_default()),
        )
        .hint("Run ALTER EXTENSION memory_ext UPDATE in this database."));
    }
    let (class, grants) = (class.unwrap_or(pg_sys::InvalidOid), grants.unwrap_or(pg_sys::InvalidOid));
    EXT.with(|c| c.set((nsp, owner, class, grants)));
    Ok((owner, class, grants))
}

/// The extension's owner.
pub fn ext_owner() -> Result<pg_sys::Oid, MxError> {
    Ok(ext()?.0)
}

/// The oid of `memory.classification`; InvalidOid when the extension is not installed.
pub fn classification_type() -> pg_sys::Oid {
    ext().map(|e| e.1).unwrap_or(pg_sys::InvalidOid)
}

/// The role memory_ext holds responsible for the current statement (see the module notes).
/// `InvalidOid` inside a security-restricted operation memory_ext did not start, and in a
/// parallel worker (which does not see the leader's SECURITY DEFINER frames; the functions that
/// answer for the caller are parallel restricted, so this is belt and braces): nobody.
pub fn caller() -> pg_sys::Oid {
    if identity::in_parallel_worker() {
        return pg_sys::InvalidOid;
    }
    let o = OVERRIDE.with(Cell::get);
    if o != pg_sys::InvalidOid {
        return o;
    }
    if identity::in_restricted_operation() {
        return pg_sys::InvalidOid;
    }
    // Inside another role's SECURITY DEFINER function (or any function with a SET clause), that
    // function's user; memory_ext's own functions are looked through.
    match identity::innermost_foreign_frame_user(&our_schemas()) {
        Err(()) => pg_sys::InvalidOid,
        Ok(Some(user)) => user,
        Ok(None) => identity::outer_user(),
    }
}

/// While alive: the extension owner, with `search_path = pg_catalog, pg_temp`.
pub struct AsOwner(#[allow(dead_code)] identity::Switched);

impl AsOwner {
    pub fn enter() -> Result<Self, MxError> {
        let owner = ext_owner()?;
        Ok(AsOwner(identity::Switched::to(owner, false, PINNED_PATH)))
    }

    /// `enter` for the audit appender, on the path of every governed write: the same pin through
    /// PostgreSQL's override search path (`identity::CatalogPath`: `pg_catalog` alone, no
    /// setting to save and restore). Only memory_ext's fixed statements on its own tables, and
    /// its own functions, may run inside: a function's SET search_path does not apply there.
    pub fn enter_for_appends() -> Result<Self, MxError> {
        let owner = ext_owner()?;
        Ok(AsOwner(identity::Switched::to_catalog_path(owner)))
    }
}


/// Run `f` as the extension owner with the pinned search_path.
pub fn as_owner<R>(f: impl FnOnce() -> Result<R, MxError>) -> Result<R, MxError> {
    let _g = AsOwner::enter()?;
    f()
}

/// While alive: `role` (a table's owner, or the caller itself), in a security-restricted
/// operation (no SET ROLE, no temporary objects), with the pinned search_path; memory_ext holds
/// that role responsible (`caller()`), so whatever code of the table runs meanwhile (its
/// triggers, casts, column types) acts for that role's orgs and nobody else's.
pub struct AsRole {
    _switched: identity::Switched,
    prev_override: pg_sys::Oid,
}

impl AsRole {
    pub fn enter(role: pg_sys::Oid) -> Self {
        // The audit appender's override search path would hold for that role's code too, its
        // functions' own SET search_path ignored: a table owner's code never runs inside it.
        if identity::catalog_path_active() {
            MxError::new(code::INTERNAL, "memory_ext would run a table owner's code inside the audit appender").raise();
        }
        let switched = identity::Switched::to(role, true, PINNED_PATH);
        let prev_override = OVERRIDE.with(|c| c.replace(role));
        AsRole { _switched: switched, prev_override }
    }

    /// As the owner of `relid`.
    pub fn table_owner(relid: pg_sys::Oid) -> Result<Self, MxError> {
        Ok(Self::enter(rel_owner(relid)?))
    }
}

impl Drop for AsRole {
    fn drop(&mut self) {
        OVERRIDE.with(|c| c.set(self.prev_override));
    }
}

fn rel_owner(relid: pg_sys::Oid) -> Result<pg_sys::Oid, MxError> {
    // No row: the relation does not exist.
    crate::pg::spi::read_one::<pg_sys::Oid>("SELECT c.relowner FROM pg_catalog.pg_class c WHERE c.oid OPERATOR(pg_catalog.=) $1", &[relid.into()])
        .map_err(|e| MxError::spi("trust", e))?
    .ok_or_else(|| MxError::new(code::UNDEFINED_TABLE, format!("relation with oid {} does not exist", relid.to_u32())))
}

/// Whether the caller may act for `org` (`None` or `''`: the platform chain): it has a
/// clearance there (`clearance`, cached per caller and org).
pub fn may_act_for(org: Option<&str>) -> Result<bool, MxError> {
    Ok(clearance(org)?.is_some())
}

/// The caller's clearance in `org`: the most sensitive tier it reads there (a
/// `memory.classification` label), None when it may not act for the org
/// (`memory_internal._max_tier_role` is NULL exactly when `_may_act_for_role` is false). Asked
/// once per caller and org until the grants or roles change, under a snapshot taken then: a grant
/// revoked by another session is never re-read from an older snapshot into the cache
/// (spi::read_latest).
pub fn clearance(org: Option<&str>) -> Result<Option<String>, MxError> {
    let who = caller();
    if who == pg_sys::InvalidOid {
        return Ok(None);
    }
    if identity::is_superuser(who) || identity::has_privs_of_role(who, ext_owner()?) {
        return Ok(Some("restricted".into()));
    }
    let key = (who, org.unwrap_or("").to_string());
    if let Some(v) = TIERS.with(|m| m.borrow().get(&key).cloned()) {
        return Ok(v);
    }
    let fill = callbacks::Fill::begin();
    let v = as_owner(|| {
        Spi::connect(|client| {
            let r = crate::pg::spi::read_latest(
                client,
                c"SELECT memory_internal._max_tier_role($1, $2)::pg_catalog.text",
                &[who.into(), org.unwrap_or("").into()],
            )?;
            if r.len() == 0 {
                return Ok(None);
            }
            r.get::<String>(0, 1)
        })
    })?;
    if fill.keep() {
        TIERS.with(|m| m.borrow_mut().insert(key, v.clone()));
    }
    Ok(v)
}

/// `Err(42501)` unless the caller may act for `org` (and for the org the setting `memory.org_id`
/// names: `require_org_setting`).
pub fn require_org(org: Option<&str>) -> Result<(), MxError> {
    require_org_setting()?;
    if may_act_for(org)? {
        return Ok(());
    }
    Err(MxError::new(
        code::NO_PRIVILEGE,
        match org.filter(|o| !o.is_empty()) {
            Some(o) => format!("role {} may not act for org \"{o}\"", role_name(caller())),
            None => format!("role {} may not write the platform chain", role_name(caller())),
        },
    )
    .hint("An owner or a memory_admin of the org binds roles to it with memory.grant_org(role, org_id)."))
}

/// `Err(42501)` when the setting `memory.org_id` names an org the caller may not act for: the
/// session's first memory_ext call answers that, whatever org its arguments or rows name, never
/// a silent or substituted org (docs/security.md). Not asked inside a statement memory_ext runs as
/// another role (`AsRole`: a table's owner for maintenance, or a delegated call), whose setting
/// is the session's, checked for the session's role at the call that started it.
pub fn require_org_setting() -> Result<(), MxError> {
    if OVERRIDE.with(Cell::get) != pg_sys::InvalidOid {
        return Ok(());
    }
    let Some(setting) = crate::gucs::ORG_ID.get() else { return Ok(()) };
    let org = setting.to_string_lossy();
    if org.is_empty() || may_act_for(Some(&org))? {
        return Ok(());
    }
    Err(MxError::new(code::NO_PRIVILEGE, format!("role {} may not act for org \"{org}\" (memory.org_id)", role_name(caller())))
        .hint("Set memory.org_id to one of memory.my_orgs(), or have an org admin bind the role with memory.grant_org(role, org)."))
}

pub fn role_name(oid: pg_sys::Oid) -> String {
    if oid == pg_sys::InvalidOid {
        return "(unknown: inside a security-restricted operation, or memory_ext loaded in the middle of a SECURITY DEFINER call; \
                its database sets session_preload_libraries = memory_ext for new sessions)"
            .into();
    }
    identity::role_name(oid).unwrap_or_else(|| format!("oid {}", oid.to_u32()))
}

/// Whether memory.govern / memory.ungovern opened the gate for `relid` in this transaction.
pub fn gate_open(relid: pg_sys::Oid) -> bool {
    GATE.with(|g| g.borrow().contains(&relid))
}

fn transaction_end() {
    identity::reset_frames();
    identity::catalog_paths_ended();
    GATE.with(|g| g.borrow_mut().clear());
    OVERRIDE.with(|c| c.set(pg_sys::InvalidOid));
    DELEGATED.with(|d| d.borrow_mut().clear());
}

fn forget_orgs() {
    TIERS.with(|m| m.borrow_mut().clear());
}

fn relcache(relid: pg_sys::Oid) {
    let grants = EXT.with(Cell::get).3;
    if relid == pg_sys::InvalidOid || relid == grants {
        forget_orgs();
    }
}

pub fn init() {
    identity::install_frame_hook();
    callbacks::on_transaction_end(transaction_end);
    // An error caught inside govern/ungovern must not leave their gate open.
    callbacks::on_subtransaction_abort(|| GATE.with(|g| g.borrow_mut().clear()));
    callbacks::on_subtransaction_abort(delegations_aborted);
    callbacks::on_subtransaction_abort(identity::catalog_paths_aborted);
    callbacks::on_relcache(relcache);
    // A schema change also drops what ext() read and the clearances: DROP EXTENSION leaves schema
    // memory (CREATE EXTENSION made it before the extension existed) but drops memory_internal,
    // so a re-created extension has new tables, types and perhaps another owner under the same
    // memory oid that keys ext().
    callbacks::on_schema_change(|| {
        SCHEMAS.with(|c| c.set([pg_sys::InvalidOid; 2]));
        forget_extension();
    });
    // A role change also drops the extension owner read from pg_extension (REASSIGN OWNED and
    // the DROP ROLE after it).
    callbacks::on_role_change(forget_extension);
}

/// Drops what ext() read from pg_extension and the clearances read under it.
fn forget_extension() {
    EXT.with(|c| c.set((pg_sys::InvalidOid, pg_sys::InvalidOid, pg_sys::InvalidOid, pg_sys::InvalidOid)));
    forget_orgs();
}

// ---------------------------------------------------------------------------------------------
// SQL functions.

/// The role memory_ext holds responsible (see `caller`); NULL inside a security-restricted
/// operation memory_ext did not start.
/// The name of the innermost running frame's function when it is a memory_ext function, skipping
/// frames of `except` (the asking function's own); None when it is another schema's function,
/// when nothing runs in a frame, or when the frames are unknown.
pub fn innermost_memory_function_except(except: &str) -> Option<String> {
    let ours = our_schemas();
    for func in identity::frame_functions().ok()? {
        let (nsp, name) = identity::function_namespace_and_name(func);
        let mine = nsp != pg_sys::InvalidOid && ours.contains(&nsp);
        if mine && name == except {
            continue;
        }
        return mine.then_some(name);
    }
    None
}

/// `memory_internal._delegated_caller(role)`: in a function Citus runs on a worker for memory_ext (a
/// delegated call, as the definer), the role the coordinator held responsible, by name (oids
/// differ between nodes): caller() answers it until NULL is given (back to the caller before
/// it), the subtransaction it was given in aborts, or the transaction ends. Not granted to
/// PUBLIC: only memory_ext's own delegated functions set it, from the coordinator's caller().
#[pg_extern(volatile, schema = "memory_internal", name = "_delegated_caller")]
fn delegated_caller(role: Option<&str>) -> bool {
    let oid = match role {
        None => pg_sys::InvalidOid,
        Some(r) => {
            let o = identity::role_oid(r);
            if o == pg_sys::InvalidOid {
                MxError::new(code::NO_PRIVILEGE, format!("role \"{r}\" does not exist on this node")).raise();
            }
            o
        }
    };
    if oid == pg_sys::InvalidOid {
        // The end of the latest delegation: the caller as it was before it.
        if let Some((_, prev)) = DELEGATED.with(|d| d.borrow_mut().pop()) {
            OVERRIDE.with(|c| c.set(prev));
        }
    } else {
        let prev = OVERRIDE.with(|c| c.replace(oid));
        DELEGATED.with(|d| d.borrow_mut().push((callbacks::current_subtransaction(), prev)));
    }
    true
}

/// A subtransaction aborted (an error caught inside or around a delegated call): the
/// delegations it began end with it, and the caller is again what it was before them.
fn delegations_aborted() {
    let aborted = callbacks::aborting_subtransaction();
    DELEGATED.with(|d| {
        let mut d = d.borrow_mut();
        let mut restore = None;
        while d.last().is_some_and(|&(sub, _)| sub >= aborted) {
            restore = d.pop().map(|(_, prev)| prev);
        }
        if let Some(prev) = restore {
            OVERRIDE.with(|c| c.set(prev));
        }
    });
}

#[pg_extern(stable, parallel_restricted, schema = "memory_internal", name = "_caller")]
fn caller_sql() -> Option<pg_sys::Oid> {
    let c = caller();
    (c != pg_sys::InvalidOid).then_some(c)
}

/// Whether the caller may act for `org` (NULL or '': the platform chain, which only unrestricted
/// roles and '*' roles write). About the caller only, so open to every role: the row-level
/// security policies ask it, memory_ext's functions check their org arguments with it. Cached per
/// caller and org until memory.org_grants or a role changes (`may_act_for`).
#[pg_extern(stable, parallel_restricted, schema = "memory_internal", name = "_may_act_for")]
fn may_act_for_sql(org: Option<&str>) -> bool {
    may_act_for(org).or_raise()
}

/// The caller's clearance in `org` as a `memory.classification` label; NULL when it may not act
/// for the org. Cached as `_may_act_for` is.
#[pg_extern(stable, parallel_restricted, schema = "memory_internal", name = "_clearance")]
fn clearance_sql(org: Option<&str>) -> Option<String> {
    clearance(org).or_raise()
}

/// `memory_internal._blank(t)`: whether a text argument is missing: NULL, empty, or only white
/// space (Unicode `White_Space`: spaces, tabs, line and paragraph separators). Immutable and
/// resolving no name, so it needs no pinned search_path; in Rust because a SQL function with a
/// pinned path is planned anew on every call (it guards every text argument of the API).
#[pg_extern(immutable, parallel_safe, schema = "memory_internal", name = "_blank")]
fn blank(t: Option<&str>) -> bool {
    t.is_none_or(|s| s.chars().all(char::is_whitespace))
}

/// Lets memory.govern / memory.ungovern drop and re-create memory_ext triggers of `tbl` in this
/// transaction. Only a role that owns the table (or the extension owner, or a superuser) opens it.
#[pg_extern(volatile, schema = "memory_internal", name = "_open_governance_gate")]
fn open_governance_gate(tbl: Option<pg_sys::Oid>) -> bool {
    let Some(tbl) = tbl else { MxError::bad_argument("a table is needed").raise() };
    let ok = (|| -> Result<bool, MxError> {
        let owner = rel_owner(tbl)?;
        let who = caller();
        Ok(who != pg_sys::InvalidOid
            && (identity::is_superuser(who) || identity::has_privs_of_role(who, owner) || identity::has_privs_of_role(who, ext_owner()?)))
    })()
    .or_raise();
    if !ok {
        MxError::new(code::NO_PRIVILEGE, format!("role {} does not own the table", role_name(caller())))
            .hint("Only the owner of a table governs or ungoverns it.")
            .raise();
    }
    GATE.with(|g| {
        if !g.borrow().contains(&tbl) {
            g.borrow_mut().push(tbl);
        }
    });
    true
}

/// Closes the gate memory.govern / memory.ungovern opened (they call it before returning).
#[pg_extern(volatile, schema = "memory_internal", name = "_close_governance_gate")]
fn close_governance_gate() -> bool {
    GATE.with(|g| g.borrow_mut().clear());
    true
}

#[pg_extern(stable, schema = "memory_internal", name = "_governance_gate_open")]
fn governance_gate_open(tbl: pg_sys::Oid) -> bool {
    gate_open(tbl)
}

/// Runs one statement of memory_ext's maintenance on an application table as the table's owner
/// (see `AsRole`): `sql` with `args` as text parameters `$1..`. Returns the first column of the
/// first row (jsonb) when the statement returns rows, else `{"processed": n}`. Not granted to
/// PUBLIC: only memory_ext's own functions send it statements.
#[pg_extern(volatile, schema = "memory_internal", name = "_exec_as_table_owner")]
fn exec_as_table_owner(tbl: pg_sys::Oid, sql: &str, args: default!(Vec<Option<String>>, "'{}'")) -> pgrx::JsonB {
    keep_sqlstate(move || {
        let _g = AsRole::table_owner(tbl)?;
        exec(sql, &args)
    })
    .or_raise()
}

/// Runs one statement on the caller's own table as the caller, in a security-restricted
/// operation: how memory.govern / memory.ungovern (SECURITY DEFINER, for the closed registry and
/// the gate) change the caller's table without lending it the owner's rights. Returns the rows
/// processed. Not granted to PUBLIC.
#[pg_extern(volatile, schema = "memory_internal", name = "_exec_as_caller")]
fn exec_as_caller(sql: &str) -> i64 {
    keep_sqlstate(move || {
        let who = caller();
        if who == pg_sys::InvalidOid {
            return Err(MxError::new(code::NO_PRIVILEGE, "no caller inside a security-restricted operation"));
        }
        let _g = AsRole::enter(who);
        let v = exec(sql, &[])?;
        Ok(v.0.get("processed").and_then(serde_json::Value::as_i64).unwrap_or(0))
    })
    .or_raise()
}

/// Runs one read on a table as the caller, in a security-restricted operation (see `AsRole`):
/// `sql` with `args` as text parameters `$1..`, returning the first column of the first row
/// (jsonb; NULL when no row). How memory.recall (SECURITY DEFINER, for the audit event) reads a
/// governed application table with the caller's own privileges and policies, never its owner's
/// or the extension owner's. Not granted to PUBLIC: only memory_ext's own functions send it
/// statements.
#[pg_extern(volatile, schema = "memory_internal", name = "_read_as_caller")]
fn read_as_caller(sql: &str, args: default!(Vec<Option<String>>, "'{}'")) -> Option<pgrx::JsonB> {
    keep_sqlstate(move || {
        let who = caller();
        if who == pg_sys::InvalidOid {
            return Err(MxError::new(code::NO_PRIVILEGE, "no caller inside a security-restricted operation"));
        }
        let _g = AsRole::enter(who);
        let params: Vec<pgrx::datum::DatumWithOid> = args.iter().map(|a| a.clone().into()).collect();
        Spi::connect(|client| {
            let t = client.select(sql, Some(1), &params).map_err(|e| MxError::spi("recall", e))?;
            if t.is_empty() {
                return Ok(None);
            }
            t.first().get::<pgrx::JsonB>(1).map_err(|e| MxError::spi("recall", e))
        })
    })
    .or_raise()
}

/// Runs one statement that changes a table as the caller, in a security-restricted operation
/// (see `AsRole`): `sql` with `args` as text parameters `$1..`, returning the first column of the
/// first row (jsonb) when it returns rows, else `{"processed": n}`. How memory.forget (SECURITY
/// DEFINER, for the audit event) deletes rows of a governed application table with the caller's
/// own privileges and row-level security policies, as the caller's own DELETE would. Not granted
/// to PUBLIC: only memory_ext's own functions send it statements.
#[pg_extern(volatile, schema = "memory_internal", name = "_write_as_caller")]
fn write_as_caller(sql: &str, args: default!(Vec<Option<String>>, "'{}'")) -> pgrx::JsonB {
    keep_sqlstate(move || {
        let who = caller();
        if who == pg_sys::InvalidOid {
            return Err(MxError::new(code::NO_PRIVILEGE, "no caller inside a security-restricted operation"));
        }
        let _g = AsRole::enter(who);
        exec(sql, &args)
    })
    .or_raise()
}

/// `memory_internal._check_org_setting()`: 42501 when the setting `memory.org_id` names an org the
/// caller may not act for (`require_org_setting`); true otherwise. memory_internal._require_org
/// asks it first, so every function that checks an org argument refuses such a session too.
#[pg_extern(stable, parallel_restricted, schema = "memory_internal", name = "_check_org_setting")]
fn check_org_setting() -> bool {
    require_org_setting().or_raise();
    true
}

fn exec(sql: &str, args: &[Option<String>]) -> Result<pgrx::JsonB, MxError> {
    let params: Vec<pgrx::datum::DatumWithOid> = args.iter().map(|a| a.clone().into()).collect();
    Spi::connect_mut(|client| {
        let t = client.update(sql, None, &params).map_err(|e| MxError::spi("maintenance", e))?;
        let n = t.len();
        if t.columns().unwrap_or(0) > 0 && n > 0 {
            let v: Option<pgrx::JsonB> = t.first().get(1).map_err(|e| MxError::spi("maintenance", e))?;
            Ok(v.unwrap_or(pgrx::JsonB(serde_json::Value::Null)))
        } else {
            Ok(pgrx::JsonB(serde_json::json!({ "processed": n })))
        }
    })
}
