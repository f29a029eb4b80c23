//! Instances made ahead of their calls.
//!
//! A plan is one call into a fresh instance of the runtime adapter, and a
//! command tool's run one call into a fresh instance of the tool. Making
//! that instance, and resetting the memory it dirtied once the call is
//! done, is much of what a small call costs, and neither depends on the
//! call. So the host keeps, of each kind, one instance of the component
//! it last called, made and never called. A call takes it and gives it
//! its own context (views, services, grants, input). The spent store goes
//! to a thread of the host's, which drops it and then makes the next
//! spare. Each instance still serves one call only: nothing of one call
//! reaches the next.

use std::sync::mpsc::{Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};

use wasmtime::Store;

use crate::bindings::adapter::RuntimeAdapter;
use crate::sandbox::CallState;

/// What a spare is an instance of: a component by its SHA-256, with the
/// memory cap its store was made with (an instance's first memory counts
/// against it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SpareKey {
    pub hash: [u8; 32],
    pub memory: usize,
}

/// An instance never called, of the component `key` names.
pub(crate) struct Spare {
    pub key: SpareKey,
    pub store: Store<CallState>,
    pub made: Made,
}

/// The instance itself, by kind: one spare of each is kept.
pub(crate) enum Made {
    Adapter(RuntimeAdapter),
    Command(wasmtime_wasi::p2::bindings::Command),
}

/// The kinds of instance, each the index of its slot in [`Ready`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Adapter = 0,
    Command = 1,
}

impl Made {
    fn kind(&self) -> Kind {
        match self {
            Made::Adapter(_) => Kind::Adapter,
            Made::Command(_) => Kind::Command,
        }
    }
}

/// The spares ready, one slot per kind.
type Ready = [Option<Spare>; 2];

/// What the spares' thread does after a call: drop the spent store, then
/// make the next spare (one message, one wake-up).
struct Chore {
    spent: Store<CallState>,
    key: SpareKey,
    kind: Kind,
    make: Box<Make>,
}

/// Makes a spare, on the runtime given.
type Make = dyn FnOnce(&tokio::runtime::Runtime) -> Option<Spare> + Send;

/// The spares, and the thread that makes them.
#[derive(Default)]
pub(crate) struct Spares {
    ready: Arc<Mutex<Ready>>,
    chores: Mutex<Option<SyncSender<Chore>>>,
}

/// Chores waiting at most: past them (the thread starved by a host busy
/// on every core), a caller drops its spent store itself and no spare is
/// made, so spent stores, and the pool slots they hold, never pile up.
const CHORES_QUEUED: usize = 4;

/// Stores held at most besides those of calls under way: a spare of each
/// kind, the chores queued, the one the thread is dropping, and those
/// being handed over (one per thread that calls, taken as two per core).
pub(crate) fn stores_held() -> usize {
    let cores = std::thread::available_parallelism().map_or(2, std::num::NonZero::get);
    CHORES_QUEUED + 3 + 2 * cores
}

/// How much lower than the calls the spares' thread runs (a nice value):
/// woken by a call, it does not take the core from the call that woke
/// it, and still gets its share when every core is busy.
const SPARES_NICE: i32 = 10;

impl Spares {
    /// The spare of adapter `key`, if one is ready. A spare of another
    /// adapter is dropped: one is kept at most.
    pub(crate) fn take_adapter(&self, key: SpareKey) -> Option<(Store<CallState>, RuntimeAdapter)> {
        match self.take(Kind::Adapter, key)? {
            Spare {
                store,
                made: Made::Adapter(adapter),
                ..
            } => Some((store, adapter)),
            Spare { .. } => None,
        }
    }

    /// The spare of command `key`, if one is ready. A spare of another
    /// command is dropped: one is kept at most.
    pub(crate) fn take_command(
        &self,
        key: SpareKey,
    ) -> Option<(Store<CallState>, wasmtime_wasi::p2::bindings::Command)> {
        match self.take(Kind::Command, key)? {
            Spare {
                store,
                made: Made::Command(command),
                ..
            } => Some((store, command)),
            Spare { .. } => None,
        }
    }

    fn take(&self, kind: Kind, key: SpareKey) -> Option<Spare> {
        let mut ready = self.ready.lock().unwrap_or_else(|e| e.into_inner());
        match ready[kind as usize].take() {
            Some(spare) if spare.key == key => Some(spare),
            other => {
                drop(ready);
                drop(other);
                None
            }
        }
    }

    /// Hands `spent` to the thread to drop, then, unless a spare of
    /// `key` is ready, `make` to make one of `kind` with (on the thread's
    /// own runtime, which drives the instantiation). Both are dropped
    /// here if the thread cannot be started.
    pub(crate) fn after(
        &self,
        spent: Store<CallState>,
        key: SpareKey,
        kind: Kind,
        make: impl FnOnce(&tokio::runtime::Runtime) -> Option<Spare> + Send + 'static,
    ) {
        let mut chores = self.chores.lock().unwrap_or_else(|e| e.into_inner());
        if chores.is_none() {
            let (send, receive) = std::sync::mpsc::sync_channel(CHORES_QUEUED);
            let ready = Arc::clone(&self.ready);
            let started = std::thread::Builder::new()
                .name("rye-spares".into())
                .spawn(move || work(&receive, &ready));
            if started.is_err() {
                return;
            }
            *chores = Some(send);
        }
        let chore = Chore {
            spent,
            key,
            kind,
            make: Box::new(make),
        };
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
}

/// The thread: while the host lives, drop what is spent and make spares.
/// A spare is made only when none of the same component is ready.
fn work(chores: &Receiver<Chore>, ready: &Mutex<Ready>) {
    // On Linux a nice value set for a thread id is that thread's alone.
    // Failing to lower it leaves the thread as it was.
    let _ = rustix::process::setpriority_process(Some(rustix::thread::gettid()), SPARES_NICE);
    // Instances are made asynchronously (their imports are); nothing in
    // making one waits on I/O or time, so a bare runtime drives it.
    let Ok(runtime) = tokio::runtime::Builder::new_current_thread().build() else {
        return;
    };
    while let Ok(Chore {
        spent,
        key,
        kind,
        make,
    }) = chores.recv()
    {
        drop(spent);
        let kept = ready.lock().unwrap_or_else(|e| e.into_inner());
        if kept[kind as usize]
            .as_ref()
            .is_some_and(|spare| spare.key == key)
        {
            continue;
        }
        drop(kept);
        let Some(spare) = make(&runtime) else {
            continue;
        };
        let slot = spare.made.kind() as usize;
        let old = ready.lock().unwrap_or_else(|e| e.into_inner())[slot].replace(spare);
        drop(old);
    }
}
