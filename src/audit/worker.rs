//! The background integrators: `memory.integrator_workers` workers per database named in
//! `memory.integrator_databases`, registered when the library is in `shared_preload_libraries`.
//! Worker k of n takes the chains `memory_core::audit::chain_share` gives it, beside the others;
//! the first also takes the shares of workers that are not running. Each round integrates, in its
//! own transaction, every pending entry of its chains committed so far (`integrate::Caller::Worker`,
//! which gives way to any integrator of every chain). After a round that found less than a full
//! batch it waits until a writer commits pending entries of its chains (or hands over a denied
//! attempt's event), at most `memory.integrator_naptime`; after a round that chained entries it
//! starts no sooner than `memory.integrator_delay` after that round began. A worker that fails or
//! is terminated is restarted by the postmaster after 5 s, and what it had not committed is still
//! pending: nothing is lost.

use super::integrate::{integrate, Caller, Share};
use super::wake::{self, workers};
use crate::pg::locks::{self, Hold, Lock};
use pgrx::bgworkers::{
    BackgroundWorker, BackgroundWorkerBuilder, BgWorkerStartTime, SignalWakeFlags,
};
use pgrx::prelude::*;
use std::time::Duration;

/// Deletions from memory.audit_pending after which the worker vacuums it.
const VACUUM_AFTER: i64 = 5_000;

/// Least time between two moves of the derived_from indexes' pending lists into their trees
/// (sql/lineage.sql: a derived insert appends its entries to the index's pending list; the
/// first worker moves them, so that neither a writer nor a search of lineage pays for them). Once a
/// second: each source's posting list is decoded and re-encoded once for all its entries of that
/// second (bench/RESULTS.md, issue 50: ~0.02 ms of CPU a derived insert less than every 100 ms).
const LINEAGE_FLUSH: Duration = Duration::from_millis(1000);

