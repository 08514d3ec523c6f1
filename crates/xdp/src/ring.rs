//! The single-producer/single-consumer rings AF_XDP shares with the kernel.
//!
//! A ring is a power-of-two array of entries plus a producer and a consumer
//! index, all in memory mapped from the socket. Indices are free-running
//! `u32`s (they wrap at 2^32, never reset); an entry's slot is `index & mask`,
//! the occupancy is `producer - consumer` in wrapping arithmetic. The side
//! that owns an index keeps a private copy of it and publishes it with a
//! Release store after touching the entries; the other side's index is read
//! with an Acquire load before the entries are touched. The kernel does the
//! same (smp_load_acquire / smp_store_release in net/xdp/xsk_queue.h).
//!
//! The RX ring is consumed here (the kernel produces descriptors); the fill
//! ring is produced here (the kernel consumes frame addresses).

use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, Ordering};

/// The shared parts of one ring: two indices and the entry array.
#[derive(Debug)]
pub(crate) struct RawRing<T> {
    producer: NonNull<AtomicU32>,
    consumer: NonNull<AtomicU32>,
    entries: NonNull<T>,
    mask: u32,
}

impl<T: Copy> RawRing<T> {
    /// # Safety
    ///
    /// `producer` and `consumer` must point to valid, 4-byte aligned `u32`s and
    /// `entries` to `size` valid, aligned `T`s, all living (and not unmapped)
    /// for as long as the ring and the halves made from it are used. `size`
    /// must be a power of two. Only one side may produce and one consume.
    pub(crate) unsafe fn new(
        producer: *mut u32,
        consumer: *mut u32,
        entries: *mut T,
        size: u32,
    ) -> Option<Self> {
        if !size.is_power_of_two() {
            return None;
        }
        Some(RawRing {
            producer: NonNull::new(producer.cast::<AtomicU32>())?,
            consumer: NonNull::new(consumer.cast::<AtomicU32>())?,
            entries: NonNull::new(entries)?,
            mask: size - 1,
        })
    }

    fn size(&self) -> u32 {
        self.mask.wrapping_add(1)
    }

    fn producer(&self) -> &AtomicU32 {
        // SAFETY: `new`'s contract: a valid, aligned u32 that outlives the ring;
        // AtomicU32 has the same layout as u32, and the other side only accesses
        // it atomically (the kernel's READ_ONCE/smp_store_release).
        unsafe { self.producer.as_ref() }
    }

    fn consumer(&self) -> &AtomicU32 {
        // SAFETY: as in `producer`.
        unsafe { self.consumer.as_ref() }
    }

    fn slot(&self, index: u32) -> *mut T {
        // SAFETY: `index & mask` < size, and `entries` points to `size` entries
        // (`new`'s contract), so the offset stays inside the array.
        unsafe { self.entries.as_ptr().add((index & self.mask) as usize) }
    }
}

/// The consuming half (the RX ring): entries between our consumer index and
/// the other side's producer index are ours to read.
#[derive(Debug)]
pub(crate) struct Consumer<T> {
    ring: RawRing<T>,
    /// Our consumer index; the published one equals it between calls.
    cons: u32,
}

impl<T: Copy> Consumer<T> {
    pub(crate) fn new(ring: RawRing<T>) -> Self {
        let cons = ring.consumer().load(Ordering::Relaxed);
        Consumer { ring, cons }
    }

    /// Entries ready to read. The Acquire load makes the producer's writes to
    /// them visible. Never more than the ring's size, even if the other side
    /// published nonsense.
    pub(crate) fn available(&self) -> u32 {
        let prod = self.ring.producer().load(Ordering::Acquire);
        prod.wrapping_sub(self.cons).min(self.ring.size())
    }

