//! Trigger functions called the wrong way: a C trigger function called directly from SQL (not by
//! the trigger manager) answers `39P01`, as PL/pgSQL trigger functions do, instead of pgrx's
//! wrapper failing with an internal error. Each trigger's SQL entry point is a checked entry
//! made by `checked_trigger_entry!`, which calls pgrx's wrapper only for a real trigger call.

use super::error::{code, MxError};
use pgrx::prelude::*;

/// Raises `39P01` unless `fcinfo` is a call by the trigger manager.
///
/// # Safety
/// `fcinfo` is the call info PostgreSQL passed to a version-1 C function, and no Rust value with
/// a destructor is alive in the caller (the error longjmps to PostgreSQL's handler).
pub unsafe fn require_trigger_call(fcinfo: pg_sys::FunctionCallInfo, name: &str) {
    // SAFETY: fcinfo is valid per the contract; context, when set, points at a Node.
    let is_trigger = unsafe {
        !fcinfo.is_null() && !(*fcinfo).context.is_null() && (*(*fcinfo).context).type_ == pg_sys::NodeTag::T_TriggerData
    };
    if !is_trigger {
        MxError::new(code::TRIGGER_PROTOCOL, format!("{name} can only be called as a trigger"))
            .hint("memory.govern attaches memory_ext's triggers to a table.")
            .raise();
    }
}

/// `checked_trigger_entry!(entry, finfo, "memory.name()", pgrx_wrapper)`: the exported V1 function
/// `entry` (with its info function `finfo`) that checks the call, then runs `pgrx_wrapper`, the
/// function `#[pg_trigger]` generated. The trigger's `sql` names `entry` as its C symbol.
#[macro_export]
macro_rules! checked_trigger_entry {
    ($entry:ident, $finfo:ident, $name:literal, $wrapper:path) => {
        #[no_mangle]
        #[doc(hidden)]
        pub extern "C" fn $finfo() -> &'static ::pgrx::pg_sys::Pg_finfo_record {
            const V1: ::pgrx::pg_sys::Pg_finfo_record = ::pgrx::pg_sys::Pg_finfo_record { api_version: 1 };
            &V1
        }

        /// # Safety
        /// Called by PostgreSQL's function manager with its call info.
        #[no_mangle]
        #[doc(hidden)]
        pub unsafe extern "C-unwind" fn $entry(fcinfo: ::pgrx::pg_sys::FunctionCallInfo) -> ::pgrx::pg_sys::Datum {
            // SAFETY: fcinfo comes from the function manager; nothing with a destructor is alive
            // here when the check raises; the wrapper is pgrx's guarded entry point.
            unsafe {
                $crate::pg::trigger::require_trigger_call(fcinfo, $name);
                $wrapper(fcinfo)
            }
        }
    };
}
