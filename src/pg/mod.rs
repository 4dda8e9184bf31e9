//! The low-level layer: the only place that holds raw-pointer code (unsafe). Capability modules
//! (classify, retention, audit, lifecycle, feedback, trust, gates) are safe code over it.

pub mod callbacks;
