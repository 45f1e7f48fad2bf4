//! How the process's allocator hands memory back.

/// Serve every allocation of 1 MiB or more with its own mapping, returned to the system when
/// freed. glibc raises that threshold to the largest block freed so far (up to 32 MiB), after
/// which large blocks come from its heaps and stay in the process when freed: a snapshot's
/// reading frees tens of megabytes of chunks (the second core's events, a document), and
/// `diff` of a 1.08 GB snapshot with itself, reading the second file on top of the first's
/// leftovers, peaked at 418 MB (317 MB with this).
pub fn return_large_frees() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets a tuning parameter of glibc's allocator; called before any
    // thread starts.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 1 << 20);
    }
}
