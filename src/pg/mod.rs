//! The low-level layer: the only place that holds raw-pointer code (unsafe). Capability modules
//! (classify, retention, audit, lifecycle, feedback, trust, gates) are safe code over it.

pub mod bulk;
pub mod callbacks;
pub mod citus;
pub mod compat;
pub mod error;
pub mod identity;
pub mod locks;
pub mod scan;
pub mod shmem;
pub mod spi;
pub mod thread;
pub mod transition;
pub mod trigger;
pub mod tuple;
pub mod xact;

/// MAXALIGN of this platform (8 bytes): where PostgreSQL aligns tuple data and palloc'd chunks.
pub fn maxalign(n: usize) -> usize {
    (n + 7) & !7
}