    /// The `i`-th ready entry; `i` must be below a value `available` returned
    /// since the last `release`.
    pub(crate) fn get(&self, i: u32) -> T {
        debug_assert!(i < self.ring.size());
        let p = self.ring.slot(self.cons.wrapping_add(i));
        // SAFETY: `slot` is inside the entry array; the producer published this
        // entry (Acquire in `available`) and does not touch it again until we
        // release it, so there is no concurrent write.
        unsafe { p.read() }
    }

    /// Hands `n` entries back to the producer (Release: our reads of them
    /// happen before the producer may overwrite them).
    pub(crate) fn release(&mut self, n: u32) {
        if n == 0 {
            return;
        }
        self.cons = self.cons.wrapping_add(n);
        self.ring.consumer().store(self.cons, Ordering::Release);
    }
}

/// The producing half (the fill ring): slots between our producer index and
/// the other side's consumer index plus the size are ours to write.
#[derive(Debug)]
pub(crate) struct Producer<T> {
    ring: RawRing<T>,
    /// Our producer index; the published one equals it between calls.
    prod: u32,
}

impl<T: Copy> Producer<T> {
    pub(crate) fn new(ring: RawRing<T>) -> Self {
        let prod = ring.producer().load(Ordering::Relaxed);
        Producer { ring, prod }
    }

    /// Free slots. The Acquire load orders the consumer's reads of the slots
    /// it released before our writes to them.
    pub(crate) fn free(&self) -> u32 {
        let cons = self.ring.consumer().load(Ordering::Acquire);
        let used = self.prod.wrapping_sub(cons);
        self.ring.size().saturating_sub(used)
    }

    /// Writes as many of `items` as fit and publishes them; returns how many.
    pub(crate) fn push(&mut self, items: &[T]) -> usize {
        let n = (self.free() as usize).min(items.len());
        for (i, item) in items.iter().take(n).enumerate() {
            let p = self.ring.slot(self.prod.wrapping_add(i as u32));
            // SAFETY: `slot` is inside the entry array, and the slot is free (at
            // most `free()` slots past our producer index), so the consumer
            // does not read it until we publish it below.
            unsafe { p.write(*item) };
        }
        if n > 0 {
            self.prod = self.prod.wrapping_add(n as u32);
            self.ring.producer().store(self.prod, Ordering::Release);
        }
        n
    }

