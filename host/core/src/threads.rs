//! Every tool execution is a thread: a record in the project's registry
//! (`.ai/state/threads/registry.db`) made when the run starts and ended
//! when it ends (a short run's start only noted beside it, in
//! `starts.log`, and the run recorded whole at its end), with the whole result stored as an object in the
//! project's content-addressed store (`.ai/state/objects/`). A run whose
//! future is dropped (a client's cancel) is recorded as cancelled; one
//! whose process dies is found by the registry's sweep.
//!
//! A project whose state folder cannot be written still runs its tools:
//! the result says it was not recorded, and why.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use rye_cas::{Cas, LocalStorage};
use rye_threads::{Ended, Ending, NewThread, Registry, Status};
use serde_json::Value;
use tokio::sync::OnceCell;

/// Where a project keeps its threads and objects.
pub fn state_dir(project: &Path) -> PathBuf {
    project.join(".ai").join("state")
}

/// One project's registry and store.
pub(crate) struct Recorder {
    pub registry: Registry,
    pub cas: Cas<LocalStorage>,
    /// Runs that ended, waiting to be written together.
    pending: Mutex<Pending>,
}

/// Ended runs not yet written, and whether a writer is on its way.
#[derive(Default)]
struct Pending {
    runs: Vec<Finished>,
    writer: bool,
}

/// A run that ended, as its record will say.
struct Finished {
    id: String,
    status: Status,
    /// The run's result, whose `execution_result` object is written out
    /// by the writer, off the reply's path.
    result: Value,
    whole: Option<(NewThread, i64)>,
}

type Slot = Arc<OnceCell<Arc<Recorder>>>;

type Writing = Arc<Mutex<Vec<tokio::task::JoinHandle<()>>>>;

/// Keeps `task` among the records being written.
fn writing(list: &Writing, task: tokio::task::JoinHandle<()>) {
    let mut list = list.lock().expect("records being written lock");
    list.retain(|t| !t.is_finished());
    list.push(task);
}

/// The recorders of the projects this host has run tools in, each opened
/// once (opening sweeps dead runs).
pub(crate) struct Threads {
    enabled: bool,
    open: Mutex<HashMap<PathBuf, Slot>>,
    /// Records being written after their runs returned.
    writing: Writing,
    /// Tells the writers waiting to group records to write now.
    hurry: Hurry,
}

type Hurry = Arc<tokio::sync::watch::Sender<()>>;

/// The parameters' address: SHA-256 of their canonical JSON.
pub(crate) fn params_hash(parameters: &Value) -> String {
    rye_cas::ContentHash::of(&rye_cas::canonical::to_vec(parameters)).hex()
}

impl Threads {
    pub(crate) fn new(enabled: bool) -> Self {
        Self {
            enabled,
            open: Mutex::default(),
            writing: Arc::default(),
            hurry: Arc::new(tokio::sync::watch::channel(()).0),
        }
    }

    pub(crate) fn enabled(&self) -> bool {
        self.enabled
    }

    /// The project's recorder, opened on first use. A failed open is not
    /// kept: the next run tries again (the folder may be writable by then).
    pub(crate) async fn recorder(&self, project: &Path) -> Result<Arc<Recorder>, String> {
        let slot = self
            .open
            .lock()
            .expect("thread registries lock")
            .entry(project.to_owned())
            .or_default()
            .clone();
        slot.get_or_try_init(|| async {
            let state = state_dir(project);
            let registry = Registry::open(&state.join("threads"))
                .await
                .map_err(|e| e.to_string())?;
            Ok(Arc::new(Recorder {
                registry,
                cas: Cas::new(LocalStorage::new(state.join("objects"))),
                pending: Mutex::default(),
            }))
        })
        .await
        .cloned()
    }

