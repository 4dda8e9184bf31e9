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
    /// The GUC nest level opened for search_path (-1: the path already was `path`).
    nest: c_int,
}

impl Switched {
    pub fn to(user: pg_sys::Oid, restricted: bool, path: &CStr) -> Switched {
        let extra = if restricted { pg_sys::SECURITY_RESTRICTED_OPERATION } else { 0 };
        let (mut u, mut ctx) = (pg_sys::InvalidOid, 0 as c_int);
        // SAFETY: GetUserIdAndSecContext writes two plain values; NewGUCNestLevel and
        // set_config_option are what fmgr does for a function's SET clause, undone in Drop by
        // AtEOXact_GUC at the same level; SetUserIdAndSecContext sets two backend globals.
        unsafe {
            pg_sys::GetUserIdAndSecContext(&mut u, &mut ctx);
            let nest = if search_path_is(path) {
                -1
            } else {
                let nest = pg_sys::NewGUCNestLevel();
                pg_sys::set_config_option(
                    c"search_path".as_ptr(),
                    path.as_ptr(),
                    pg_sys::GucContext::PGC_USERSET as _,
                    pg_sys::GucSource::PGC_S_SESSION as _,
                    pg_sys::GucAction::GUC_ACTION_SAVE as _,
                    true,
                    0,
                    false,
                );
                nest
            };
            pg_sys::SetUserIdAndSecContext(user, ctx | (pg_sys::SECURITY_LOCAL_USERID_CHANGE | extra) as c_int);
            Switched { user: u, ctx, nest }
        }
    }
}

impl Drop for Switched {
    fn drop(&mut self) {
        if std::thread::panicking() {
            return;
        }
        // SAFETY: undoes `to` in reverse order with the values it saved.
        unsafe {
            pg_sys::SetUserIdAndSecContext(self.user, self.ctx);
            if self.nest >= 0 {
                pg_sys::AtEOXact_GUC(true, self.nest);
            }
        }
    }
}
