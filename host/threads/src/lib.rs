//! Every execution is a thread: a record in the project's registry
//! (`.ai/state/threads/registry.db`, SQLite, as the original keeps it)
//! saying what ran, for whom, in which process, how it ended, and where
//! its result is stored; and an append-only log of its events.
//!
//! The registry never lets a dead run claim to be running. A record names
//! the process that runs it by an identity that survives pid reuse
//! ([`ProcessIdentity`]); [`Registry::recover`] — run whenever a registry
//! is opened — marks every `running` record whose process is gone as
//! `killed`. A record moves out of `running` exactly once: finishing a
//! thread that was already finished, cancelled or swept is refused.
//!
//! Several processes share one registry (`rye serve`, a CLI command, a
//! detached runner): SQLite in WAL mode with a busy timeout serialises
//! their writes.

mod process;
mod starts;

use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use std::sync::{Arc, Mutex};

use rusqlite::{Connection, ErrorCode, OpenFlags, Transaction, TransactionBehavior, ffi, params};
use serde::Serialize;
use serde_json::{Value, json};

pub use process::ProcessIdentity;

/// How a thread stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    Running,
    Completed,
    Error,
    Cancelled,
    /// Its process died without finishing it (found by the recovery sweep).
    Killed,
    TimedOut,
}

impl Status {
    pub const ALL: [Status; 6] = [
        Status::Running,
        Status::Completed,
        Status::Error,
        Status::Cancelled,
        Status::Killed,
        Status::TimedOut,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Status::Running => "running",
            Status::Completed => "completed",
            Status::Error => "error",
            Status::Cancelled => "cancelled",
            Status::Killed => "killed",
            Status::TimedOut => "timed_out",
        }
    }
}

impl FromStr for Status {
    type Err = ThreadError;

    fn from_str(s: &str) -> Result<Self, ThreadError> {
        Status::ALL
            .into_iter()
            .find(|status| status.as_str() == s)
            .ok_or_else(|| ThreadError::BadStatus(s.chars().take(40).collect()))
    }
}

impl std::fmt::Display for Status {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ThreadError {
    #[error("{path}: the thread registry cannot be opened: {source}")]
    Open {
        path: PathBuf,
        #[source]
        source: rusqlite::Error,
    },
    #[error("{path}: the thread registry's folder cannot be made: {source}")]
    Folder {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "{path}: the thread registry was written by a newer Rye (schema {found}, this one knows {known})"
    )]
    NewerSchema {
        path: PathBuf,
        found: i64,
        known: i64,
    },
    #[error("the thread registry: {0}")]
    Db(#[from] rusqlite::Error),
    #[error("no thread {0}")]
    NotFound(String),
    #[error("{0}: the thread has no id")]
    MissingId(&'static str),
    #[error("thread {id} is {status}, not running; it ends only once")]
    NotRunning { id: String, status: Status },
    #[error(
        "{0:?} is not a thread status (running, completed, error, cancelled, killed, timed_out)"
    )]
    BadStatus(String),
    #[error("the registry holds a record it cannot read: {0}")]
    Corrupt(String),
    #[error("the thread registry's worker stopped: {0}")]
    Worker(String),
    #[error("{path}: the noted starts cannot be written or read: {source}")]
    Starts {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// What a new thread records.
#[derive(Debug, Clone, Default)]
pub struct NewThread {
    /// `tool`, `directive`, `knowledge`.
    pub item_type: String,
    pub item_id: String,
    /// SHA-256 of the parameters' canonical JSON.
    pub params_hash: String,
    /// The resolved chain, as the execute result shows it.
    pub chain: Value,
    /// `sync` or `async`.
    pub execution_mode: String,
    pub parent_id: Option<String>,
    /// The process that runs it; `None` records this process.
    pub process: Option<ProcessIdentity>,
    /// The id to record it under (see [`new_thread_id`]); `None` makes one.
    pub thread_id: Option<String>,
}

/// A new thread id: a UUID, as the original's. Version 7 where the
/// original's is a random version 4: it reads alike, but it begins with
/// the time, so a registry's new rows go at the end of its index instead
/// of into a random page of it (a commit then rewrites a page or two, not
/// one per run). Its last 12 digits are random.
pub fn new_thread_id() -> String {
    uuid::Uuid::now_v7().to_string()
}

/// A thread as the registry holds it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Thread {
    pub thread_id: String,
    pub parent_id: Option<String>,
    pub item_type: String,
    pub item_id: String,
    pub params_hash: String,
    pub chain: Value,
    pub status: Status,
    pub execution_mode: String,
    /// Milliseconds since the Unix epoch.
    pub created_at: i64,
    pub updated_at: i64,
    pub finished_at: Option<i64>,
    pub pid: Option<u32>,
    /// The content address of the stored result object.
    pub result_hash: Option<String>,
    pub error: Option<String>,
    #[serde(skip)]
    pub process: Option<ProcessIdentity>,
}

/// One entry of a thread's event log.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Event {
    pub seq: i64,
    pub at: i64,
    pub kind: String,
    pub detail: Value,
}

