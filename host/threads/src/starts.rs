//! Starts noted ahead of the registry.
//!
//! A run about to act on the world (a process, a request, a call) must
//! leave a record a killed host cannot take back. A registry transaction
//! for that rewrites several pages; a line appended to `starts.log` beside
//! the registry is one `write`. The run is then recorded whole when it
//! ends, or its start is written once it has run long enough to be seen
//! running.
//!
//! The lines are folded into the registry as running threads whenever a
//! registry is opened (before dead runs are swept, so a run whose host was
//! killed is found) and when a host has appended enough of them. Folding
//! a thread the registry already holds changes nothing; a run whose start
//! was folded while it ran ends its row as a started run does.
//!
//! The file is in the project's state folder and is read as untrusted: a
//! line that does not parse, lacks its process or names an odd id is
//! skipped, at most [`READ_AT_MOST`] bytes are read, and a link is never
//! followed.

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use rusqlite::{Connection, Transaction, TransactionBehavior};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::{NewThread, ProcessIdentity, ThreadError, insert_thread, status_of};

/// The file's name, beside `registry.db`.
pub(crate) const FILE: &str = "starts.log";

/// Bytes a host appends before it folds the file into the registry.
const FOLD_PAST: u64 = 256 * 1024;

/// The most of the file one fold reads; the rest is dropped with it.
const READ_AT_MOST: u64 = 16 * 1024 * 1024;

/// One noted start.
#[derive(Debug, Serialize, Deserialize)]
struct Line {
    thread_id: String,
    parent_id: Option<String>,
    item_type: String,
    item_id: String,
    params_hash: String,
    execution_mode: String,
    created_at: i64,
    process: ProcessIdentity,
}

/// This process's appending end of the file.
#[derive(Debug)]
pub(crate) struct Starts {
    path: PathBuf,
    file: Mutex<Option<File>>,
    /// Bytes appended since this host last folded.
    appended: AtomicU64,
}

fn io_error(path: &Path) -> impl Fn(std::io::Error) -> ThreadError + '_ {
    move |source| ThreadError::Starts {
        path: path.to_owned(),
        source,
    }
}

/// Opened without following a link: the state folder is the project's,
/// and a link there must not make the host write elsewhere.
fn open(path: &Path, read: bool) -> std::io::Result<File> {
    let mut options = OpenOptions::new();
    if read {
        options.read(true).write(true);
    } else {
        options.append(true).create(true).mode(0o600);
    }
    options
        .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
        .open(path)
}

impl Starts {
    pub(crate) fn new(dir: &Path) -> Self {
        Self {
            path: dir.join(FILE),
            file: Mutex::new(None),
            appended: AtomicU64::new(0),
        }
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Appends the start of thread `id` (`new`, at `at`) in one write.
    pub(crate) fn note(&self, id: &str, new: &NewThread, at: i64) -> Result<(), ThreadError> {
        let process = new
            .process
            .clone()
            .or_else(ProcessIdentity::current)
            .ok_or_else(|| {
                io_error(&self.path)(std::io::Error::other(
                    "this process's identity cannot be read, so a noted start could not be told from a dead one",
                ))
            })?;
        let mut line = serde_json::to_vec(&Line {
            thread_id: id.to_owned(),
            parent_id: new.parent_id.clone(),
            item_type: new.item_type.clone(),
            item_id: new.item_id.clone(),
            params_hash: new.params_hash.clone(),
            execution_mode: new.execution_mode.clone(),
            created_at: at,
            process,
        })
        .expect("a start line serializes");
        line.push(b'\n');
        let mut file = self.file.lock().unwrap_or_else(|e| e.into_inner());
        if file.is_none() {
            *file = Some(open(&self.path, false).map_err(io_error(&self.path))?);
        }
        let appending = file.as_ref().expect("opened above");
        // Shared: appenders go on together; a fold truncating the file
        // holds it alone.
        appending.lock_shared().map_err(io_error(&self.path))?;
        let written = (&*appending).write_all(&line);
        let _ = appending.unlock();
        if let Err(e) = written {
            // A file that failed once is opened again next time.
            *file = None;
            return Err(io_error(&self.path)(e));
        }
        self.appended
            .fetch_add(line.len() as u64, Ordering::Relaxed);
        Ok(())
    }

    /// Whether this host has appended enough to fold the file now.
    pub(crate) fn fold_due(&self) -> bool {
        self.appended.load(Ordering::Relaxed) >= FOLD_PAST
    }

    /// Folds every noted start into the registry as a running thread
    /// (those it holds already are left as they are) and empties the
    /// file; how many were added.
    pub(crate) fn fold(&self, conn: &Connection) -> Result<usize, ThreadError> {
        let file = match open(&self.path, true) {
            Ok(file) => file,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
            Err(e) => return Err(io_error(&self.path)(e)),
        };
        file.lock().map_err(io_error(&self.path))?;
        let mut text = Vec::new();
        (&file)
            .take(READ_AT_MOST)
            .read_to_end(&mut text)
            .map_err(io_error(&self.path))?;
        let tx = Transaction::new_unchecked(conn, TransactionBehavior::Immediate)?;
        let mut added = 0;
        let mut skipped = 0;
        for raw in text.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
            let Some(line) = parse(raw) else {
                skipped += 1;
                continue;
            };
            if status_of(&tx, &line.thread_id)?.is_some() {
                continue;
            }
            let new = NewThread {
                item_type: line.item_type,
                item_id: line.item_id,
                params_hash: line.params_hash,
                chain: Value::Null,
                execution_mode: line.execution_mode,
                parent_id: line.parent_id,
                process: Some(line.process),
                thread_id: Some(line.thread_id.clone()),
            };
            insert_thread(&tx, &line.thread_id, &new, line.created_at, None)?;
            added += 1;
        }
        tx.commit()?;
        if skipped > 0 {
            tracing::warn!(
                "{}: {skipped} lines are not noted starts and were dropped",
                self.path.display()
            );
        }
        file.set_len(0).map_err(io_error(&self.path))?;
        self.appended.store(0, Ordering::Relaxed);
        Ok(added)
    }
}

/// A line, if it is a start this registry could hold: a thread id of
/// the shape new ones take, and names of a sane length.
fn parse(raw: &[u8]) -> Option<Line> {
    let line: Line = serde_json::from_slice(raw).ok()?;
    let id_ok = line.thread_id.len() == 36
        && line
            .thread_id
            .bytes()
            .all(|b| b.is_ascii_hexdigit() || b == b'-');
    let sane = |s: &str| !s.is_empty() && s.len() <= 4096;
    (id_ok
        && sane(&line.item_type)
        && sane(&line.item_id)
        && sane(&line.execution_mode)
        && line.params_hash.len() <= 128
        && line.parent_id.as_deref().is_none_or(|p| p.len() <= 64))
    .then_some(line)
}
