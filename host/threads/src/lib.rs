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

use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::Serialize;
use serde_json::Value;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{Row, SqlitePool};

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
        source: sqlx::Error,
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
    Db(#[from] sqlx::Error),
    #[error("no thread {0}")]
    NotFound(String),
    #[error("thread {id} is {status}, not running; it ends only once")]
    NotRunning { id: String, status: Status },
    #[error(
        "{0:?} is not a thread status (running, completed, error, cancelled, killed, timed_out)"
    )]
    BadStatus(String),
    #[error("the registry holds a record it cannot read: {0}")]
    Corrupt(String),
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

/// A new thread id: a random UUID, as the original's.
pub fn new_thread_id() -> String {
    uuid::Uuid::new_v4().to_string()
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
    pub error: Option<String>,
    /// The resolved chain, when it was not known at the start.
    pub chain: Option<Value>,
}

/// The schema, one step per version (`PRAGMA user_version`).
const MIGRATIONS: &[&str] = &[r"
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
"];

/// A project's thread registry.
#[derive(Debug, Clone)]
pub struct Registry {
    pool: SqlitePool,
    path: PathBuf,
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

impl Registry {
    /// The registry in `dir` (`.ai/state/threads/`), made if missing, its
    /// schema brought up to date, and dead runs swept.
    pub async fn open(dir: &Path) -> Result<Self, ThreadError> {
        let path = dir.join("registry.db");
        let open_error = |source| ThreadError::Open {
            path: path.clone(),
            source,
        };
        std::fs::create_dir_all(dir).map_err(|e| open_error(sqlx::Error::Io(e)))?;
        let options = SqliteConnectOptions::new()
            .filename(&path)
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Normal)
            .foreign_keys(true)
            .busy_timeout(Duration::from_secs(10));
        let pool = SqlitePoolOptions::new()
            .max_connections(4)
            .connect_with(options)
            .await
            .map_err(open_error)?;
        let registry = Self { pool, path };
        registry.migrate().await?;
        registry.recover().await?;
        Ok(registry)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    async fn migrate(&self) -> Result<(), ThreadError> {
        let known = MIGRATIONS.len() as i64;
        let mut conn = self.pool.acquire().await?;
        if user_version(&mut conn).await? == known {
            return Ok(());
        }
        // The write lock first, so two processes creating the registry at
        // once wait for each other (a deferred transaction that reads and
        // then writes would fail at once instead).
        sqlx::raw_sql("BEGIN IMMEDIATE").execute(&mut *conn).await?;
        let migrated = async {
            let found = user_version(&mut conn).await?;
            if found > known {
                return Err(ThreadError::NewerSchema {
                    path: self.path.clone(),
                    found,
                    known,
                });
            }
            for step in &MIGRATIONS[found as usize..] {
                sqlx::raw_sql(*step).execute(&mut *conn).await?;
            }
            sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
                "PRAGMA user_version = {known}"
            )))
            .execute(&mut *conn)
            .await?;
            Ok(())
        }
        .await;
        let end = if migrated.is_ok() {
            "COMMIT"
        } else {
            "ROLLBACK"
        };
        sqlx::raw_sql(end).execute(&mut *conn).await?;
        migrated
    }

    /// Records a new running thread; its id.
    pub async fn start(&self, new: NewThread) -> Result<String, ThreadError> {
        let id = new.thread_id.clone().unwrap_or_else(new_thread_id);
        let process = new.process.or_else(ProcessIdentity::current);
        let now = now_ms();
        sqlx::query(
            "INSERT INTO threads (thread_id, parent_id, item_type, item_id, params_hash, chain, status, \
             execution_mode, created_at, updated_at, pid, pid_start, boot_id) \
             VALUES (?, ?, ?, ?, ?, ?, 'running', ?, ?, ?, ?, ?, ?)",
        )
        .bind(&id)
        .bind(&new.parent_id)
        .bind(&new.item_type)
        .bind(&new.item_id)
        .bind(&new.params_hash)
        .bind(new.chain.to_string())
        .bind(&new.execution_mode)
        .bind(now)
        .bind(now)
        .bind(process.as_ref().map(|p| i64::from(p.pid)))
        .bind(process.as_ref().map(|p| p.start_ticks as i64))
        .bind(process.as_ref().map(|p| p.boot_id.clone()))
        .execute(&self.pool)
        .await?;
        Ok(id)
    }

    /// Hands a running thread to another process (a detached runner).
    pub async fn adopt(&self, id: &str, process: &ProcessIdentity) -> Result<(), ThreadError> {
        let done = sqlx::query(
            "UPDATE threads SET pid = ?, pid_start = ?, boot_id = ?, updated_at = ? \
             WHERE thread_id = ? AND status = 'running'",
        )
        .bind(i64::from(process.pid))
        .bind(process.start_ticks as i64)
        .bind(&process.boot_id)
        .bind(now_ms())
        .bind(id)
        .execute(&self.pool)
        .await?;
        if done.rows_affected() == 0 {
            return Err(self.not_running(id).await);
        }
        Ok(())
    }

    /// Ends a running thread. Refused when it is not running any more.
    pub async fn finish(&self, id: &str, ending: Ending) -> Result<(), ThreadError> {
        let now = now_ms();
        let done = sqlx::query(
            "UPDATE threads SET status = ?, finished_at = ?, updated_at = ?, result_hash = ?, error = ?, \
             chain = COALESCE(?, chain) WHERE thread_id = ? AND status = 'running'",
        )
        .bind(ending.status.as_str())
        .bind(now)
        .bind(now)
        .bind(&ending.result_hash)
        .bind(&ending.error)
        .bind(ending.chain.as_ref().map(Value::to_string))
        .bind(id)
        .execute(&self.pool)
        .await?;
        if done.rows_affected() == 0 {
            return Err(self.not_running(id).await);
        }
        Ok(())
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
        let row = sqlx::query(sqlx::AssertSqlSafe(format!(
            "SELECT {COLUMNS} FROM threads WHERE thread_id = ?"
        )))
        .bind(id)
        .fetch_optional(&self.pool)
        .await?;
        row.map(|row| thread(&row)).transpose()
    }

    /// The newest threads first, at most `limit`, of one status if given.
    pub async fn list(
        &self,
        status: Option<Status>,
        limit: u32,
    ) -> Result<Vec<Thread>, ThreadError> {
        let rows = sqlx::query(sqlx::AssertSqlSafe(format!(
            "SELECT {COLUMNS} FROM threads WHERE (?1 IS NULL OR status = ?1) \
             ORDER BY created_at DESC, rowid DESC LIMIT ?2"
        )))
        .bind(status.map(Status::as_str))
        .bind(i64::from(limit))
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(thread).collect()
    }

    /// Marks every running thread whose process is gone as `killed`; the
    /// ids it marked.
    pub async fn recover(&self) -> Result<Vec<String>, ThreadError> {
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
        let seq: i64 = sqlx::query_scalar(
            "INSERT INTO events (thread_id, seq, at, kind, detail) \
             SELECT ?1, COALESCE(MAX(seq), 0) + 1, ?2, ?3, ?4 FROM events WHERE thread_id = ?1 \
             RETURNING seq",
        )
        .bind(id)
        .bind(now_ms())
        .bind(kind)
        .bind(detail.to_string())
        .fetch_one(&self.pool)
        .await
        .map_err(|e| match e {
            sqlx::Error::Database(ref db) if db.is_foreign_key_violation() => {
                ThreadError::NotFound(id.to_owned())
            }
            other => ThreadError::Db(other),
        })?;
        Ok(seq)
    }

    /// A thread's events after `after` (0: all), in order.
    pub async fn events(&self, id: &str, after: i64) -> Result<Vec<Event>, ThreadError> {
        let rows = sqlx::query(
            "SELECT seq, at, kind, detail FROM events WHERE thread_id = ? AND seq > ? ORDER BY seq",
        )
        .bind(id)
        .bind(after)
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|row| {
                let detail: String = row.try_get("detail")?;
                Ok(Event {
                    seq: row.try_get("seq")?,
                    at: row.try_get("at")?,
                    kind: row.try_get("kind")?,
                    detail: serde_json::from_str(&detail)
                        .map_err(|e| ThreadError::Corrupt(e.to_string()))?,
                })
            })
            .collect()
    }

    /// Removes the threads that finished before `cutoff_ms` (never a
    /// running one) with their events; the result hashes they held, for
    /// the store to let go of.
    pub async fn prune(&self, cutoff_ms: i64) -> Result<Vec<String>, ThreadError> {
        let rows = sqlx::query(
            "DELETE FROM threads WHERE status != 'running' AND finished_at < ? RETURNING result_hash",
        )
        .bind(cutoff_ms)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows
            .iter()
            .filter_map(|row| {
                row.try_get::<Option<String>, _>("result_hash")
                    .ok()
                    .flatten()
            })
            .collect())
    }

    /// Closes the registry's connections.
    pub async fn close(&self) {
        self.pool.close().await;
    }
}