    /// Starts recording a run of `item_id` with `parameters`. The start
    /// is noted beside the registry when something waits for it (a run
    /// about to have effects; see [`Recording::begun`]) and written in it
    /// once the run has gone on for [`WHOLE_WITHIN`]; a run that ends
    /// before that is recorded whole, in one transaction, at its end.
    /// Needs a tokio runtime.
    pub(crate) fn start(
        self: &Arc<Self>,
        project: &Path,
        item_id: &str,
        parameters: &Value,
        parent: Option<String>,
    ) -> Recording {
        let id = rye_threads::new_thread_id();
        let new = NewThread {
            item_type: "tool".into(),
            item_id: item_id.to_owned(),
            params_hash: params_hash(parameters),
            chain: Value::Null,
            execution_mode: "sync".into(),
            parent_id: parent,
            process: None,
            thread_id: Some(id.clone()),
        };
        let threads = self.clone();
        let project = project.to_owned();
        let project_dir = project.clone();
        let (begun, written) = tokio::sync::watch::channel(false);
        let claim = Arc::new(Claim::default());
        let started_at = rye_threads::now_ms();
        let task = {
            let (claim, new) = (claim.clone(), new.clone());
            tokio::spawn(async move {
                let recorder = threads.recorder(&project).await;
                tokio::select! {
                    () = tokio::time::sleep(WHOLE_WITHIN) => {}
                    () = claim.wake.notified() => {}
                }
                let started = match recorder {
                    // The run ended first: its end records it whole.
                    Ok(recorder) if !claim.take(STARTED) => Ok(recorder),
                    Ok(recorder) => match recorder.registry.start(new).await {
                        Ok(_) => Ok(recorder),
                        Err(e) => Err(e.to_string()),
                    },
                    Err(e) => Err(e),
                };
                begun.send_replace(true);
                started
            })
        };
        Recording {
            id,
            started: Some(task),
            begun: written,
            writing: self.writing.clone(),
            hurry: self.hurry.clone(),
            claim,
            note: Some(Arc::new(Note {
                threads: self.clone(),
                project: project_dir,
                new: new.clone(),
                at: started_at,
            })),
            whole: Some((new, started_at)),
        }
    }

    /// Waits until the records of the runs that returned are written: for
    /// a reader that must see them, and a process about to exit.
    pub(crate) async fn flush(&self) {
        self.hurry.send_replace(());
        let pending =
            std::mem::take(&mut *self.writing.lock().expect("records being written lock"));
        for task in pending {
            let _ = task.await;
        }
    }
}

type Started = tokio::task::JoinHandle<Result<Arc<Recorder>, String>>;

/// How long a run may go on before its start is written even though
/// nothing waits for it, so a longer run is seen running.
const WHOLE_WITHIN: std::time::Duration = std::time::Duration::from_millis(20);

/// Who writes a run's first record in the registry: the start (a row
/// `running`, ended later) or the end (the whole run at once). Whichever
/// takes it first; a start only noted beside the registry (`NOTED`) still
/// leaves it to either.
#[derive(Default)]
pub(crate) struct Claim {
    taken: std::sync::atomic::AtomicU8,
    /// Wakes the start's writer: something waits for the record, or the
    /// run ended.
    wake: tokio::sync::Notify,
}

const UNTAKEN: u8 = 0;
const STARTED: u8 = 1;
const WHOLE: u8 = 2;
const NOTED: u8 = 3;

impl Claim {
    /// Takes the first record for `who`; false when another has it. A
    /// noted start may be taken from nothing only; a started or a whole
    /// record from nothing or from a noted start.
    fn take(&self, who: u8) -> bool {
        use std::sync::atomic::Ordering;
        let mut now = self.taken.load(Ordering::Acquire);
        loop {
            if now == who {
                return true;
            }
            if !(now == UNTAKEN || (now == NOTED && who != NOTED)) {
                return false;
            }
            match self
                .taken
                .compare_exchange(now, who, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return true,
                Err(taken) => now = taken,
            }
        }
    }
}

/// What noting a run's start takes.
struct Note {
    threads: Arc<Threads>,
    project: PathBuf,
    new: NewThread,
    at: i64,
}

