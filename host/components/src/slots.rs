//! How many instances of one world may run at once.
//!
//! Every call gets a fresh instance with its own memory, up to the world's
//! cap; without a bound, 64 parses at once could take 64 times that. A
//! call waits for a slot before its store is made (so the wait does not
//! count against its deadline) and gives it back when the store is dropped.

use std::sync::{Arc, Condvar, Mutex};

/// The slots of one world.
pub(crate) struct Slots {
    free: Mutex<usize>,
    freed: Condvar,
}

impl Slots {
    pub(crate) fn new(count: usize) -> Arc<Self> {
        Arc::new(Self {
            free: Mutex::new(count.max(1)),
            freed: Condvar::new(),
        })
    }

    /// Takes a free slot, or `None` when all are held.
    pub(crate) fn try_take(self: &Arc<Self>) -> Option<Slot> {
        let mut free = self.free.lock().expect("slots lock");
        if *free == 0 {
            return None;
        }
        *free -= 1;
        Some(Slot(self.clone()))
    }

    /// Waits for a free slot and takes it.
    pub(crate) fn take(self: &Arc<Self>) -> Slot {
        let mut free = self.free.lock().expect("slots lock");
        while *free == 0 {
            free = self.freed.wait(free).expect("slots lock");
        }
        *free -= 1;
        Slot(self.clone())
    }
}

/// A slot held; given back on drop.
pub(crate) struct Slot(Arc<Slots>);

impl Drop for Slot {
    fn drop(&mut self) {
        *self.0.free.lock().expect("slots lock") += 1;
        self.0.freed.notify_one();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn at_most_the_count_are_held_at_once() {
        let slots = Slots::new(3);
        let held = std::sync::atomic::AtomicUsize::new(0);
        let peak = std::sync::atomic::AtomicUsize::new(0);
        std::thread::scope(|s| {
            for _ in 0..16 {
                s.spawn(|| {
                    for _ in 0..20 {
                        let _slot = slots.take();
                        let now = held.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
                        peak.fetch_max(now, std::sync::atomic::Ordering::SeqCst);
                        std::thread::yield_now();
                        held.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
                    }
                });
            }
        });
        assert_eq!(peak.into_inner(), 3);
    }
}
