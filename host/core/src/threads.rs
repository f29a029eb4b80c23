//! Every tool execution is a thread: a record in the project's registry
//! (`.ai/state/threads/registry.db`) made when the run starts and ended
//! when it ends, with the whole result stored as an object in the
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
use rye_threads::{Ending, NewThread, Registry, Status};
use serde_json::{Map, Value, json};
use tokio::sync::OnceCell;

/// Where a project keeps its threads and objects.
pub fn state_dir(project: &Path) -> PathBuf {
    project.join(".ai").join("state")
}

/// One project's registry and store.
pub(crate) struct Recorder {
    pub registry: Registry,
    pub cas: Cas<LocalStorage>,
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
}

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
            }))
        })
        .await
        .cloned()
    }

    /// Starts recording a run of `item_id` with `parameters`: the record
    /// is written while the run's chain is checked and planned; the run's
    /// effects wait for it (see [`Recording::begun`]). Needs a tokio
    /// runtime.
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
        let (begun, written) = tokio::sync::watch::channel(false);
        let started = tokio::spawn(async move {
            let recorder = threads.recorder(&project).await;
            let started = match recorder {
                Ok(recorder) => match recorder.registry.start(new).await {
                    Ok(_) => Ok(recorder),
                    Err(e) => Err(e.to_string()),
                },
                Err(e) => Err(e),
            };
            begun.send_replace(true);
            started
        });
        Recording {
            id,
            started: Some(started),
            begun: written,
            writing: self.writing.clone(),
        }
    }

    /// Waits until the records of the runs that returned are written: for
    /// a reader that must see them, and a process about to exit.
    pub(crate) async fn flush(&self) {
        let pending =
            std::mem::take(&mut *self.writing.lock().expect("records being written lock"));
        for task in pending {
            let _ = task.await;
        }
    }
}

type Started = tokio::task::JoinHandle<Result<Arc<Recorder>, String>>;

/// A run being recorded. Ending it is the run's last step; dropped
/// unended, it is recorded as cancelled.
pub(crate) struct Recording {
    id: String,
    started: Option<Started>,
    /// Turns true once the thread's record is written (or failed to be).
    begun: tokio::sync::watch::Receiver<bool>,
    writing: Writing,
}

/// Waits until a run's thread record is written: what a run does that
/// outlives it (a process, a request, a call) waits for this, so nothing
/// starts that a killed host leaves without a record naming it.
#[derive(Clone)]
pub(crate) struct Begun(tokio::sync::watch::Receiver<bool>);

impl Begun {
    /// Done when the record is written or could not be (the run then goes
    /// on unrecorded, with a warning at its end).
    pub(crate) async fn wait(mut self) {
        let _ = self.0.wait_for(|written| *written).await;
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
        Self {
            id,
            started: Some(tokio::spawn(async move { Ok(recorder) })),
            begun: tokio::sync::watch::channel(true).1,
            writing: threads.writing.clone(),
        }
    }

    pub(crate) fn id(&self) -> &str {
        &self.id
    }

    /// What waits for the thread's record to be written.
    pub(crate) fn begun(&self) -> Begun {
        Begun(self.begun.clone())
    }

    /// Ends the thread with the status `result` shows, storing the result:
    /// once the thread is known to be recorded, the writing goes on after
    /// this returns (this host's readers wait for it; see
    /// [`Threads::flush`]). An error when the thread could not be recorded.
    pub(crate) async fn end(mut self, result: &Value, timed_out: bool) -> Result<(), String> {
        let Some(started) = self.started.take() else {
            return Ok(());
        };
        let recorder = joined(started).await?;
        let id = self.id.clone();
        let status = match result.get("status").and_then(Value::as_str) {
            Some("success") => Status::Completed,
            _ if timed_out => Status::TimedOut,
            _ => Status::Error,
        };
        let result = result.clone();
        let task = tokio::spawn(async move {
            if let Err(e) = store(&recorder, &id, status, result).await {
                tracing::warn!("thread {id}: {e}");
            }
        });
        writing(&self.writing, task);
        Ok(())
    }
}

/// Stores `result` and ends thread `id` with `status`.
async fn store(recorder: &Recorder, id: &str, status: Status, result: Value) -> Result<(), String> {
    let error = result
        .get("error")
        .and_then(Value::as_str)
        .map(str::to_owned);
    let chain = result.get("chain").cloned();
    let mut fields = Map::new();
    fields.insert("thread_id".into(), json!(id));
    fields.insert("result".into(), result);
    let stored = recorder
        .cas
        .put_object(&rye_cas::object("execution_result", fields))
        .await;
    let (result_hash, store_error) = match stored {
        Ok(hash) => (Some(hash.hex()), None),
        Err(e) => (None, Some(format!("the result was not stored: {e}"))),
    };
    recorder
        .registry
        .finish(
            id,
            Ending {
                status,
                result_hash,
                error: error.or(store_error.clone()),
                chain,
            },
        )
        .await
        .map_err(|e| e.to_string())?;
    store_error.map_or(Ok(()), Err)
}

impl Drop for Recording {
    fn drop(&mut self) {
        let Some(started) = self.started.take() else {
            return;
        };
        let id = self.id.clone();
        let ending = Ending {
            status: Status::Cancelled,
            result_hash: None,
            error: Some("cancelled before it finished; its processes were killed".into()),
            chain: None,
        };
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let handle = runtime.spawn(async move {
                let Ok(recorder) = joined(started).await else {
                    return;
                };
                if let Err(e) = recorder.registry.finish(&id, ending).await {
                    tracing::warn!("thread {id}: {e}");
                }
            });
            writing(&self.writing, handle);
        }
    }
}
