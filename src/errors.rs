//! The one error type and the SQLSTATE table, for the capability modules; defined in the `pg`
//! layer (raising an error is a longjmp into PostgreSQL).

pub use crate::pg::error::{code, keep_sqlstate, MxError, OrRaise};
