//! Adapter instances made ahead of their calls.
//!
//! A plan is one call into a fresh instance of the runtime adapter. Making
//! that instance, and resetting the memory it dirtied once the call is
//! done, is most of what a plan costs, and neither depends on the call.
//! So the host keeps one instance of the adapter it last planned with,
//! made and never called. A plan takes it and gives it the call's views
//! and services. The spent store goes to a thread of the host's, which
//! drops it and then makes the next spare. Each instance still serves one
//! call only: nothing of one plan reaches the next.
//!
//! Handing the spent store over wakes that thread, which costs the plan's
//! caller a system call. A caller with something to wait for next (the
//! process, request or call the plan asked for) keeps the store as a
//! [`SpentAdapter`] and lets it go once that wait has begun.

use std::sync::mpsc::{Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};

use wasmtime::Store;

use crate::bindings::adapter::RuntimeAdapter;
use crate::sandbox::CallState;

/// An instance of the adapter whose file has SHA-256 `hash`, never called.
pub(crate) struct Spare {
    pub hash: [u8; 32],
    pub store: Store<CallState>,
    pub adapter: RuntimeAdapter,
}

/// What the spares' thread does after a plan: drop the spent store, then
/// make the next spare of adapter `hash` (one message, one wake-up).
struct Chore {
    spent: Store<CallState>,
    hash: [u8; 32],
    make: Box<Make>,
}

/// Makes a spare, on the runtime given.
type Make = dyn FnOnce(&tokio::runtime::Runtime) -> Option<Spare> + Send;

/// The spare, and the thread that makes it.
#[derive(Default)]
pub(crate) struct Spares {
    ready: Arc<Mutex<Option<Spare>>>,
    chores: Arc<Mutex<Option<SyncSender<Chore>>>>,
}

/// An adapter instance a plan has used, handed to the spares' thread
/// (dropped there, and the next spare made) when this is dropped.
pub struct SpentAdapter {
    chore: Option<Chore>,
    ready: Arc<Mutex<Option<Spare>>>,
    chores: Arc<Mutex<Option<SyncSender<Chore>>>>,
}

impl Drop for SpentAdapter {
    fn drop(&mut self) {
        if let Some(chore) = self.chore.take() {
            hand_over(&self.chores, &self.ready, chore);
        }
    }
}

/// Chores waiting at most: past them (the thread starved by a host busy
/// on every core), a plan drops its spent store itself and no spare is
/// made, so spent stores, and the pool slots they hold, never pile up.
const CHORES_QUEUED: usize = 4;

/// Adapter stores held at most besides those of plans under way: the
/// spare, the chores queued, the one the thread is dropping, and those
/// spent by plans whose callers have not yet waited on anything (a
/// [`SpentAdapter`] is dropped at its caller's next wait, so one per
/// thread that polls tasks: taken as two per core).
pub(crate) fn stores_held() -> usize {
    let cores = std::thread::available_parallelism().map_or(2, std::num::NonZero::get);
    CHORES_QUEUED + 2 + 2 * cores
}

/// How much lower than the calls the spares' thread runs (a nice value):
/// woken by a plan, it does not take the core from the call that woke
/// it, and still gets its share when every core is busy.
const SPARES_NICE: i32 = 10;

impl Spares {
    /// The spare of adapter `hash`, if one is ready. A spare of another
    /// adapter is dropped: one is kept at most.
    pub(crate) fn take(&self, hash: &[u8; 32]) -> Option<Spare> {
        let mut ready = self.ready.lock().unwrap_or_else(|e| e.into_inner());
        match ready.take() {
            Some(spare) if spare.hash == *hash => Some(spare),
            other => {
                drop(ready);
                drop(other);
                None
            }
        }
    }

    /// `spent`, to go to the thread when dropped, which drops it and
    /// then makes the next spare of adapter `hash` with `make` (on the
    /// thread's own runtime, which drives the instantiation). Both are
    /// dropped where the guard is if the thread cannot be started.
    pub(crate) fn after(
        &self,
        spent: Store<CallState>,
        hash: [u8; 32],
        make: impl FnOnce(&tokio::runtime::Runtime) -> Option<Spare> + Send + 'static,
    ) -> SpentAdapter {
        SpentAdapter {
            chore: Some(Chore {
                spent,
                hash,
                make: Box::new(make),
            }),
            ready: Arc::clone(&self.ready),
            chores: Arc::clone(&self.chores),
        }
    }
}

/// Sends `chore` to the spares' thread, starting it first if need be.
fn hand_over(
    chores: &Mutex<Option<SyncSender<Chore>>>,
    ready: &Arc<Mutex<Option<Spare>>>,
    chore: Chore,
) {
    let mut chores = chores.lock().unwrap_or_else(|e| e.into_inner());
    if chores.is_none() {
        let (send, receive) = std::sync::mpsc::sync_channel(CHORES_QUEUED);
        let ready = Arc::clone(ready);
        let started = std::thread::Builder::new()
            .name("rye-spares".into())
            .spawn(move || work(&receive, &ready));
        if started.is_err() {
            drop(chores);
            drop(chore);
            return;
        }
        *chores = Some(send);
    }
    let refused = match chores.as_ref().expect("started above").try_send(chore) {
        Ok(()) => None,
        Err(TrySendError::Full(chore)) => Some(chore),
        Err(TrySendError::Disconnected(chore)) => {
            *chores = None;
            Some(chore)
        }
    };
    // A refused chore's store is dropped here, outside the lock.
    drop(chores);
    drop(refused);
}

/// The thread: while the host lives, drop what is spent and make spares.
/// A spare is made only when none for the same adapter is ready.
fn work(chores: &Receiver<Chore>, ready: &Mutex<Option<Spare>>) {
    // On Linux a nice value set for a thread id is that thread's alone.
    // Failing to lower it leaves the thread as it was.
    let _ = rustix::process::setpriority_process(Some(rustix::thread::gettid()), SPARES_NICE);
    // Instances are made asynchronously (their imports are); nothing in
    // making one waits on I/O or time, so a bare runtime drives it.
    let Ok(runtime) = tokio::runtime::Builder::new_current_thread().build() else {
        return;
    };
    while let Ok(Chore { spent, hash, make }) = chores.recv() {
        drop(spent);
        let kept = ready.lock().unwrap_or_else(|e| e.into_inner());
        if kept.as_ref().is_some_and(|spare| spare.hash == hash) {
            continue;
        }
        drop(kept);
        let Some(spare) = make(&runtime) else {
            continue;
        };
        let old = ready
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .replace(spare);
        drop(old);
    }
}