/// Registers the workers (only while the postmaster loads shared_preload_libraries).
pub fn register() {
    if !crate::pg::xact::preloading() {
        return;
    }
    let list = crate::gucs::INTEGRATOR_DATABASES
        .get()
        .map(|c| c.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut dbs: Vec<&str> = Vec::new();
    for db in list.split(',').map(str::trim).filter(|d| !d.is_empty()) {
        if !dbs.contains(&db) {
            dbs.push(db);
        }
    }
    let n = workers();
    let slots = crate::pg::xact::max_worker_processes();
    if dbs.len() * n as usize > slots {
        warning!(
            "memory_ext: {} integrators ({} per database for {} databases) exceed max_worker_processes ({slots}); \
             the first integrator of a database integrates the shares of those that do not start",
            dbs.len() * n as usize,
            n,
            dbs.len()
        );
    }
    if dbs.len() > wake::DATABASES {
        warning!(
            "memory_ext: memory.integrator_databases names {} databases; commits wake the integrators of the first {} only \
             (those of the others find what is pending every memory.integrator_naptime)",
            dbs.len(),
            wake::DATABASES
        );
    }
    for (at, db) in dbs.into_iter().enumerate() {
        for k in 0..n {
            let name = if n == 1 { format!("memory_ext integrator {db}") } else { format!("memory_ext integrator {db} {}/{n}", k + 1) };
            BackgroundWorkerBuilder::new(&name)
                .set_type("memory_ext integrator")
                .set_library("memory_ext")
                .set_function("memory_ext_integrator_main")
                // Which of the database's integrators, and the database's place in the list.
                .set_argument(Some(pg_sys::Datum::from((at << 8) | k as usize)))
                .set_extra(db)
                .enable_spi_access()
                .set_start_time(BgWorkerStartTime::RecoveryFinished)
                .set_restart_time(Some(Duration::from_secs(5)))
                .load();
        }
    }
}

/// For the first worker: the shares of the others that are not running (not started for want of
/// max_worker_processes, or between a failure and their restart), each locked for the
/// transaction, so that a returning worker waits for its end; None when all are running. A
/// returning worker queues for its share's lock, and a queued request makes the conditional
/// attempt here fail: the share goes back to it after this transaction.
fn covered_shares(n: u32, covering: &mut u32) -> Option<Share> {
    let mut share = Share::none(n);
    for j in 1..n {
        let away = locks::take(Lock::Served(j), pg_sys::ExclusiveLock, Hold::Transaction, false);
        if away {
            share = share.with(j);
        }
        let was = *covering & (1 << j) != 0;
        if away != was {
            if away {
                log!("memory_ext integrator {j_1}/{n} is not running: integrator 1/{n} integrates its share meanwhile", j_1 = j + 1);
            } else {
                log!("memory_ext integrator {j_1}/{n} is back: integrator 1/{n} leaves its share to it", j_1 = j + 1);
            }
            *covering ^= 1 << j;
        }
    }
    share.is_some().then_some(share)
}

/// One round for `share`, in the caller's transaction: the denied-attempt events of its orgs,
/// then its pending entries; returns how many entries it chained.
fn round(share: Share) -> i64 {
    // Whether the extension exists in this database: a catalog lookup, not a statement parsed
    // and planned every round (and no transaction id either way).
    let installed = crate::pg::xact::extension_exists(c"memory_ext");
    if !installed {
        return 0;
    }
    // Events of denied attempts handed over by failed transactions (audit::denied), those of
    // this share's orgs (their chains' heads are this worker's to lock), in chain order: the
    // order every integrator locks heads in, so that the appends never deadlock with another's
    // integration.
    let mut events = super::denied::take_for_database(|org| share.takes(org.as_bytes()));
    events.sort_by(|a, b| a.1.as_bytes().cmp(b.1.as_bytes()));
    for (event, org, payload) in events {
        if let Err(e) = Spi::run_with_args(
            "SELECT memory_internal._audit($1, $2::pg_catalog.jsonb, NULLIF($3, ''))",
            &[event.as_str().into(), payload.as_str().into(), org.as_str().into()],
        ) {
            warning!("memory_ext integrator: could not append {event} for org \"{org}\": {e} (it is in the server log)");
        }
    }
    match integrate(Caller::Worker(share)) {
        Ok(n) => n,
        // Unwinds to the worker's guard: the transaction aborts (nothing half-chained commits)
        // and the worker exits, to be restarted.
        Err(e) => pgrx::error!("memory_ext integrator: {} (SQLSTATE {})", e.message, e.sqlstate),
    }
}

#[pg_guard]
#[no_mangle]
pub extern "C-unwind" fn memory_ext_integrator_main(arg: pg_sys::Datum) {
    // Which of the database's integrators this is: it takes that share of the chains.
    let (k, n) = ((arg.value() & 0xff) as u32, workers());
    let at = arg.value() >> 8;
    BackgroundWorker::attach_signal_handlers(SignalWakeFlags::SIGHUP | SignalWakeFlags::SIGTERM);
    let db = BackgroundWorker::get_extra().to_string();
    // A database named in memory.integrator_databases that does not exist (yet) would end every
    // start in `FATAL: database ... does not exist`, every 5 s. A start that did not get in (still
    // marked connecting) waits for the database instead, connected to none; see
    // `wait_for_database`.
    if crate::pg::shmem::was_connecting(at, k) {
        wait_for_database(&db, at, k, n);
    }
    crate::pg::shmem::set_connecting(at, k, true);
    BackgroundWorker::connect_worker_to_spi(Some(&db), None);
    crate::pg::shmem::set_connecting(at, k, false);
    // The worker runs as the bootstrap superuser, in a database whose owner may have set its
    // defaults (ALTER DATABASE ... SET): none of them may steer it. Its session pins the search
    // path (no operator or function of the database's schemas resolves in its SQL) and the
    // transaction settings integration needs, before it runs anything.
    BackgroundWorker::transaction(|| {
        for (name, value) in [
            (c"search_path", c"pg_catalog, pg_temp"),
            (c"default_transaction_read_only", c"off"),
            (c"default_transaction_isolation", c"read committed"),
            (c"default_transaction_deferrable", c"off"),
            (c"session_replication_role", c"origin"),
            (c"statement_timeout", c"0"),
            (c"lock_timeout", c"0"),
            (c"memory.audit_mode", c"immediate"),
        ] {
            crate::pg::identity::set_for_session(name, value);
        }
        // Which integrator this is, in pg_stat_activity.
        let app = std::ffi::CString::new(format!("memory_ext integrator {}/{n}", k + 1)).unwrap_or_default();
        crate::pg::identity::set_for_session(c"application_name", &app);
    });
    // Its share is served by it alone for as long as it runs (a session lock). While the first
    // integrator serves it in its stead, it queues for it (which ends that at the first
    // integrator's next round) and waits for that round to end.
    let free = BackgroundWorker::transaction(|| locks::take(Lock::Served(k), pg_sys::ExclusiveLock, Hold::Session, false));
    if !free {
        log!("memory_ext integrator {}/{n} for database \"{db}\" waits for its share to be free", k + 1);
        BackgroundWorker::transaction(|| locks::take(Lock::Served(k), pg_sys::ExclusiveLock, Hold::Session, true));
    }
    // Writers that commit pending entries of its chains wake it (audit::wake).
    wake::register_integrator(at, k);
    log!("memory_ext integrator {}/{n} started for database \"{db}\"", k + 1);
    // The shares of the other integrators the first one serves in their absence (bit j: j's).
    let mut covering: u32 = 0;
    let mut nap = Duration::from_millis(0);
    // Entries chained (and deleted from memory.audit_pending) since the worker last vacuumed it.
    let mut deleted: i64 = 0;
    let mut vacuumed = std::time::Instant::now();
    let mut flushed = std::time::Instant::now();
    while BackgroundWorker::wait_latch(Some(nap)) {
        if BackgroundWorker::sighup_received() {
            crate::pg::xact::reload_config();
        }
        let started = std::time::Instant::now();
        // The wake-ups sent so far: one sent during the round, whose latch something in the
        // round may have waited on and reset (a lock wait), still counts below.
        let announced = wake::announced(at, k);
        let mut done = BackgroundWorker::transaction(move || round(Share::one(k, n)));
        // The first worker then serves the shares of the others that are not running, in a
        // transaction of its own: its own share's round has committed, and a returning worker
        // waits at most for this one.
        if k == 0 && n > 1 {
            // (An error in the round ends the worker: what `covering` then holds does not matter.)
            let mut cov = std::panic::AssertUnwindSafe(&mut covering);
            done += BackgroundWorker::transaction(move || covered_shares(n, &mut cov).map_or(0, round));
        }
        // The first worker moves the derived_from indexes' pending entries into their trees,
        // at most every LINEAGE_FLUSH (a list it finds empty costs a metapage read).
        if k == 0 && flushed.elapsed() >= LINEAGE_FLUSH {
            BackgroundWorker::transaction(|| {
                if crate::pg::xact::extension_exists(c"memory_ext") {
                    crate::pg::bulk::gin_clean_pending_lists(c"memory", &[c"observations_derived_from", c"observations_archive_derived_from"]);
                }
            });
            flushed = std::time::Instant::now();
        }
        // Each round reads memory.audit_pending whole; the rows it deletes stay in the table as
        // dead rows until a vacuum, and a table grown by a backlog keeps every later round slow
        // (autovacuum visits a database once a minute). The worker vacuums it itself after
        // VACUUM_AFTER deletions, or when a round finds nothing left after some, at most once a
        // second: a table without indexes vacuums in one pass (pages it empties are marked
        // all-visible, so the next vacuum skips them), SKIP_LOCKED gives way to a running
        // autovacuum, and TRUNCATE false never waits for the writers' locks (the freed space is
        // reused by the next inserts). A vacuum already running (another integrator's, or
        // autovacuum's) may have started before this worker's deletions committed and so leave
        // them: the worker then keeps its count and tries again after its next round.
        deleted += done;
        if (deleted >= VACUUM_AFTER || (done == 0 && deleted > 0)) && vacuumed.elapsed() >= Duration::from_secs(1) {
            let free = BackgroundWorker::transaction(|| {
                Spi::connect(|client| super::storage::local(client).map(|t| crate::pg::bulk::nobody_vacuums(t.pending)))
                    .unwrap_or(false)
            });
            if free {
                crate::pg::xact::vacuum_in_worker(c"VACUUM (SKIP_LOCKED, TRUNCATE false) memory.audit_pending");
                deleted = 0;
                vacuumed = std::time::Instant::now();
            }
        }
        let naptime = Duration::from_millis(crate::gucs::INTEGRATOR_NAPTIME.get().max(10) as u64);
        // A round that chained a full batch or more has a backlog behind it: go on at once.
        // Otherwise wait for a wake-up (at once if one came during the round), at most a
        // naptime.
        let backlog = done >= super::append::CHUNK as i64;
        // A round refused the integration lock (a transaction that integrated holds it, until it
        // ends) chained nothing, but the commits meanwhile keep waking the worker: it waits the
        // delay below as after a round that chained, rather than try again at every wake-up.
        let refused = super::integrate::lock_was_refused();
        let woken = wake::announced(at, k) != announced;
        nap = if backlog || woken { Duration::from_millis(1) } else { naptime };
        // A commit of pending entries of its chains sets its latch (so the wait above ends at
        // once), but after a round that chained something the next starts no sooner than
        // memory.integrator_delay after it began: on a busy database, what commits meanwhile is
        // chained in one round. The delay is part of the wait, not added to it; a backlog goes on
        // at once, and after a round that found nothing a commit is chained at once (after one
        // refused the lock, as after one that chained).
        let delay = Duration::from_millis(crate::gucs::INTEGRATOR_DELAY.get().max(0) as u64);
        if let Some(rest) = delay.checked_sub(started.elapsed()).filter(|r| (done > 0 || refused) && !backlog && !r.is_zero()) {
            let rest = rest.min(naptime);
            crate::pg::xact::sleep_ignoring_latch(rest);
            nap = nap.saturating_sub(rest).max(Duration::from_millis(1));
        }
    }
    // SIGTERM: from the postmaster at shutdown, or pg_terminate_backend(). In the second case the
    // worker must come back, so it leaves with exit code 1 (restarted after 5 s).
    log!("memory_ext integrator {}/{n} for database \"{db}\" stopping", k + 1);
    crate::pg::xact::exit_to_be_restarted();
}

/// Connected to no database (only the shared catalogs), checks that `db` exists, with a
/// backoff of 1 s doubling to 10 s, logging once that it waits; once it exists, the worker exits
/// to be restarted (a process connects to one database in its life) and then connects to it.
/// Ends the worker quietly on SIGTERM.
fn wait_for_database(db: &str, at: usize, k: u32, n: u32) -> ! {
    BackgroundWorker::connect_worker_to_spi(None, None);
    let name = std::ffi::CString::new(db).unwrap_or_default();
    let mut backoff = Duration::from_secs(1);
    let mut logged = false;
    loop {
        if BackgroundWorker::transaction(|| crate::pg::xact::database_named_exists(&name)) {
            log!("memory_ext integrator {}/{n}: database \"{db}\" exists now; the integrator restarts to serve it", k + 1);
            crate::pg::shmem::set_connecting(at, k, false);
            crate::pg::xact::exit_to_be_restarted();
        }
        if !logged {
            log!(
                "memory_ext integrator {}/{n}: database \"{db}\" (memory.integrator_databases) does not exist; waiting for it (checking every 1 s to 10 s)",
                k + 1
            );
            logged = true;
        }
        if !BackgroundWorker::wait_latch(Some(backoff)) {
            // SIGTERM: a shutdown (or pg_terminate_backend: the next start waits again).
            crate::pg::xact::exit_to_be_restarted();
        }
        if BackgroundWorker::sighup_received() {
            crate::pg::xact::reload_config();
        }
        backoff = (backoff * 2).min(Duration::from_secs(10));
    }
}
