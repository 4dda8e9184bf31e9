//! C entry points that an earlier release's SQL names and this library no longer has.
//!
//! Installing a new memory_ext package replaces the library at once, while each database keeps
//! the previous release's functions until `ALTER EXTENSION memory_ext UPDATE` runs in it. A
//! function of the previous release whose C symbol is gone would fail with "could not find
//! function"; these answer `55000` with the command to run instead. Every symbol the 0.1.0
//! install script names is exported by this library either as a live function or here
//! (tests/upgrade/run.sh checks this list against sql/released/memory_ext--0.1.0.sql).

use super::error::{code, MxError};
use pgrx::pg_sys;

/// `retired_entry!(symbol, finfo, "memory.name(args)")`: an exported V1 function `symbol` (with its
/// info function `finfo`) that raises `55000`.
macro_rules! retired_entry {
    ($entry:ident, $finfo:ident, $name:literal) => {
        #[no_mangle]
        #[doc(hidden)]
        pub extern "C" fn $finfo() -> &'static pg_sys::Pg_finfo_record {
            const V1: pg_sys::Pg_finfo_record = pg_sys::Pg_finfo_record { api_version: 1 };
            &V1
        }

        /// # Safety
        /// Called by PostgreSQL's function manager; it reads nothing from `fcinfo` and raises
        /// before returning (no Rust value with a destructor is alive when it does).
        #[no_mangle]
        #[doc(hidden)]
        pub unsafe extern "C-unwind" fn $entry(_fcinfo: pg_sys::FunctionCallInfo) -> pg_sys::Datum {
            retired($name)
        }
    };
}

fn retired(name: &str) -> ! {
    MxError::new(
        code::NOT_INSTALLED,
        format!("{name} belongs to an earlier memory_ext release than the library installed ({})", env!("CARGO_PKG_VERSION")),
    )
    .hint("Run ALTER EXTENSION memory_ext UPDATE in this database.")
    .raise()
}

// 0.1.0: memory._redact_details(jsonb, text[]) (0.2.0 redacts in SQL).
retired_entry!(redact_details_wrapper, pg_finfo_redact_details_wrapper, "memory._redact_details(jsonb, text[])");
// 0.3.0: memory_internal._kept_recall(text, text, text[], int, int, text) (0.4.0 runs the
// statements memory_core::retrieval renders through memory_internal._retrieve).
retired_entry!(kept_recall_wrapper, pg_finfo_kept_recall_wrapper, "memory_internal._kept_recall(text, text, text[], int, int, text)");
