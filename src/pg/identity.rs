//! Who runs: the session's role, security-restricted operations, switching the current user and
//! search_path for a block of code (what fmgr does for a SECURITY DEFINER function with a SET
//! clause), role lookups.

use pgrx::prelude::*;
use std::ffi::{c_int, CStr};

/// The role the session acts as (`SET ROLE` or the login); SECURITY DEFINER functions do not
/// change it.
pub fn outer_user() -> pg_sys::Oid {
    // SAFETY: reads a backend global.
    unsafe { pg_sys::GetOuterUserId() }
}

/// Whether PostgreSQL (or memory_ext) runs code as an object's owner in a security-restricted
/// operation right now.
pub fn in_restricted_operation() -> bool {
    // SAFETY: reads a backend global.
    unsafe { pg_sys::InSecurityRestrictedOperation() }
}

/// Whether this process is a parallel worker. A worker does not see the leader's function frames
/// (the SECURITY DEFINER functions memory_ext tracks), so it cannot know the caller.
pub fn in_parallel_worker() -> bool {
    // SAFETY: reads a backend global (-1 in a leader or a plain backend).
    unsafe { pg_sys::ParallelWorkerNumber >= 0 }
}

/// Whether the session's `application_name` is `name` (pg_restore names itself so).
pub fn application_name_is(name: &str) -> bool {
    // SAFETY: reads the GUC's backend global, a NUL-terminated string or NULL.
    let p = unsafe { pg_sys::application_name };
    !p.is_null() && unsafe { std::ffi::CStr::from_ptr(p) }.to_bytes() == name.as_bytes()
}

pub fn is_superuser(role: pg_sys::Oid) -> bool {
    // SAFETY: a syscache lookup of a plain oid.
    unsafe { pg_sys::superuser_arg(role) }
}

/// Whether `member` has the privileges of `role` (inherits it), as PostgreSQL checks them.
pub fn has_privs_of_role(member: pg_sys::Oid, role: pg_sys::Oid) -> bool {
    // SAFETY: a membership check of plain oids (PostgreSQL caches the answer).
    unsafe { pg_sys::has_privs_of_role(member, role) }
}

pub fn role_name(oid: pg_sys::Oid) -> Option<String> {
    // SAFETY: a syscache lookup; the name is copied before anything else runs.
    unsafe {
        let n = pg_sys::GetUserNameFromId(oid, true);
        (!n.is_null()).then(|| CStr::from_ptr(n).to_string_lossy().into_owned())
    }
}

/// The oid of the role named `name`, InvalidOid when there is none.
pub fn role_oid(name: &str) -> pg_sys::Oid {
    let Ok(c) = std::ffi::CString::new(name) else { return pg_sys::InvalidOid };
    // SAFETY: a syscache lookup by a NUL-terminated name; no pointers are kept.
    unsafe { pg_sys::get_role_oid(c.as_ptr(), true) }
}

/// The oid of a schema, InvalidOid when there is none.
pub fn namespace_oid(name: &CStr) -> pg_sys::Oid {
    // SAFETY: a syscache lookup by a NUL-terminated name; no pointers are kept.
    unsafe { pg_sys::get_namespace_oid(name.as_ptr(), true) }
}

/// Whether search_path currently is `path` exactly.
fn search_path_is(path: &CStr) -> bool {
    // SAFETY: namespace_search_path is the GUC's current string, not freed while we read it.
    unsafe {
        let p = pg_sys::namespace_search_path;
        !p.is_null() && CStr::from_ptr(p) == path
    }
}

/// While alive: another current user (optionally in a security-restricted operation) and a
/// given search_path. Dropping it restores both; an error unwinding past it leaves that to the
/// (sub)transaction abort, which restores them itself.
pub struct Switched {
    user: pg_sys::Oid,
    ctx: c_int,
    /// search_path set for the switch (None: the path already was `path`); restored after the
    /// user, when this field drops.
    _path: Option<LocalSetting>,
    /// Or the override search path of `to_catalog_path`.
    _catalog: Option<CatalogPath>,
}