/// A run being recorded. Ending it is the run's last step; dropped
/// unended, it is recorded as cancelled.
pub(crate) struct Recording {
    id: String,
    started: Option<Started>,
    /// Turns true once the thread's record is written (or failed to be).
    begun: tokio::sync::watch::Receiver<bool>,
    writing: Writing,
    hurry: Hurry,
    claim: Arc<Claim>,
    /// What noting the start beside the registry takes; none for a run
    /// another host started.
    note: Option<Arc<Note>>,
    /// The thread as started, and when, for a run recorded whole.
    whole: Option<(NewThread, i64)>,
}

/// Waits until a run's start is kept where a killed host cannot take it
/// back: what a run does that outlives it (a process, a request, a call)
/// waits for this, so nothing starts that a killed host leaves without a
/// record naming it.
#[derive(Clone)]
pub(crate) struct Begun {
    written: tokio::sync::watch::Receiver<bool>,
    claim: Arc<Claim>,
    note: Option<Arc<Note>>,
}

impl Begun {
    /// Done when the start is noted beside the registry (one append), or
    /// else written in it, or could be neither (the run then goes on
    /// unrecorded, with a warning at its end).
    pub(crate) async fn wait(mut self) {
        if let Some(note) = self.note.take()
            && self.noted(&note).await
        {
            return;
        }
        self.recorded().await;
    }

    /// Done when the start is written in the registry itself, or could
    /// not be: for a run that logs events to its thread as it goes (a
    /// graph walk), which need the thread's row.
    pub(crate) async fn recorded(mut self) {
        self.claim.wake.notify_one();
        let _ = self.written.wait_for(|written| *written).await;
    }

    /// Whether the start is noted now. Not when its record is being
    /// written already (the run went on long enough), nor when the note
    /// fails: the start's writer, woken, writes it instead.
    async fn noted(&self, note: &Note) -> bool {
        let Ok(recorder) = note.threads.recorder(&note.project).await else {
            return false;
        };
        if !self.claim.take(NOTED) {
            return false;
        }
        match recorder.registry.note_start(&note.new, note.at) {
            Ok(()) => true,
            Err(e) => {
                tracing::debug!("{e}; the start is written in the registry instead");
                false
            }
        }
    }
}

async fn joined(started: Started) -> Result<Arc<Recorder>, String> {
    started
        .await
        .map_err(|e| format!("recording the thread failed: {e}"))?
}

impl Recording {
    /// The recording of a thread already started (by the host that handed
    /// this one the run).
    pub(crate) fn resumed(threads: &Threads, id: String, recorder: Arc<Recorder>) -> Self {
        let claim = Arc::new(Claim::default());
        claim.take(STARTED);
        Self {
            id,
            started: Some(tokio::spawn(async move { Ok(recorder) })),
            begun: tokio::sync::watch::channel(true).1,
            writing: threads.writing.clone(),
            hurry: threads.hurry.clone(),
            claim,
            note: None,
            whole: None,
        }
    }

    pub(crate) fn id(&self) -> &str {
        &self.id
    }

    /// What waits for the thread's record to be written.
    pub(crate) fn begun(&self) -> Begun {
        Begun {
            written: self.begun.clone(),
            claim: self.claim.clone(),
            note: self.note.clone(),
        }
    }

    /// The thread as started, if its end is to record it whole (nothing
    /// has written its start): the start's writer is told to stand down.
    fn take_whole(&mut self) -> Option<(NewThread, i64)> {
        let whole = self.whole.take()?;
        let taken = self.claim.take(WHOLE);
        self.claim.wake.notify_one();
        taken.then_some(whole)
    }

