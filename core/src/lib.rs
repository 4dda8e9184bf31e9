//! Pure governance rules for memory_ext, free of pgrx so they test and bench without Postgres.
//!
//! The extension crate moves values between SQL and these functions; every rule lives here.

pub mod classify;
pub mod tier;
pub mod detect;
pub mod consent;
pub mod context;
pub mod fold;
pub mod audit;
pub mod feedback;
pub mod lifecycle;
pub mod retention;
pub mod events;
pub mod handover;
pub mod protocol;
pub mod shards;
pub mod drift;
pub mod vector;
pub mod fusion;
pub mod retrieval;
pub mod dedup;
pub mod packing;
pub mod lineage;