impl Switched {
    pub fn to(user: pg_sys::Oid, restricted: bool, path: &CStr) -> Switched {
        let path = (!search_path_is(path)).then(|| LocalSetting::set(c"search_path", path));
        let (u, ctx) = switch_user(user, restricted);
        Switched { user: u, ctx, _path: path, _catalog: None }
    }

    /// `to(user, false, "pg_catalog, pg_temp")` for code that runs only memory_ext's own fixed
    /// statements: the path through `CatalogPath`.
    pub fn to_catalog_path(user: pg_sys::Oid) -> Switched {
        let catalog = CatalogPath::push();
        let (u, ctx) = switch_user(user, false);
        Switched { user: u, ctx, _path: None, _catalog: Some(catalog) }
    }
}

/// Makes `user` the current user (in a security-restricted operation when `restricted`); returns
/// the user and security context before, which `Switched`'s Drop restores.
fn switch_user(user: pg_sys::Oid, restricted: bool) -> (pg_sys::Oid, c_int) {
    let extra = if restricted { pg_sys::SECURITY_RESTRICTED_OPERATION } else { 0 };
    let (mut u, mut ctx) = (pg_sys::InvalidOid, 0 as c_int);
    // SAFETY: GetUserIdAndSecContext writes two plain values; SetUserIdAndSecContext sets two
    // backend globals, undone in Switched's Drop.
    unsafe {
        pg_sys::GetUserIdAndSecContext(&mut u, &mut ctx);
        pg_sys::SetUserIdAndSecContext(user, ctx | (pg_sys::SECURITY_LOCAL_USERID_CHANGE | extra) as c_int);
    }
    (u, ctx)
}

/// While alive: name lookups search `pg_catalog` alone (no temporary schema, nothing of the
/// caller's search_path), through PostgreSQL's override search path rather than a setting. For
/// statements that name every relation with its schema this is what `search_path = pg_catalog,
/// pg_temp` gives them, at a fraction of the cost on the path of every governed write: pushing
/// and popping an override is a list operation, while leaving a setting's nest level walks every
/// setting (PostgreSQL 15). Functions called meanwhile search the same path whatever their own
/// SET clause says (memory_ext's own functions pin that path too), so only memory_ext's fixed
/// statements may run inside. PostgreSQL 17 and later have no override search path; there it is the
/// setting (cfg `pg_override_search_path`, build.rs).
pub struct CatalogPath {
    #[cfg(not(pg_override_search_path))]
    _setting: LocalSetting,
}

thread_local! {
    // The transaction nest level of each CatalogPath alive, innermost last: a pop must come at
    // the level of its push, and nothing may switch to another role's code while one is alive
    // (`catalog_path_active`). An abort drops the entries of the levels it ends.
    static CATALOG_LEVELS: RefCell<Vec<c_int>> = const { RefCell::new(Vec::new()) };
}

fn nest_level() -> c_int {
    // SAFETY: reads the backend's transaction state.
    unsafe { pg_sys::GetCurrentTransactionNestLevel() }
}

/// Whether a `CatalogPath` is alive: code of another role (a table owner's, through `AsRole`)
/// must never run inside one, where its functions' own SET search_path would not apply.
pub fn catalog_path_active() -> bool {
    CATALOG_LEVELS.with(|l| !l.borrow().is_empty())
}

/// At a subtransaction's abort: forget the `CatalogPath`s of the levels it ends (PostgreSQL pops
/// their overrides itself).
pub fn catalog_paths_aborted() {
    let level = nest_level();
    CATALOG_LEVELS.with(|l| l.borrow_mut().retain(|&k| k < level));
}

/// At a transaction's end: no `CatalogPath` is alive any more.
pub fn catalog_paths_ended() {
    CATALOG_LEVELS.with(|l| l.borrow_mut().clear());
}

