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
//!
//! Waking that thread costs the call a system call and, on an idle core,
//! an interrupt to another processor, before its answer is out. A server
//! whose async runtime calls [`idle_chores`] as a worker goes idle (and
//! said so through [`chores_when_idle`]) has its workers wake the thread
//! instead, once no call is under way (see [`Busy`]): the call is
//! answered first. The chores of calls made beside others, and those past
//! [`IDLE_QUEUED`] waiting, wake it at once, as without idle workers.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
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

/// What is done after a call: drop the spent store, then make the next
/// spare (one message, one wake-up).
struct Chore {
    spent: Store<CallState>,
    key: SpareKey,
    kind: Kind,
    make: Box<Make>,
}

impl Chore {
    /// Drops the spent store, then makes a spare into `ready` (on
    /// `runtime`, which drives the instantiation) unless one of the same
    /// component is there.
    fn done(self, ready: &Mutex<Ready>, runtime: &tokio::runtime::Runtime) {
        let Chore {
            spent,
            key,
            kind,
            make,
        } = self;
        drop(spent);
        let kept = ready.lock().unwrap_or_else(|e| e.into_inner());
        if kept[kind as usize]
            .as_ref()
            .is_some_and(|spare| spare.key == key)
        {
            return;
        }
        drop(kept);
        let Some(spare) = make(runtime) else {
            return;
        };
        let slot = spare.made.kind() as usize;
        let old = ready.lock().unwrap_or_else(|e| e.into_inner())[slot].replace(spare);
        drop(old);
    }
}

/// Makes a spare, on the runtime given.
type Make = dyn FnOnce(&tokio::runtime::Runtime) -> Option<Spare> + Send;

/// Chores left for workers going idle, with the spares they make.
struct Idle {
    on: AtomicBool,
    /// Calls under way (see [`Busy`]).
    busy: AtomicUsize,
    queued: AtomicUsize,
    chores: Mutex<VecDeque<(Chore, Arc<Thread>)>>,
}

static IDLE: Idle = Idle {
    on: AtomicBool::new(false),
    busy: AtomicUsize::new(0),
    queued: AtomicUsize::new(0),
    chores: Mutex::new(VecDeque::new()),
};

/// A call under way, from its request to its answer: while one is, idle
/// workers leave the chores, since a worker goes idle in the middle of a
/// call too (waiting on a process, a server), when its answer may come
/// at any moment.
#[must_use = "a call is under way only while its `Busy` is held"]
pub struct Busy(());

impl Busy {
    pub fn new() -> Self {
        IDLE.busy.fetch_add(1, Ordering::AcqRel);
        Self(())
    }
}

impl Default for Busy {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        IDLE.busy.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Chores left for idle workers at most; past them a call wakes the
/// spares' thread, as without them.
pub const IDLE_QUEUED: usize = 4;

/// Says that this process's async runtime calls [`idle_chores`] whenever
/// a worker is about to park (`tokio::runtime::Builder::on_thread_park`):
/// from then on the chores of calls are handed on by its workers. Calls
/// are then made on the runtime's tasks, as a server makes them: a worker
/// goes idle only after running one, and the chores of a call made
/// elsewhere wait until one does (at most [`IDLE_QUEUED`] of them).
pub fn chores_when_idle() {
    IDLE.on.store(true, Ordering::Release);
}

/// Hands the chores left by calls to the spares' thread: for a worker
/// about to go idle. Costs a load or two when there are none, or a call
/// is under way.
pub fn idle_chores() {
    while IDLE.queued.load(Ordering::Acquire) > 0 && IDLE.busy.load(Ordering::Acquire) == 0 {
        let next = {
            let mut chores = IDLE.chores.lock().unwrap_or_else(|e| e.into_inner());
            let next = chores.pop_front();
            IDLE.queued.store(chores.len(), Ordering::Release);
            next
        };
        match next {
            Some((chore, thread)) => thread.send(chore),
            None => return,
        }
    }
}

/// Chores left by calls that wait for an idle worker to hand them on.
pub fn idle_chores_waiting() -> usize {
    IDLE.queued.load(Ordering::Acquire)
}

/// Leaves `chore` to idle workers to hand on, if they do, no call but
/// the one it comes from is under way, and fewer than [`IDLE_QUEUED`]
/// wait; else gives it back.
fn leave_idle(chore: Chore, thread: &Arc<Thread>) -> Option<Chore> {
    if !IDLE.on.load(Ordering::Acquire) || IDLE.busy.load(Ordering::Acquire) > 1 {
        return Some(chore);
    }
    let mut chores = IDLE.chores.lock().unwrap_or_else(|e| e.into_inner());
    if chores.len() >= IDLE_QUEUED {
        return Some(chore);
    }
    chores.push_back((chore, Arc::clone(thread)));
    IDLE.queued.store(chores.len(), Ordering::Release);
    None
}

/// The spares, and the thread that makes them.
#[derive(Default)]
pub(crate) struct Spares {
    thread: Arc<Thread>,
}

/// The spares ready, and the thread that makes them.
#[derive(Default)]
struct Thread {
    ready: Arc<Mutex<Ready>>,
    chores: Mutex<Option<SyncSender<Chore>>>,
}

/// Chores waiting at most: past them (the thread starved by a host busy
/// on every core), a caller drops its spent store itself and no spare is
/// made, so spent stores, and the pool slots they hold, never pile up.
const CHORES_QUEUED: usize = 4;

/// Stores held at most besides those of calls under way: a spare of each
/// kind, the chores queued for the thread and those waiting for idle
/// workers, the one the thread is dropping, and those being handed over
/// (one per thread that calls, taken as two per core).
pub(crate) fn stores_held() -> usize {
    let cores = std::thread::available_parallelism().map_or(2, std::num::NonZero::get);
    CHORES_QUEUED + IDLE_QUEUED + 3 + 2 * cores
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
        let mut ready = self.thread.ready.lock().unwrap_or_else(|e| e.into_inner());
        match ready[kind as usize].take() {
            Some(spare) if spare.key == key => Some(spare),
            other => {
                drop(ready);
                drop(other);
                None
            }
        }
    }

    /// Hands `spent` to be dropped, then, unless a spare of `key` is
    /// ready, `make` to make one of `kind` with: to the thread, through
    /// idle workers (see [`chores_when_idle`]) or at once. Both are
    /// dropped here if the thread cannot be started.
    pub(crate) fn after(
        &self,
        spent: Store<CallState>,
        key: SpareKey,
        kind: Kind,
        make: impl FnOnce(&tokio::runtime::Runtime) -> Option<Spare> + Send + 'static,
    ) {
        let chore = Chore {
            spent,
            key,
            kind,
            make: Box::new(make),
        };
        if let Some(chore) = leave_idle(chore, &self.thread) {
            self.thread.send(chore);
        }
    }
}

impl Thread {
    /// Hands `chore` to the thread, started if it is not running.
    fn send(&self, chore: Chore) {
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
    while let Ok(chore) = chores.recv() {
        chore.done(ready, &runtime);
    }
}
