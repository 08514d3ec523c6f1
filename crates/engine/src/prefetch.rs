//! Software prefetch: start loading a cache line the code will need a few
//! steps later, so the loads of several flows or triggers overlap instead
//! of each stalling on memory in turn (the sweep and the packet path are
//! bound by cache misses, not instructions).

/// Hints the CPU to bring the line holding `*p` into every cache level.
/// A hint only: it never faults and changes no value, whatever `p` is.
#[inline(always)]
pub fn prefetch<T>(p: *const T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `prefetch` is a hint that does not access memory
    // architecturally: it cannot fault or change program state for any
    // address, valid or not, and SSE (which provides it) is part of the
    // x86_64 baseline, so the target feature is always present.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p.cast::<i8>());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// Hints the CPU to bring every line of `[p, p + len)` into every cache
/// level: the first and last element alone miss the middle line of an
/// object that straddles three.
#[inline(always)]
pub fn prefetch_span<T>(p: *const T, len: usize) {
    const LINE: usize = 64;
    let p = p.cast::<u8>();
    let last = len.max(1) - 1;
    prefetch(p);
    // `p + k * 64` falls in each following line once, up to the last.
    let mut off = LINE;
    while off < last {
        prefetch(p.wrapping_add(off));
        off += LINE;
    }
    prefetch(p.wrapping_add(last));
}

#[cfg(test)]
mod tests {
    use super::{prefetch, prefetch_span};

    #[test]
    fn prefetch_is_a_hint_for_any_address() {
        let v = [7u64; 16];
        prefetch(v.as_ptr());
        prefetch(v.as_ptr().wrapping_add(1 << 40));
        prefetch(std::ptr::null::<u8>());
        assert_eq!(v.iter().sum::<u64>(), 112, "values are untouched");
        prefetch_span(v.as_ptr(), 128);
        prefetch_span(usize::MAX as *const u8, 4096);
        prefetch_span(std::ptr::null::<u8>(), 0);
    }
}