impl CatalogPath {
    pub fn push() -> CatalogPath {
        CATALOG_LEVELS.with(|l| l.borrow_mut().push(nest_level()));
        // SAFETY: PushOverrideSearchPath copies the list (into TopMemoryContext) before it
        // returns, and the list made here is freed after; the override is popped in Drop at the
        // same transaction nest level (nothing here begins or ends a subtransaction while one
        // is alive, and an abort pops it itself).
        #[cfg(pg_override_search_path)]
        unsafe {
            let schemas = pg_sys::lappend_oid(std::ptr::null_mut(), pg_sys::Oid::from(pg_sys::PG_CATALOG_NAMESPACE));
            let mut path = pg_sys::OverrideSearchPath { schemas, addCatalog: false, addTemp: false, generation: 0 };
            pg_sys::PushOverrideSearchPath(&mut path);
            pg_sys::list_free(schemas);
        }
        CatalogPath {
            #[cfg(not(pg_override_search_path))]
            _setting: LocalSetting::set(c"search_path", c"pg_catalog, pg_temp"),
        }
    }
}

impl Drop for CatalogPath {
    fn drop(&mut self) {
        // An error unwinding past it leaves the pop to the (sub)transaction abort.
        if std::thread::panicking() {
            return;
        }
        let pushed = CATALOG_LEVELS.with(|l| l.borrow_mut().pop());
        // Pushed and popped within one Rust call that neither begins nor ends a subtransaction:
        // PostgreSQL refuses (ERROR) a pop at another level; a debug build says where.
        debug_assert_eq!(pushed, Some(nest_level()), "a CatalogPath dropped at another transaction nest level");
        // SAFETY: pops the override `push` pushed (PostgreSQL checks the nest level).
        #[cfg(pg_override_search_path)]
        unsafe {
            pg_sys::PopOverrideSearchPath()
        };
    }
}

/// While alive: a setting changed for this backend, as a function's SET clause changes it; the
/// previous value comes back on drop. Values are dropped in the reverse order of their making
/// (a `LocalSetting` made after a `Switched` is dropped before it).
pub struct LocalSetting {
    nest: c_int,
}

impl LocalSetting {
    pub fn set(name: &CStr, value: &CStr) -> LocalSetting {
        // SAFETY: what fmgr does for a function's SET clause, undone in Drop at the same level.
        let nest = unsafe { pg_sys::NewGUCNestLevel() };
        set_option(name, value, pg_sys::GucContext::PGC_USERSET, pg_sys::GucAction::GUC_ACTION_SAVE);
        LocalSetting { nest }
    }
}

/// Sets a setting for the rest of the session, as `SET` does (no SQL is parsed or run).
pub fn set_for_session(name: &CStr, value: &CStr) {
    set_option(name, value, pg_sys::GucContext::PGC_SUSET, pg_sys::GucAction::GUC_ACTION_SET);
}

/// set_config_option at session source, raising on a bad value.
fn set_option(name: &CStr, value: &CStr, context: pg_sys::GucContext::Type, action: pg_sys::GucAction::Type) {
    // SAFETY: plain C strings; called inside a transaction (the assign hooks may read catalogs).
    unsafe {
        pg_sys::set_config_option(
            name.as_ptr(),
            value.as_ptr(),
            context as _,
            pg_sys::GucSource::PGC_S_SESSION as _,
            action as _,
            true,
            0,
            false,
        );
    }
}

impl Drop for LocalSetting {
    fn drop(&mut self) {
        if std::thread::panicking() {
            return;
        }
        // SAFETY: pops the level `set` pushed.
        unsafe { pg_sys::AtEOXact_GUC(true, self.nest) };
    }
}

impl Drop for Switched {
    fn drop(&mut self) {
        if std::thread::panicking() {
            return;
        }
        // SAFETY: restores the user and context `to` saved; search_path follows when `_path` drops.
        unsafe { pg_sys::SetUserIdAndSecContext(self.user, self.ctx) };
    }
}

// ---------------------------------------------------------------------------------------------
// Who called: a stack of the functions PostgreSQL runs through fmgr_security_definer (every
// SECURITY DEFINER function and every function with a SET clause), each with the user it runs
// as. memory_ext's caller is the user of the innermost frame that is not one of memory_ext's own
// functions, or the session's role when there is none: so a SECURITY DEFINER function of another
// role that calls memory_ext acts with that role's identity, never its caller's.

use std::cell::{Cell, RefCell};

#[derive(Clone, Copy)]
struct Frame {
    func: pg_sys::Oid,
    user: pg_sys::Oid,
}