    /// Entries published and not yet consumed by the other side.
    #[cfg(test)]
    pub(crate) fn queued(&self) -> u32 {
        self.ring.size() - self.free()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::UnsafeCell;
    use std::sync::Arc;

    /// Heap memory laid out like a mapped ring.
    struct Mem {
        prod: UnsafeCell<u32>,
        cons: UnsafeCell<u32>,
        entries: Box<[UnsafeCell<u64>]>,
    }
    // SAFETY: the cells are only accessed through a ring's atomics and its
    // single-producer/single-consumer protocol.
    unsafe impl Sync for Mem {}
    // SAFETY: as above; the memory has no thread affinity.
    unsafe impl Send for Mem {}

    fn mem(size: u32, start: u32) -> Arc<Mem> {
        Arc::new(Mem {
            prod: UnsafeCell::new(start),
            cons: UnsafeCell::new(start),
            entries: (0..size).map(|_| UnsafeCell::new(0)).collect(),
        })
    }

    fn ring(m: &Arc<Mem>) -> RawRing<u64> {
        // SAFETY: the pointers come from `m`, which every test keeps alive
        // (an Arc clone travels with each half) while the ring is used.
        unsafe {
            RawRing::new(
                m.prod.get(),
                m.cons.get(),
                m.entries[0].get(),
                m.entries.len() as u32,
            )
        }
        .expect("valid ring")
    }

    #[test]
    fn size_must_be_a_power_of_two() {
        let m = mem(3, 0);
        // SAFETY: as in `ring`; it fails before any use.
        let r = unsafe { RawRing::new(m.prod.get(), m.cons.get(), m.entries[0].get(), 3) };
        assert!(r.is_none());
    }

    #[test]
    fn empty_ring_has_everything_free_and_nothing_available() {
        let m = mem(8, 0);
        let p = Producer::new(ring(&m));
        let c = Consumer::new(ring(&m));
        assert_eq!(p.free(), 8);
        assert_eq!(c.available(), 0);
    }

    #[test]
    fn push_stops_at_capacity_and_release_frees_slots() {
        let m = mem(4, 0);
        let mut p = Producer::new(ring(&m));
        let mut c = Consumer::new(ring(&m));
        assert_eq!(p.push(&[1, 2, 3, 4, 5, 6]), 4);
        assert_eq!(p.free(), 0);
        assert_eq!(p.push(&[7]), 0);
        assert_eq!(c.available(), 4);
        assert_eq!((c.get(0), c.get(3)), (1, 4));
        c.release(2);
        assert_eq!(p.free(), 2);
        assert_eq!(p.push(&[5, 6, 7]), 2);
        assert_eq!(c.available(), 4);
        let got: Vec<u64> = (0..4).map(|i| c.get(i)).collect();
        assert_eq!(got, [3, 4, 5, 6]);
        c.release(4);
        assert_eq!(p.queued(), 0);
    }

    #[test]
    fn indices_wrap_past_u32_max() {
        let m = mem(8, u32::MAX - 5);
        let mut p = Producer::new(ring(&m));
        let mut c = Consumer::new(ring(&m));
        let mut next = 0u64;
        let mut expect = 0u64;
        for round in 0..50u64 {
            let batch: Vec<u64> = (0..(round % 7 + 1)).map(|k| next + k).collect();
            let n = p.push(&batch);
            next += n as u64;
            let avail = c.available();
            assert_eq!(avail as u64, next - expect);
            for i in 0..avail {
                assert_eq!(c.get(i), expect);
                expect += 1;
            }
            c.release(avail);
        }
        assert_eq!(expect, next);
        assert!(next > 8, "the test must wrap the ring and the u32 indices");
    }

    #[test]
    fn a_bogus_producer_index_is_clamped_to_the_size() {
        let m = mem(4, 0);
        let c = Consumer::new(ring(&m));
        // SAFETY: no other thread touches `m`.
        unsafe { *m.prod.get() = 1000 };
        assert_eq!(c.available(), 4);
        let p = Producer::new(ring(&m));
        // SAFETY: as above.
        unsafe { *m.cons.get() = 2000 };
        assert_eq!(
            p.free(),
            0,
            "a consumer ahead of the producer is nonsense: write nothing"
        );
    }

    #[test]
    fn threads_pass_every_entry_in_order() {
        const N: u64 = 200_000;
        let m = mem(64, u32::MAX - 1000);
        let (pr, cr) = (ring(&m), ring(&m));
        let (m1, m2) = (Arc::clone(&m), Arc::clone(&m));
        // Wrappers so the halves (raw pointers) can move to threads.
        struct SendP(Producer<u64>);
        // SAFETY: the producer half is used by exactly one thread.
        unsafe impl Send for SendP {}
        struct SendC(Consumer<u64>);
        // SAFETY: the consumer half is used by exactly one thread.
        unsafe impl Send for SendC {}
        let sp = SendP(Producer::new(pr));
        let sc = SendC(Consumer::new(cr));
        let t = std::thread::spawn(move || {
            let _keep = m1;
            let mut sp = sp;
            let mut v = 0u64;
            while v < N {
                let batch: Vec<u64> = (v..(v + 13).min(N)).collect();
                v += sp.0.push(&batch) as u64;
            }
        });
        let _keep = m2;
        let mut sc = sc;
        let mut expect = 0u64;
        while expect < N {
            let avail = sc.0.available();
            for i in 0..avail {
                assert_eq!(sc.0.get(i), expect);
                expect += 1;
            }
            sc.0.release(avail);
        }
        t.join().expect("producer thread");
    }
}