/// How a thread ended.
#[derive(Debug, Clone)]
pub struct Ending {
    pub status: Status,
    pub result_hash: Option<String>,
    /// The result object's bytes, when they are kept in the registry
    /// beside the thread (see [`Registry::result`]) rather than in the
    /// content store. `result_hash` is their hash.
    pub result: Option<Arc<[u8]>>,
    pub error: Option<String>,
    /// The resolved chain, when it was not known at the start.
    pub chain: Option<Value>,
}

/// A run to end, for [`Registry::end_all`].
#[derive(Debug, Clone)]
pub struct Ended {
    pub id: String,
    pub ending: Ending,
    /// The run as started and when (ms since the epoch), when nothing
    /// recorded its start: it is recorded whole.
    pub whole: Option<(NewThread, i64)>,
}

/// The schema, one step per version (`PRAGMA user_version`).
const MIGRATIONS: &[&str] = &[
    r"
CREATE TABLE threads (
    thread_id TEXT PRIMARY KEY NOT NULL,
    parent_id TEXT,
    item_type TEXT NOT NULL,
    item_id TEXT NOT NULL,
    params_hash TEXT NOT NULL,
    chain TEXT NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('running', 'completed', 'error', 'cancelled', 'killed', 'timed_out')),
    execution_mode TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    finished_at INTEGER,
    pid INTEGER,
    pid_start INTEGER,
    boot_id TEXT,
    result_hash TEXT,
    error TEXT
);
CREATE INDEX threads_by_status ON threads (status);
CREATE INDEX threads_by_created ON threads (created_at);
CREATE TABLE events (
    thread_id TEXT NOT NULL REFERENCES threads (thread_id) ON DELETE CASCADE,
    seq INTEGER NOT NULL,
    at INTEGER NOT NULL,
    kind TEXT NOT NULL,
    detail TEXT NOT NULL,
    PRIMARY KEY (thread_id, seq)
);
",
    r"
CREATE TABLE results (
    thread_id TEXT PRIMARY KEY NOT NULL REFERENCES threads (thread_id) ON DELETE CASCADE,
    object BLOB NOT NULL
);
",
];

/// How long a write waits for another process's write to finish.
const BUSY_WAIT: Duration = Duration::from_secs(10);

/// A project's thread registry.
///
/// One connection, shared by this process's callers. A statement runs on
/// the caller's thread when the connection is free and no other process
/// holds the write lock — tens of microseconds, less than handing it to
/// another thread would cost; otherwise it goes to the blocking pool and
/// waits there (at most [`BUSY_WAIT`]), never on the async runtime.
#[derive(Debug, Clone)]
pub struct Registry {
    conn: Arc<Mutex<Connection>>,
    path: PathBuf,
    starts: Arc<starts::Starts>,
}

/// Milliseconds since the Unix epoch, as the registry's times are kept.
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

fn is_busy(e: &rusqlite::Error) -> bool {
    matches!(
        e.sqlite_error_code(),
        Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked)
    )
}