thread_local! {
    static FRAMES: RefCell<Vec<Frame>> = const { RefCell::new(Vec::new()) };
    // The library was loaded while such frames were already running (they were not seen): until
    // the transaction ends, the caller is unknown, and memory_ext treats it as nobody.
    static LOADED_LATE: Cell<bool> = const { Cell::new(false) };
    static PREV_FMGR_HOOK: Cell<pg_sys::fmgr_hook_type> = const { Cell::new(None) };
}

/// # Safety
/// Called by PostgreSQL's fmgr_security_definer around a function call, on the backend thread,
/// with the function's FmgrInfo.
#[pg_guard]
unsafe extern "C-unwind" fn fmgr_hook(event: pg_sys::FmgrHookEventType::Type, flinfo: *mut pg_sys::FmgrInfo, arg: *mut pg_sys::Datum) {
    if let Some(prev) = PREV_FMGR_HOOK.with(Cell::get) {
        // SAFETY: the previous hook, with the arguments PostgreSQL gave us.
        unsafe { prev(event, flinfo, arg) };
    }
    match event {
        pg_sys::FmgrHookEventType::FHET_START => {
            // SAFETY: flinfo is the FmgrInfo of the function being called; GetUserId reads a global.
            let frame = Frame { func: unsafe { (*flinfo).fn_oid }, user: unsafe { pg_sys::GetUserId() } };
            FRAMES.with(|f| f.borrow_mut().push(frame));
        }
        _ => {
            FRAMES.with(|f| {
                f.borrow_mut().pop();
            });
        }
    }
}

/// Installs the frame hook (chained after any earlier one); called once from `_PG_init`. When the
/// library is loaded inside a running SECURITY DEFINER function or security-restricted operation,
/// the frames below are unknown for the rest of the transaction.
pub fn install_frame_hook() {
    // SAFETY: reads and replaces the global hook pointer once, at library load, keeping the
    // previous one to chain to.
    unsafe {
        PREV_FMGR_HOOK.with(|c| c.set(pg_sys::fmgr_hook));
        pg_sys::fmgr_hook = Some(fmgr_hook);
        if pg_sys::InLocalUserIdChange() || pg_sys::InSecurityRestrictedOperation() {
            LOADED_LATE.with(|c| c.set(true));
        }
    }
}

/// At transaction end every frame has returned.
pub fn reset_frames() {
    FRAMES.with(|f| f.borrow_mut().clear());
    LOADED_LATE.with(|c| c.set(false));
}

/// The user of the innermost running frame whose function is not in one of the schemas `ours`; None when
/// there is none; Err(()) when the frames are unknown (library loaded late in this transaction).
/// The functions of the running frames (SECURITY DEFINER or SET-clause functions), innermost
/// first; `Err` when the frames are unknown (the library was loaded late).
pub fn frame_functions() -> Result<Vec<pg_sys::Oid>, ()> {
    if LOADED_LATE.with(Cell::get) {
        return Err(());
    }
    Ok(FRAMES.with(|f| f.borrow().iter().rev().map(|fr| fr.func).collect()))
}

/// A function's schema and name (syscache lookups; an unknown oid gives InvalidOid and "").
pub fn function_namespace_and_name(func: pg_sys::Oid) -> (pg_sys::Oid, String) {
    // SAFETY: syscache lookups of a function oid; get_func_name returns a palloc'd copy or NULL.
    unsafe {
        let n = pg_sys::get_func_name(func);
        let name = if n.is_null() { String::new() } else { std::ffi::CStr::from_ptr(n).to_string_lossy().into_owned() };
        (pg_sys::get_func_namespace(func), name)
    }
}

pub fn innermost_foreign_frame_user(ours: &[pg_sys::Oid]) -> Result<Option<pg_sys::Oid>, ()> {
    if LOADED_LATE.with(Cell::get) {
        return Err(());
    }
    let frames: Vec<Frame> = FRAMES.with(|f| f.borrow().clone());
    for fr in frames.iter().rev() {
        // SAFETY: a syscache lookup of a function oid.
        let nsp = unsafe { pg_sys::get_func_namespace(fr.func) };
        if nsp == pg_sys::InvalidOid || !ours.contains(&nsp) {
            return Ok(Some(fr.user));
        }
    }
    Ok(None)
}