async fn user_version(conn: &mut sqlx::SqliteConnection) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar("PRAGMA user_version")
        .fetch_one(conn)
        .await
}

const COLUMNS: &str = "thread_id, parent_id, item_type, item_id, params_hash, chain, status, execution_mode, \
                       created_at, updated_at, finished_at, pid, pid_start, boot_id, result_hash, error";

fn thread(row: &sqlx::sqlite::SqliteRow) -> Result<Thread, ThreadError> {
    let chain: String = row.try_get("chain")?;
    let status: String = row.try_get("status")?;
    let pid: Option<i64> = row.try_get("pid")?;
    let pid_start: Option<i64> = row.try_get("pid_start")?;
    let boot_id: Option<String> = row.try_get("boot_id")?;
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
        thread_id: row.try_get("thread_id")?,
        parent_id: row.try_get("parent_id")?,
        item_type: row.try_get("item_type")?,
        item_id: row.try_get("item_id")?,
        params_hash: row.try_get("params_hash")?,
        chain: serde_json::from_str(&chain).map_err(|e| ThreadError::Corrupt(e.to_string()))?,
        status: status.parse()?,
        execution_mode: row.try_get("execution_mode")?,
        created_at: row.try_get("created_at")?,
        updated_at: row.try_get("updated_at")?,
        finished_at: row.try_get("finished_at")?,
        pid,
        result_hash: row.try_get("result_hash")?,
        error: row.try_get("error")?,
        process,
    })
}
