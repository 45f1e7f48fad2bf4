//! Transparent huge pages for large buffers the readers fill: a 100 MB input otherwise costs
//! ~50k page faults, a tenth of the run. Hints only: where the kernel does not offer huge
//! pages on request, nothing changes.

/// Advise huge pages for a vector's whole allocation, reserved capacity included.
pub fn advise<T>(buf: &Vec<T>) {
    advise_range(
        buf.as_ptr() as usize,
        buf.capacity() * std::mem::size_of::<T>(),
    );
}

pub fn advise_string(buf: &String) {
    advise_range(buf.as_ptr() as usize, buf.capacity());
}

/// A vector with room for `n` items (address space only until written), huge-page advised.
/// When the room cannot be had, an empty vector that grows as usual.
pub fn vec_with_room<T>(n: usize) -> Vec<T> {
    let mut v = Vec::new();
    if v.try_reserve(n).is_ok() {
        advise(&v);
    }
    v
}

fn advise_range(start: usize, len: usize) {
    const HUGE: usize = 2 << 20;
    // only whole huge pages inside the allocation: never a neighbour's memory
    let first = start.div_ceil(HUGE) * HUGE;
    let end = (start + len) / HUGE * HUGE;
    if end > first {
        // SAFETY: madvise(MADV_HUGEPAGE) changes no contents, and the range lies inside an
        // allocation the caller owns.
        unsafe {
            libc::madvise(first as *mut libc::c_void, end - first, libc::MADV_HUGEPAGE);
        }
    }
}
