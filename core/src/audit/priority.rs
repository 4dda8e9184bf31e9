//! The background integrators' CPU priority (`memory.integrator_nice`): how many Unix nice levels
//! below the server they run, so that on a busy server the writers come first and the chaining
//! takes the time they leave. A step from the niceness a worker has now to the one it should have.

/// The lowest priority Unix has (the highest niceness).
pub const LOWEST: i32 = 19;
/// The highest priority Unix has.
pub const HIGHEST: i32 = -20;

/// What a worker does to its niceness.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NiceStep {
    /// It has the niceness it should.
    Stay,
    /// Lower its priority to this niceness (any process may).
    Lower(i32),
    /// Raise its priority to this niceness: refused to an unprivileged process (Linux lets one
    /// lower its niceness only down to `RLIMIT_NICE`), so a worker that cannot restarts, and the
    /// new process inherits the server's.
    Raise(i32),
}

/// The niceness a worker should have: the server's (`server`, what the worker inherited when
/// the postmaster started it) plus `offset` (below 0 taken as 0: a worker never runs above the
/// server), within Unix's range.
pub fn wanted(server: i32, offset: i32) -> i32 {
    server.saturating_add(offset.max(0)).clamp(HIGHEST, LOWEST)
}

/// The step from niceness `now` to the one a worker of a server at `server` should have with
/// `offset`.
pub fn step(server: i32, offset: i32, now: i32) -> NiceStep {
    let want = wanted(server, offset);
    match want.cmp(&now) {
        std::cmp::Ordering::Equal => NiceStep::Stay,
        std::cmp::Ordering::Greater => NiceStep::Lower(want),
        std::cmp::Ordering::Less => NiceStep::Raise(want),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_worker_runs_offset_levels_below_the_server() {
        assert_eq!(wanted(0, 10), 10);
        assert_eq!(wanted(-15, 10), -5);
        assert_eq!(wanted(5, 0), 5);
    }

    #[test]
    fn never_above_the_server_nor_outside_unix_range() {
        assert_eq!(wanted(0, -5), 0);
        assert_eq!(wanted(15, 10), LOWEST);
        assert_eq!(wanted(-20, 0), HIGHEST);
        assert_eq!(wanted(i32::MAX, i32::MAX), LOWEST);
        assert_eq!(wanted(i32::MIN, 0), HIGHEST);
    }

    #[test]
    fn a_start_lowers_a_reload_lowers_more_or_raises() {
        // Started with the server's niceness.
        assert_eq!(step(0, 10, 0), NiceStep::Lower(10));
        assert_eq!(step(0, 10, 10), NiceStep::Stay);
        // The setting raised, then lowered, on reload.
        assert_eq!(step(0, 15, 10), NiceStep::Lower(15));
        assert_eq!(step(0, 0, 15), NiceStep::Raise(0));
        // Already at the lowest priority: a larger offset changes nothing.
        assert_eq!(step(12, 10, 19), NiceStep::Stay);
    }

    #[test]
    fn every_step_ends_at_the_wanted_niceness() {
        for server in HIGHEST..=LOWEST {
            for offset in -2..=25 {
                for now in HIGHEST..=LOWEST {
                    let after = match step(server, offset, now) {
                        NiceStep::Stay => now,
                        NiceStep::Lower(n) => {
                            assert!(n > now);
                            n
                        }
                        NiceStep::Raise(n) => {
                            assert!(n < now);
                            n
                        }
                    };
                    assert_eq!(after, wanted(server, offset));
                    assert!((HIGHEST..=LOWEST).contains(&after) && after >= server.min(LOWEST));
                }
            }
        }
    }
}