    /// Ends the thread with the status `result` shows, storing the result:
    /// once the thread is known to be recorded, the writing goes on after
    /// this returns, on the records' thread (see [`records_writer`]),
    /// grouped with the other runs that end within
    /// [`GROUP_WITHIN`] (this host's readers wait for it; see
    /// [`Threads::flush`]). An error when the thread could not be recorded.
    pub(crate) async fn end(mut self, result: &Value, timed_out: bool) -> Result<(), String> {
        let whole = self.take_whole();
        let Some(started) = self.started.take() else {
            return Ok(());
        };
        let recorder = match (&whole, &self.note) {
            // This end writes the whole record, so the start's writer,
            // told to stand down, is not waited for: it would only hand
            // over the same recorder, a task switch later.
            (Some(_), Some(note)) => note.threads.recorder(&note.project).await?,
            _ => joined(started).await?,
        };
        let status = match result.get("status").and_then(Value::as_str) {
            Some("success") => Status::Completed,
            _ if timed_out => Status::TimedOut,
            _ => Status::Error,
        };
        // Copied, not written out: the caller answers with `result` once
        // this returns, and a copy costs a fraction of its canonical
        // bytes, which the writer makes after the answer.
        let finished = Finished {
            result: result.clone(),
            id: self.id.clone(),
            status,
            whole,
        };
        let first = {
            let mut pending = recorder.pending.lock().expect("pending records lock");
            pending.runs.push(finished);
            !std::mem::replace(&mut pending.writer, true)
        };
        if first {
            let mut hurried = self.hurry.subscribe();
            let task = records_writer().spawn(async move {
                tokio::select! {
                    () = tokio::time::sleep(GROUP_WITHIN) => {}
                    _ = hurried.changed() => {}
                }
                write_pending(&recorder).await;
            });
            writing(&self.writing, task);
        }
        Ok(())
    }
}

/// Where the records of ended runs are written: on a thread of their
/// own, so that a group's transaction (and now and then the checkpoint
/// with its `fsync` that follows it) never holds up the async worker a
/// call's answer waits for; over stdio there is one. On the caller's
/// runtime if that thread could not be started.
fn records_writer() -> tokio::runtime::Handle {
    static WRITER: std::sync::OnceLock<Option<tokio::runtime::Handle>> = std::sync::OnceLock::new();
    let writer = WRITER.get_or_init(|| {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .ok()?;
        let handle = runtime.handle().clone();
        std::thread::Builder::new()
            .name("rye-records".into())
            .spawn(move || runtime.block_on(std::future::pending::<()>()))
            .ok()?;
        Some(handle)
    });
    writer
        .clone()
        .unwrap_or_else(tokio::runtime::Handle::current)
}

/// How long the first of the runs that ended waits for others to end, so
/// their records are written in one transaction. Readers in this host
/// never wait for it (they hurry the writer); another process reading the
/// registry sees a run that ended this much later at most.
const GROUP_WITHIN: std::time::Duration = std::time::Duration::from_millis(10);

/// Writes the runs that ended: each result stored, then every thread
/// ended in one transaction; if that fails, each alone, so no run loses
/// its record to another's.
async fn write_pending(recorder: &Recorder) {
    let runs = {
        let mut pending = recorder.pending.lock().expect("pending records lock");
        pending.writer = false;
        std::mem::take(&mut pending.runs)
    };
    let mut ended = Vec::with_capacity(runs.len());
    for Finished {
        id,
        status,
        result,
        whole,
    } in runs
    {
        let ending = stored(recorder, &id, status, result).await;
        ended.push(Ended { id, ending, whole });
    }
    let ended: Arc<[Ended]> = ended.into();
    match recorder.registry.end_all(ended.clone()).await {
        Ok(answers) => {
            for (run, answer) in ended.iter().zip(answers) {
                if let Err(e) = answer {
                    tracing::warn!("thread {}: {e}", run.id);
                }
            }
        }
        Err(_) => {
            for run in ended.iter() {
                let (ending, whole) = (run.ending.clone(), run.whole.clone());
                if let Err(e) = end_thread(recorder, &run.id, ending, whole).await {
                    tracing::warn!("thread {}: {e}", run.id);
                }
            }
        }
    }
    // The starts this host noted are mostly of runs just recorded whole:
    // folding them from time to time keeps their file short.
    if recorder.registry.fold_due()
        && let Err(e) = recorder.registry.fold_starts().await
    {
        tracing::warn!("{e}");
    }
}

