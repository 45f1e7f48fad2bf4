//! How the process gets memory from the system and hands it back: large frees returned at
//! once, pages of mapped files let go once read, huge pages for the large tables read at
//! random (tables keyed by address) only.

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

/// Ask the kernel for huge pages (2 MiB) for the untouched allocation of `v` (its whole
/// capacity), where it is large enough to hold one: a table read at random then misses the TLB
/// far less. Only advice: the kernel may give ordinary pages.
///
/// Not for memory written end to end (events, chunks): there the TLB gains nothing, and on a VM
/// whose free memory goes back to the host (virtio-balloon's free page reporting hands back
/// free 2 MiB blocks, exactly what a huge page takes) each fresh huge page waits for the host
/// to back it again. `summary` of the 1M-event capture, run a few seconds after the last
/// command, took 0.20 s with its kept events and chunks on huge pages and 0.15 s without.
pub fn advise_huge_pages<T>(v: &Vec<T>) {
    let (ptr, bytes) = (
        v.as_ptr() as *const u8,
        v.capacity() * std::mem::size_of::<T>(),
    );
    #[cfg(target_os = "linux")]
    {
        const HUGE: usize = 2 << 20;
        if bytes >= 2 * HUGE {
            let start = (ptr as usize).next_multiple_of(HUGE);
            let end = (ptr as usize + bytes) / HUGE * HUGE;
            if end > start {
                // SAFETY: advice on whole pages inside the caller's allocation; failure only
                // means ordinary pages
                unsafe {
                    libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_HUGEPAGE)
                };
            }
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (ptr, bytes);
}

/// Drop the whole pages of `map` that lie inside bytes `from..to` (an end past the map: to its
/// end) from this process's memory. They stay in the kernel's page cache: a later read maps
/// them again (a minor fault), the same bytes, as a private read-only mapping of a file reads
/// the file. How the readers of mapped files keep what they hold to what they are reading.
pub fn release_mapped(map: &memmap2::Mmap, from: usize, to: usize) {
    const PAGE: usize = 4096;
    let (from, to) = (
        from.div_ceil(PAGE) * PAGE,
        (to / PAGE * PAGE).min(map.len()),
    );
    if to > from {
        // SAFETY: the mapping is private and read-only: a page dropped and touched again is
        // read from the file, so whatever reads it (values are copied out, never borrowed
        // across this call by its callers) sees the same bytes
        unsafe {
            let _ = map.unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, from, to - from);
        }
    }
}

/// Start loading the cache line at `p` into the caches, for a read soon after (tables read at
/// random: the lookup of an event a few events ahead). Only a hint, on x86-64 only.
#[inline(always)]
pub fn prefetch<T>(p: *const T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch reads nothing and cannot fault, whatever the address
    unsafe {
        std::arch::x86_64::_mm_prefetch(p.cast::<i8>(), std::arch::x86_64::_MM_HINT_T0)
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// [`prefetch`] every cache line of the `bytes` bytes at `p` (a table slot, or a slot and the
/// ones a lookup reads on into): a slot whose size does not divide a line may end in the next
/// one, and a lookup left waiting on that line gains little from the first. With `bytes` a
/// constant the loop unrolls to a prefetch a line and one for the last byte.
#[inline(always)]
pub fn prefetch_bytes<T>(p: *const T, bytes: usize) {
    let p = p.cast::<u8>();
    for line in (0..bytes).step_by(64) {
        prefetch(p.wrapping_add(line));
    }
    prefetch(p.wrapping_add(bytes - 1));
}
