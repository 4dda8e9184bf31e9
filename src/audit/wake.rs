//! Waking the background integrators (docs/design.md#integration): a backend that commits pending
//! entries, or hands a denied attempt over, sets the latch of the integrator of their chains, so
//! it integrates at once instead of after `memory.integrator_naptime`. The latches are the pg
//! layer's wake-up slots (`pg::shmem`): group `at` is the `at`th database of
//! memory.integrator_databases, member k its integrator k.

use crate::pg::shmem;

/// Databases whose integrators' latches are kept: the first this many of
/// memory.integrator_databases (those after them are served all the same: their integrators wake
/// every `memory.integrator_naptime`).
pub const DATABASES: usize = shmem::GROUPS;

/// Integrators per database (memory.integrator_workers; fixed while the server runs).
pub fn workers() -> u32 {
    crate::gucs::INTEGRATOR_WORKERS.get().clamp(1, shmem::MEMBERS as i32) as u32
}

/// The integrator of `chain`, as a bit of the mask `wake_integrators` takes.
pub(crate) fn integrator_bit(chain: &[u8]) -> u32 {
    1 << memory_core::audit::chain_share(chain, workers())
}

/// Wakes the integrators of this database whose shares are in `shares` (bit k: integrator k);
/// those not running are the first one's to serve, so it is woken in their stead. Cannot fail:
/// it runs after a commit.
pub fn wake_integrators(shares: u32) {
    shmem::wake(shares);
}

/// Makes this process's latch the one of integrator `k` of its database, the `at`th of
/// memory.integrator_databases, until it exits. Called once, by the integrator, after it connects.
pub fn register_integrator(at: usize, k: u32) {
    shmem::register_waker(at, k);
}

/// The wake-ups sent to integrator `k` of the `at`th database so far (it compares them across a
/// round: a change means something committed that the round may not have seen).
pub fn announced(at: usize, k: u32) -> u64 {
    shmem::announced(at, k)
}