/// Results up to this size (their object's canonical bytes) are kept in
/// the registry, in the transaction that ends their thread; larger ones
/// are files in the content store. A row costs a small part of what a
/// new file costs (an inode, often its two folders), and SQLite reads and
/// writes blobs of this size faster than the file system does.
const KEPT_IN_REGISTRY: usize = 64 * 1024;

/// Stores the result object of thread `id`'s run, which ended with
/// `status` and `result`; how its thread ends (with an error saying the
/// result was not stored, if so).
async fn stored(recorder: &Recorder, id: &str, status: Status, mut result: Value) -> Ending {
    let thread_id = Value::from(id);
    let bytes = &rye_cas::object_bytes(
        "execution_result",
        &[("thread_id", &thread_id), ("result", &result)],
    );
    // Its bytes made, the result is needed no more: its error and chain
    // move into the thread's row rather than being copied.
    let (error, chain) = match result.as_object_mut() {
        Some(members) => (
            match members.remove("error") {
                Some(Value::String(error)) => Some(error),
                _ => None,
            },
            members.remove("chain"),
        ),
        None => (None, None),
    };
    let (hash, kept) = if bytes.len() <= KEPT_IN_REGISTRY {
        (rye_cas::ContentHash::of(bytes), Some(Arc::from(&bytes[..])))
    } else {
        // The object names a fresh thread id: it cannot be there yet.
        match recorder.cas.put_new_canonical(bytes).await {
            Ok(hash) => (hash, None),
            Err(e) => {
                let why = format!("the result was not stored: {e}");
                tracing::warn!("thread {id}: {why}");
                return Ending {
                    status,
                    result_hash: None,
                    result: None,
                    error: error.or(Some(why)),
                    chain,
                };
            }
        }
    };
    Ending {
        status,
        result_hash: Some(hash.hex()),
        result: kept,
        error,
        chain,
    }
}

/// Ends thread `id`, or records it whole when `whole` is the thread as
/// started.
async fn end_thread(
    recorder: &Recorder,
    id: &str,
    ending: Ending,
    whole: Option<(NewThread, i64)>,
) -> Result<(), String> {
    match whole {
        Some((new, started_at)) => recorder
            .registry
            .record(new, started_at, ending)
            .await
            .map(|_| ()),
        None => recorder.registry.finish(id, ending).await,
    }
    .map_err(|e| e.to_string())
}

impl Drop for Recording {
    fn drop(&mut self) {
        let whole = self.take_whole();
        let Some(started) = self.started.take() else {
            return;
        };
        let id = self.id.clone();
        let ending = Ending {
            status: Status::Cancelled,
            result_hash: None,
            result: None,
            error: Some("cancelled before it finished; its processes were killed".into()),
            chain: None,
        };
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let handle = runtime.spawn(async move {
                let Ok(recorder) = joined(started).await else {
                    return;
                };
                if let Err(e) = end_thread(&recorder, &id, ending, whole).await {
                    tracing::warn!("thread {id}: {e}");
                }
            });
            writing(&self.writing, handle);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A run about to act waits for its start to be kept; the start is
    /// noted beside the registry, and a host that dies right after (before
    /// anything is written in the registry) still leaves the run to be
    /// found by the next one.
    #[tokio::test]
    async fn a_start_waited_for_is_noted_and_found_after_its_host_dies() {
        let project = tempfile::tempdir().unwrap();
        let threads = Arc::new(Threads::new(true));
        let recording = threads.start(project.path(), "demo/call", &json!({}), None);
        recording.begun().wait().await;
        let id = recording.id().to_owned();
        let dir = state_dir(project.path()).join("threads");
        let noted = std::fs::read_to_string(dir.join("starts.log")).unwrap();
        assert!(noted.contains(&id), "{noted}");
        // Nothing more of this run is written: its host is gone.
        std::mem::forget(recording);

        let next = Registry::open(&dir).await.unwrap();
        let thread = next.get(&id).await.unwrap().expect("the run is found");
        assert_eq!(thread.status, Status::Running);
        assert_eq!(thread.pid, Some(std::process::id()));
        assert_eq!(thread.item_id, "demo/call");
    }
}
