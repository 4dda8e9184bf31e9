//! Helper threads next to a backend: they never call into PostgreSQL and run with every signal
//! blocked, so PostgreSQL's handlers keep running on the backend's own thread.

/// Start a scoped thread with every signal blocked, so that Postgres' signal handlers keep
/// running on the backend's own thread.
pub fn spawn_without_signals<'scope, 'env, F>(scope: &'scope std::thread::Scope<'scope, 'env>, f: F) -> std::thread::ScopedJoinHandle<'scope, ()>
where
    F: FnOnce() + Send + 'scope,
{
    // SAFETY: sigset_t is plain data initialised by sigfillset; the mask is changed on this
    // thread only around the spawn (the new thread inherits the blocked set) and restored.
    unsafe {
        let mut all: libc::sigset_t = std::mem::zeroed();
        let mut old: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_BLOCK, &all, &mut old);
        let handle = scope.spawn(f);
        libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
        handle
    }
}
