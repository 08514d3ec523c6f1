//! Transparent huge pages for the big tables (flow table, statistics
//! slabs, trigger repository): one TLB entry covers 2 MiB instead of 4 KiB,
//! so random flow and trigger accesses miss the TLB far less. Linux grants
//! them to ranges advised with `madvise(MADV_HUGEPAGE)` when THP is in
//! `madvise` or `always` mode; elsewhere advising is a no-op.

/// Size of an x86_64 huge page.
const HUGE: usize = 2 << 20;

/// Advises the kernel to back the 2 MiB-aligned part of `v`'s allocation
/// (its whole capacity) with huge pages. True when some range was advised
/// and the kernel accepted it; false for small vectors, on other systems or
/// when refused (the data is untouched either way).
pub(crate) fn advise<T>(v: &Vec<T>) -> bool {
    let start = v.as_ptr() as usize;
    let len = v.capacity() * std::mem::size_of::<T>();
    let from = start.next_multiple_of(HUGE);
    let to = (start + len) / HUGE * HUGE;
    if to <= from {
        return false;
    }
    advise_range(from, to - from)
}

/// Faults in every page of `v`'s allocation (its whole capacity) now, as
/// if written, so that the first packets of a live run do not each wait for
/// the kernel to allocate and zero a fresh (huge) page. True when the kernel
/// did it (Linux 5.14 and later); false elsewhere (the data is untouched).
pub(crate) fn populate<T>(v: &Vec<T>) -> bool {
    let len = v.capacity() * std::mem::size_of::<T>();
    if len == 0 {
        return false;
    }
    populate_range(v.as_ptr() as usize, len)
}

#[cfg(target_os = "linux")]
fn populate_range(addr: usize, len: usize) -> bool {
    let page = 4096;
    let from = addr / page * page;
    let to = (addr + len).next_multiple_of(page);
    // SAFETY: the pages span one live allocation owned by the caller (the
    // rounding only reaches into pages that allocation already maps).
    // MADV_POPULATE_WRITE allocates the pages that are not yet backed, zero
    // filled, and leaves backed ones as they are: no byte the program can
    // observe changes, so no Rust invariant moves.
    let r = unsafe { libc::madvise(from as *mut libc::c_void, to - from, libc::MADV_POPULATE_WRITE) };
    r == 0
}

#[cfg(not(target_os = "linux"))]
fn populate_range(_addr: usize, _len: usize) -> bool {
    false
}

#[cfg(target_os = "linux")]
fn advise_range(addr: usize, len: usize) -> bool {
    // SAFETY: the range lies inside one live allocation owned by the caller
    // (its start and end were rounded inward), and MADV_HUGEPAGE only
    // changes how the kernel backs those pages: contents, addresses and
    // validity of the memory stay as they were, so no Rust invariant moves.
    let r = unsafe { libc::madvise(addr as *mut libc::c_void, len, libc::MADV_HUGEPAGE) };
    r == 0
}

#[cfg(not(target_os = "linux"))]
fn advise_range(_addr: usize, _len: usize) -> bool {
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn populating_keeps_values_and_reaches_unused_capacity() {
        let mut v: Vec<u64> = Vec::with_capacity(3 * HUGE / 8);
        v.extend(0..1000u64);
        let populated = populate(&v);
        #[cfg(target_os = "linux")]
        assert!(populated, "Linux 5.14 or later populates");
        let _ = populated;
        assert_eq!(v.iter().sum::<u64>(), (0..1000u64).sum::<u64>());
        v.extend(1000..(3 * HUGE / 8) as u64);
        assert_eq!(v[v.len() - 1], (3 * HUGE / 8) as u64 - 1);
        assert!(!populate(&Vec::<u8>::new()));
    }

    #[test]
    fn small_vectors_are_left_alone_and_big_ones_keep_their_values() {
        let small = vec![1u8; 4096];
        assert!(!advise(&small));
        let mut big: Vec<u64> = (0..(3 * HUGE / 8) as u64).collect();
        let advised = advise(&big);
        #[cfg(target_os = "linux")]
        assert!(
            advised || !std::path::Path::new("/sys/kernel/mm/transparent_hugepage").exists(),
            "a kernel with THP accepts the advice"
        );
        let _ = advised;
        big[HUGE / 8] += 1;
        assert_eq!(
            big.iter().sum::<u64>(),
            (0..(3 * HUGE / 8) as u64).sum::<u64>() + 1
        );
    }
}
