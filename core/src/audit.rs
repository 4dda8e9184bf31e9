//! Audit hashing (SPEC §2): being written.
