//! This process's Unix niceness (its CPU priority), read and set: the background integrators run
//! `memory.integrator_nice` levels below the server (audit::worker).

/// This process's niceness, or None when it cannot be read.
pub fn current() -> Option<i32> {
    // SAFETY: getpriority reads the calling process's priority; errno is this thread's, cleared
    // first because -1 is both a niceness and the error return.
    unsafe {
        *errno() = 0;
        let n = libc::getpriority(libc::PRIO_PROCESS, 0);
        (n != -1 || *errno() == 0).then_some(n)
    }
}

/// Sets this process's niceness: lowering its priority always succeeds; raising it needs
/// privilege (or Linux's `RLIMIT_NICE`), and is otherwise refused with `EACCES`.
pub fn set(n: i32) -> std::io::Result<()> {
    // SAFETY: setpriority of the calling process, with plain integers.
    let rc = unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, n) };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// # Safety
/// Returns the calling thread's errno location (valid for the thread's life).
#[cfg(target_os = "linux")]
unsafe fn errno() -> *mut std::ffi::c_int {
    // SAFETY: as the function's contract.
    unsafe { libc::__errno_location() }
}

/// # Safety
/// Returns the calling thread's errno location (valid for the thread's life).
#[cfg(not(target_os = "linux"))]
unsafe fn errno() -> *mut std::ffi::c_int {
    // SAFETY: as the function's contract.
    unsafe { libc::__error() }
}
