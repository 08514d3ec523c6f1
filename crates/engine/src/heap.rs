//! Committing heap memory before traffic: a monitor's memory grows for its
//! first epochs (trigger histories filling up, match sets and their
//! epoch logs appearing), and each fresh heap page costs a page
//! fault in the middle of a batch or a sweep, a few microseconds each on a
//! virtual machine (measured: 2,686 faults inside a 5 M-packet `clarion
//! bench` loop, hundreds of them in sweeps). [`reserve_heap`] faults that
//! memory in up front, in the thread that will run the monitor, and keeps
//! the allocator from giving it back.
//!
//! Only glibc's allocator is handled (the one Rust's `System` uses on
//! Linux); elsewhere it does nothing.

/// What a monitor's thread reserves besides its triggers' history rings
/// (which [`crate::Monitor::prefault`] adds): room for the match sets
/// and epoch logs new flows bring, and for histories
/// that outgrow their rings, with a margin.
pub const HEAP_RESERVE: usize = 32 << 20;

/// Blocks the reservation is made of: below glibc's default mmap threshold
/// (128 KiB), so they come from the calling thread's heap, whose top they
/// join again when freed.
const BLOCK: usize = 64 << 10;

/// Faults in about `bytes` of the calling thread's malloc heap and keeps
/// them there for later allocations of this thread: afterwards the
/// allocator returns freed memory at the heap's top to the kernel only
/// beyond 1 GiB. Call it once, from the thread that runs the monitor,
/// before traffic starts. True when done (glibc on Linux); false elsewhere
/// or when memory ran out (nothing is kept then).
pub(crate) fn reserve_heap(bytes: usize) -> bool {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        keep_freed_memory() && touch_blocks(bytes)
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        let _ = bytes;
        false
    }
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn keep_freed_memory() -> bool {
    // SAFETY: mallopt only changes glibc's tuning parameters; any value is
    // accepted or refused (return 0) without touching allocated memory.
    // M_TRIM_THRESHOLD: free() gives the heap's top back to the kernel only
    // when it exceeds 1 GiB.
    unsafe { libc::mallopt(libc::M_TRIM_THRESHOLD, 1 << 30) == 1 }
}

/// Allocates `bytes` in blocks, writes them so the kernel backs every
/// page now, then frees them all: they merge back into the heap's top,
/// committed.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn touch_blocks(bytes: usize) -> bool {
    let mut blocks: Vec<Vec<u8>> = Vec::new();
    if blocks.try_reserve_exact(bytes.div_ceil(BLOCK)).is_err() {
        return false;
    }
    for _ in 0..bytes.div_ceil(BLOCK) {
        let mut b: Vec<u8> = Vec::new();
        if b.try_reserve_exact(BLOCK).is_err() {
            return false;
        }
        // `resize` writes every byte, so every page is faulted in (not 0:
        // malloc then memset 0 may become a calloc that skips fresh pages).
        b.resize(BLOCK, 1);
        std::hint::black_box(&b);
        blocks.push(b);
    }
    drop(blocks);
    true
}

#[cfg(test)]
mod tests {
    use super::reserve_heap;

    #[test]
    fn a_reservation_leaves_the_heap_usable() {
        // On another thread: it changes that thread's arena only.
        let ok = std::thread::spawn(|| {
            let done = reserve_heap(4 << 20);
            let v: Vec<u64> = (0..100_000).collect();
            (done, v.iter().sum::<u64>())
        })
        .join()
        .expect("no panic");
        assert_eq!(ok.1, 4_999_950_000);
        if cfg!(all(target_os = "linux", target_env = "gnu")) {
            assert!(ok.0, "glibc accepts the reservation");
        }
    }
}