impl Registry {
    /// The registry in `dir` (`.ai/state/threads/`), made if missing, its
    /// schema brought up to date, and dead runs swept.
    pub async fn open(dir: &Path) -> Result<Self, ThreadError> {
        let dir = dir.to_owned();
        let registry = tokio::task::spawn_blocking(move || Self::open_blocking(&dir))
            .await
            .map_err(|e| ThreadError::Worker(e.to_string()))??;
        registry.recover().await?;
        Ok(registry)
    }

    fn open_blocking(dir: &Path) -> Result<Self, ThreadError> {
        let path = dir.join("registry.db");
        std::fs::create_dir_all(dir).map_err(|source| ThreadError::Folder {
            path: dir.to_owned(),
            source,
        })?;
        let open_error = |source| ThreadError::Open {
            path: path.clone(),
            source,
        };
        let conn = Connection::open_with_flags(
            &path,
            OpenFlags::SQLITE_OPEN_READ_WRITE
                | OpenFlags::SQLITE_OPEN_CREATE
                | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(open_error)?;
        conn.busy_timeout(BUSY_WAIT).map_err(open_error)?;
        // The journal mode is the file's, set by whoever comes first; the
        // rest are this connection's. Changing it takes the file whole, and
        // SQLite answers busy at once (not after the busy timeout) while
        // another connection holds it, so this waits here.
        let deadline = std::time::Instant::now() + BUSY_WAIT;
        loop {
            match conn.query_row("PRAGMA journal_mode = WAL", [], |_| Ok(())) {
                Err(e) if is_busy(&e) && std::time::Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(5));
                }
                done => break done.map_err(open_error)?,
            }
        }
        conn.execute_batch("PRAGMA synchronous = NORMAL; PRAGMA foreign_keys = ON;")
            .map_err(open_error)?;
        migrate(&conn, &path)?;
        Ok(Self {
            conn: Arc::new(Mutex::new(conn)),
            path,
            starts: Arc::new(starts::Starts::new(dir)),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Runs `statement` on the connection: here when that is quick,
    /// otherwise on the blocking pool. `statement` must change nothing when
    /// it fails busy (one autocommit statement), since it is then run
    /// again.
    async fn run<T, F>(&self, statement: F) -> Result<T, ThreadError>
    where
        T: Send + 'static,
        F: Fn(&Connection) -> Result<T, ThreadError> + Send + 'static,
    {
        if let Ok(conn) = self.conn.try_lock() {
            conn.busy_timeout(Duration::ZERO)?;
            let done = statement(&conn);
            conn.busy_timeout(BUSY_WAIT)?;
            match done {
                Err(ThreadError::Db(e)) if is_busy(&e) => {}
                done => return done,
            }
        }
        let conn = self.conn.clone();
        tokio::task::spawn_blocking(move || {
            let conn = conn.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
            statement(&conn)
        })
        .await
        .map_err(|e| ThreadError::Worker(e.to_string()))?
    }

    /// Records a new running thread; its id.
    pub async fn start(&self, new: NewThread) -> Result<String, ThreadError> {
        let id = new.thread_id.clone().unwrap_or_else(new_thread_id);
        let recorded = id.clone();
        let now = now_ms();
        self.run(move |conn| {
            let tx = Transaction::new_unchecked(conn, TransactionBehavior::Immediate)?;
            // A noted start folded in while the run went on is this row.
            if status_of(&tx, &recorded)? != Some(Status::Running) {
                insert_thread(&tx, &recorded, &new, now, None)?;
            }
            tx.commit()?;
            Ok(())
        })
        .await?;
        Ok(id)
    }

    /// Notes the start of thread `new.thread_id` at `at` (ms since the
    /// epoch) in one append to the file beside the registry: a killed
    /// host's run is found there when a registry is next opened. The run
    /// is then recorded whole at its end, or started with [`Self::start`]
    /// if it goes on; either finds the row a fold may have made meanwhile.
    pub fn note_start(&self, new: &NewThread, at: i64) -> Result<(), ThreadError> {
        let id = new
            .thread_id
            .as_deref()
            .ok_or(ThreadError::MissingId("noting a start"))?;
        self.starts.note(id, new, at)
    }

    /// Whether this host has noted enough starts to fold them now.
    pub fn fold_due(&self) -> bool {
        self.starts.fold_due()
    }

    /// Folds the noted starts into the registry as running threads (a
    /// thread it holds already is left as it is) and empties their file;
    /// how many were added.
    pub async fn fold_starts(&self) -> Result<usize, ThreadError> {
        let starts = self.starts.clone();
        self.run(move |conn| starts.fold(conn)).await
    }

    /// The file noted starts are appended to.
    pub fn starts_path(&self) -> &Path {
        self.starts.path()
    }

    /// Records a whole run at once, started at `started_at` (ms since the
    /// epoch) and ended now: one transaction instead of two, for a run
    /// that ended before anyone needed to see it running. Its events are
    /// the same as a thread started and finished.
    pub async fn record(
        &self,
        new: NewThread,
        started_at: i64,
        ending: Ending,
    ) -> Result<String, ThreadError> {
        let id = new.thread_id.clone().unwrap_or_else(new_thread_id);
        let ended = Ended {
            id: id.clone(),
            ending,
            whole: Some((new, started_at)),
        };
        let mut answers = self.end_all(vec![ended]).await?;
        answers.pop().unwrap_or(Ok(()))?;
        Ok(id)
    }

    /// Ends every run of `ended` in one transaction: each started one is
    /// finished, each given whole is recorded whole. A registry's commit
    /// rewrites every page it touched, most of them the same for every
    /// run, so a host that ends runs faster than it can commit them one
    /// by one groups them here. One answer per run, in order: a run that
    /// is not running any more is refused alone. An error (the
    /// transaction written for none) only when the registry itself fails.
    pub async fn end_all(
        &self,
        ended: impl Into<Arc<[Ended]>>,
    ) -> Result<Vec<Result<(), ThreadError>>, ThreadError> {
        let ended: Arc<[Ended]> = ended.into();
        self.run(move |conn| {
            let tx = Transaction::new_unchecked(conn, TransactionBehavior::Immediate)?;
            let mut answers = Vec::with_capacity(ended.len());
            for run in ended.iter() {
                let now = now_ms();
                // A run whose noted start was folded in has a row to end.
                let whole = match &run.whole {
                    Some(_) if status_of(&tx, &run.id)?.is_some() => None,
                    whole => whole.as_ref(),
                };
                let changed = match whole {
                    Some((new, started_at)) => {
                        let at = now.max(*started_at);
                        insert_thread(&tx, &run.id, new, *started_at, Some((&run.ending, at)))?;
                        1
                    }
                    None => end_running(&tx, &run.id, &run.ending, now)?,
                };
                answers.push(if changed > 0 {
                    Ok(())
                } else {
                    Err(status_of(&tx, &run.id)?.map_or_else(
                        || ThreadError::NotFound(run.id.clone()),
                        |status| ThreadError::NotRunning {
                            id: run.id.clone(),
                            status,
                        },
                    ))
                });
            }
            tx.commit()?;
            Ok(answers)
        })
        .await
    }

    /// Hands a running thread to another process (a detached runner).
    pub async fn adopt(&self, id: &str, process: &ProcessIdentity) -> Result<(), ThreadError> {
        let (thread, process) = (id.to_owned(), process.clone());
        let changed = self
            .run(move |conn| {
                Ok(conn
                    .prepare_cached(
                        "UPDATE threads SET pid = ?1, pid_start = ?2, boot_id = ?3, updated_at = ?4 \
                         WHERE thread_id = ?5 AND status = 'running'",
                    )?
                    .execute(params![
                        i64::from(process.pid),
                        process.start_ticks as i64,
                        process.boot_id,
                        now_ms(),
                        thread
                    ])?)
            })
            .await?;
        if changed == 0 {
            return Err(self.not_running(id).await);
        }
        Ok(())
    }

    /// Ends a running thread. Refused when it is not running any more.
    pub async fn finish(&self, id: &str, ending: Ending) -> Result<(), ThreadError> {
        let ended = Ended {
            id: id.to_owned(),
            ending,
            whole: None,
        };
        let mut answers = self.end_all(vec![ended]).await?;
        answers.pop().unwrap_or(Ok(()))
    }

    async fn not_running(&self, id: &str) -> ThreadError {
        match self.get(id).await {
            Ok(Some(thread)) => ThreadError::NotRunning {
                id: id.to_owned(),
                status: thread.status,
            },
            Ok(None) => ThreadError::NotFound(id.to_owned()),
            Err(e) => e,
        }
    }

    pub async fn get(&self, id: &str) -> Result<Option<Thread>, ThreadError> {
        let id = id.to_owned();
        self.run(move |conn| {
            let mut statement = conn.prepare_cached(&format!(
                "SELECT {COLUMNS} FROM threads WHERE thread_id = ?1"
            ))?;
            let mut rows = statement.query([&id])?;
            rows.next()?.map(thread).transpose()
        })
        .await
    }

    /// The result object kept beside thread `id` (as its ending gave it),
    /// if there is one. A small result is kept here, in the transaction
    /// that ends its thread, rather than as a file of its own: one row
    /// costs far less than making a file (and often its folders), and
    /// goes with its thread when the thread is pruned.
    pub async fn result(&self, id: &str) -> Result<Option<Vec<u8>>, ThreadError> {
        let id = id.to_owned();
        self.run(move |conn| {
            let mut statement =
                conn.prepare_cached("SELECT object FROM results WHERE thread_id = ?1")?;
            let mut rows = statement.query([&id])?;
            Ok(rows.next()?.map(|row| row.get(0)).transpose()?)
        })
        .await
    }

    /// The newest threads first, at most `limit`, of one status if given.
    pub async fn list(
        &self,
        status: Option<Status>,
        limit: u32,
    ) -> Result<Vec<Thread>, ThreadError> {
        self.run(move |conn| {
            // Two statements, not one with `?1 IS NULL OR status = ?1`:
            // SQLite plans that one as a walk of every thread by time, so
            // finding the few running ones (as every process does when it
            // opens the registry) would cost the whole history.
            let limit = i64::from(limit);
            let mut statement;
            let mut rows = match status {
                Some(status) => {
                    statement = conn.prepare_cached(&list_of_status())?;
                    statement.query(params![status.as_str(), limit])?
                }
                None => {
                    statement = conn.prepare_cached(&format!(
                        "SELECT {COLUMNS} FROM threads ORDER BY created_at DESC, rowid DESC LIMIT ?1"
                    ))?;
                    statement.query(params![limit])?
                }
            };
            let mut threads = Vec::new();
            while let Some(row) = rows.next()? {
                threads.push(thread(row)?);
            }
            Ok(threads)
        })
        .await
    }

    /// Folds the noted starts in, then marks every running thread whose
    /// process is gone as `killed`; the ids it marked. Noted starts that
    /// cannot be read (the file is a link, or unreadable) are left where
    /// they are, with a warning: the registry still opens.
    pub async fn recover(&self) -> Result<Vec<String>, ThreadError> {
        if let Err(e) = self.fold_starts().await {
            tracing::warn!("{e}");
        }
        let running = self.list(Some(Status::Running), u32::MAX).await?;
        let mut swept = Vec::new();
        for thread in running {
            if thread
                .process
                .as_ref()
                .is_some_and(ProcessIdentity::is_alive)
            {
                continue;
            }
            let why = match thread.pid {
                Some(pid) => {
                    format!("the process running it (pid {pid}) ended without finishing it")
                }
                None => "no process was recorded as running it".to_owned(),
            };
            let ended = self
                .finish(
                    &thread.thread_id,
                    Ending {
                        status: Status::Killed,
                        result_hash: None,
                        result: None,
                        error: Some(why),
                        chain: None,
                    },
                )
                .await;
            match ended {
                Ok(()) => swept.push(thread.thread_id),
                // It finished (or was swept) meanwhile.
                Err(ThreadError::NotRunning { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(swept)
    }

    /// Appends an event to a thread's log; its sequence number.
    pub async fn event(&self, id: &str, kind: &str, detail: &Value) -> Result<i64, ThreadError> {
        let (thread, kind, detail) = (id.to_owned(), kind.to_owned(), detail.clone());
        self.run(move |conn| append_event(conn, &thread, now_ms(), &kind, &detail))
            .await
    }

    /// Appends `events` (kind and detail each) to a thread's log at once,
    /// in order; the last one's sequence number (0 for none).
    pub async fn events_at_once(
        &self,
        id: &str,
        events: Vec<(String, Value)>,
    ) -> Result<i64, ThreadError> {
        if events.is_empty() {
            return Ok(0);
        }
        let thread = id.to_owned();
        self.run(move |conn| {
            let at = now_ms();
            let transaction = conn.unchecked_transaction()?;
            let mut last = 0;
            for (kind, detail) in &events {
                last = append_event(&transaction, &thread, at, kind, detail)?;
            }
            transaction.commit()?;
            Ok(last)
        })
        .await
    }

    /// A thread's events after `after` (0: all), in order.
    pub async fn events(&self, id: &str, after: i64) -> Result<Vec<Event>, ThreadError> {
        let id = id.to_owned();
        self.run(move |conn| {
            let mut statement = conn.prepare_cached(
                "SELECT seq, at, kind, detail FROM events WHERE thread_id = ?1 AND seq > ?2 ORDER BY seq",
            )?;
            let mut rows = statement.query(params![id, after])?;
            let mut events = Vec::new();
            while let Some(row) = rows.next()? {
                let detail: String = row.get("detail")?;
                events.push(Event {
                    seq: row.get("seq")?,
                    at: row.get("at")?,
                    kind: row.get("kind")?,
                    detail: serde_json::from_str(&detail)
                        .map_err(|e| ThreadError::Corrupt(e.to_string()))?,
                });
            }
            Ok(events)
        })
        .await
    }

    /// Removes the threads that finished before `cutoff_ms` (never a
    /// running one) with their events; one entry per thread removed: the
    /// result hash it held, for the store to let go of.
    pub async fn prune(&self, cutoff_ms: i64) -> Result<Vec<Option<String>>, ThreadError> {
        self.run(move |conn| {
            let mut statement = conn.prepare_cached(
                "DELETE FROM threads WHERE status != 'running' AND finished_at < ?1 RETURNING result_hash",
            )?;
            let mut rows = statement.query([cutoff_ms])?;
            let mut hashes = Vec::new();
            while let Some(row) = rows.next()? {
                hashes.push(row.get::<_, Option<String>>(0)?);
            }
            Ok(hashes)
        })
        .await
    }

    /// Lets go of the connection (it closes when the last clone is dropped).
    pub async fn close(&self) {
        let conn = self.conn.clone();
        let _ = tokio::task::spawn_blocking(move || {
            let conn = conn.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
            conn.flush_prepared_statement_cache();
        })
        .await;
    }
}

/// The newest threads of status `?1` first, at most `?2`.
fn list_of_status() -> String {
    format!(
        "SELECT {COLUMNS} FROM threads WHERE status = ?1 \
         ORDER BY created_at DESC, rowid DESC LIMIT ?2"
    )
}

/// Inserts thread `id`, started at `at`, with its `started` event; when
/// `ended` says how and when it ended, as ended, with its `finished`
/// event: the same record a start and an end make, in one row's write.
fn insert_thread(
    conn: &Connection,
    id: &str,
    new: &NewThread,
    at: i64,
    ended: Option<(&Ending, i64)>,
) -> Result<(), ThreadError> {
    let process = new.process.clone().or_else(ProcessIdentity::current);
    let chain = ended
        .and_then(|(ending, _)| ending.chain.as_ref())
        .unwrap_or(&new.chain)
        .to_string();
    conn.prepare_cached(
        "INSERT INTO threads (thread_id, parent_id, item_type, item_id, params_hash, chain, status, \
         execution_mode, created_at, updated_at, pid, pid_start, boot_id, finished_at, result_hash, error) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, COALESCE(?12, ?9), ?10, ?11, ?13, ?12, ?14, ?15)",
    )?
    .execute(params![
        id,
        new.parent_id,
        new.item_type,
        new.item_id,
        new.params_hash,
        chain,
        ended.map_or(Status::Running, |(ending, _)| ending.status).as_str(),
        new.execution_mode,
        at,
        process.as_ref().map(|p| i64::from(p.pid)),
        process.as_ref().map(|p| p.start_ticks as i64),
        ended.map(|(_, finished_at)| finished_at),
        process.as_ref().map(|p| p.boot_id.clone()),
        ended.and_then(|(ending, _)| ending.result_hash.clone()),
        ended.and_then(|(ending, _)| ending.error.clone()),
    ])?;
    // The thread is new (its row's insert would have failed otherwise),
    // so its log starts here: 1 is `started`, 2 `finished`.
    let detail = json!({"pid": process.as_ref().map(|p| p.pid)});
    insert_event(conn, id, 1, at, "started", &detail)?;
    if let Some((ending, finished_at)) = ended {
        insert_event(conn, id, 2, finished_at, "finished", &finished(ending))?;
        keep_result(conn, id, ending)?;
    }
    Ok(())
}

/// Keeps the result object of thread `id` beside it, when `ending`
/// carries one.
fn keep_result(conn: &Connection, id: &str, ending: &Ending) -> Result<(), ThreadError> {
    if let Some(object) = &ending.result {
        conn.prepare_cached("INSERT OR REPLACE INTO results (thread_id, object) VALUES (?1, ?2)")?
            .execute(params![id, &object[..]])?;
    }
    Ok(())
}

/// Writes event `seq` of a thread whose log is known to have `seq - 1`
/// events.
fn insert_event(
    conn: &Connection,
    thread: &str,
    seq: i64,
    at: i64,
    kind: &str,
    detail: &Value,
) -> Result<(), ThreadError> {
    conn.prepare_cached(
        "INSERT INTO events (thread_id, seq, at, kind, detail) VALUES (?1, ?2, ?3, ?4, ?5)",
    )?
    .execute(params![thread, seq, at, kind, detail.to_string()])?;
    Ok(())
}

/// Ends running thread `id` at `at` as `ending` says, with its
/// `finished` event; how many rows changed (0: it was not running).
fn end_running(
    conn: &Connection,
    id: &str,
    ending: &Ending,
    at: i64,
) -> Result<usize, ThreadError> {
    let chain = ending.chain.as_ref().map(Value::to_string);
    let changed = conn
        .prepare_cached(
            "UPDATE threads SET status = ?1, finished_at = ?2, updated_at = ?2, result_hash = ?3, \
             error = ?4, chain = COALESCE(?5, chain) WHERE thread_id = ?6 AND status = 'running'",
        )?
        .execute(params![
            ending.status.as_str(),
            at,
            ending.result_hash,
            ending.error,
            chain,
            id
        ])?;
    if changed > 0 {
        append_event(conn, id, at, "finished", &finished(ending))?;
        keep_result(conn, id, ending)?;
    }
    Ok(changed)
}

/// A `finished` event's detail.
fn finished(ending: &Ending) -> Value {
    json!({
        "status": ending.status,
        "result_hash": ending.result_hash,
        "error": ending.error,
    })
}

/// Thread `id`'s status, if it is recorded.
fn status_of(conn: &Connection, id: &str) -> Result<Option<Status>, ThreadError> {
    let mut statement = conn.prepare_cached("SELECT status FROM threads WHERE thread_id = ?1")?;
    let mut rows = statement.query([id])?;
    match rows.next()? {
        Some(row) => Ok(Some(row.get::<_, String>(0)?.parse()?)),
        None => Ok(None),
    }
}

/// Appends an event to `thread`'s log; its sequence number.
fn append_event(
    conn: &Connection,
    thread: &str,
    at: i64,
    kind: &str,
    detail: &Value,
) -> Result<i64, ThreadError> {
    conn.prepare_cached(
        "INSERT INTO events (thread_id, seq, at, kind, detail) \
         SELECT ?1, COALESCE(MAX(seq), 0) + 1, ?2, ?3, ?4 FROM events WHERE thread_id = ?1 \
         RETURNING seq",
    )?
    .query_row(params![thread, at, kind, detail.to_string()], |row| {
        row.get(0)
    })
    .map_err(|e| {
        let foreign_key = matches!(&e, rusqlite::Error::SqliteFailure(failure, _)
            if failure.extended_code == ffi::SQLITE_CONSTRAINT_FOREIGNKEY);
        if foreign_key {
            ThreadError::NotFound(thread.to_owned())
        } else {
            ThreadError::Db(e)
        }
    })
}

/// Brings the schema up to date (`PRAGMA user_version` counts the steps).
fn migrate(conn: &Connection, path: &Path) -> Result<(), ThreadError> {
    let known = MIGRATIONS.len() as i64;
    let version = || -> Result<i64, ThreadError> {
        Ok(conn.query_row("PRAGMA user_version", [], |row| row.get(0))?)
    };
    if version()? == known {
        return Ok(());
    }
    // The write lock first, so two processes creating the registry at
    // once wait for each other (a deferred transaction that reads and
    // then writes would fail at once instead).
    conn.execute_batch("BEGIN IMMEDIATE")?;
    let migrated = (|| {
        let found = version()?;
        if found > known {
            return Err(ThreadError::NewerSchema {
                path: path.to_owned(),
                found,
                known,
            });
        }
        for step in &MIGRATIONS[found as usize..] {
            conn.execute_batch(step)?;
        }
        conn.execute_batch(&format!("PRAGMA user_version = {known}"))?;
        Ok(())
    })();
    conn.execute_batch(if migrated.is_ok() {
        "COMMIT"
    } else {
        "ROLLBACK"
    })?;
    migrated
}

const COLUMNS: &str = "thread_id, parent_id, item_type, item_id, params_hash, chain, status, execution_mode, \
                       created_at, updated_at, finished_at, pid, pid_start, boot_id, result_hash, error";

fn thread(row: &rusqlite::Row<'_>) -> Result<Thread, ThreadError> {
    let chain: String = row.get("chain")?;
    let status: String = row.get("status")?;
    let pid: Option<i64> = row.get("pid")?;
    let pid_start: Option<i64> = row.get("pid_start")?;
    let boot_id: Option<String> = row.get("boot_id")?;
    let pid = pid.and_then(|p| u32::try_from(p).ok());
    let process = match (pid, pid_start, boot_id) {
        (Some(pid), Some(start), Some(boot_id)) => Some(ProcessIdentity {
            pid,
            start_ticks: start as u64,
            boot_id,
        }),
        _ => None,
    };
    Ok(Thread {
        thread_id: row.get("thread_id")?,
        parent_id: row.get("parent_id")?,
        item_type: row.get("item_type")?,
        item_id: row.get("item_id")?,
        params_hash: row.get("params_hash")?,
        chain: serde_json::from_str(&chain).map_err(|e| ThreadError::Corrupt(e.to_string()))?,
        status: status.parse()?,
        execution_mode: row.get("execution_mode")?,
        created_at: row.get("created_at")?,
        updated_at: row.get("updated_at")?,
        finished_at: row.get("finished_at")?,
        pid,
        result_hash: row.get("result_hash")?,
        error: row.get("error")?,
        process,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every process that opens a registry looks for running threads; the
    /// look must go through the status index, or it reads every thread
    /// the project ever ran.
    #[test]
    fn threads_of_one_status_are_found_through_the_status_index() {
        let conn = Connection::open_in_memory().unwrap();
        migrate(&conn, Path::new(":memory:")).unwrap();
        let mut statement = conn
            .prepare(&format!("EXPLAIN QUERY PLAN {}", list_of_status()))
            .unwrap();
        let plan: Vec<String> = statement
            .query_map(params!["running", 10], |row| row.get::<_, String>(3))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert!(
            plan.iter()
                .any(|step| step.contains("USING INDEX threads_by_status")),
            "{plan:?}"
        );
        assert!(
            !plan.iter().any(|step| step.starts_with("SCAN")),
            "{plan:?}"
        );
    }
}
