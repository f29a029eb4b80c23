//! Children that stay: a server the host talks to over its stdin and
//! stdout for as long as it needs it.
//!
//! An [`Attached`] child is started and contained exactly as a run's
//! ([`crate::run`]): argv, the planned environment only, a process group
//! and cgroup of its own, the death signal. Its stdin and stdout are the
//! caller's; its stderr is read all along and only the last
//! [`Attached::stderr_tail`] bytes are kept, so a child that writes
//! without end costs no memory. Dropping it kills the child and
//! everything it started.

use std::sync::{Arc, Mutex};

use tokio::io::AsyncReadExt;
use tokio::sync::watch;

use crate::{Input, Output, Plan, SpawnError, Started, contain};

/// A started child with its stdin and stdout open.
pub struct Attached {
    pid: Option<u32>,
    // In a mutex only so that an attached child may be shared between
    // threads: the pipes are taken once, by the one owner.
    stdio: Mutex<Option<(Input, Output)>>,
    stderr: Arc<Mutex<Tail>>,
    exit: watch::Receiver<Option<Exit>>,
    // Dropped last: kills whatever is left of the child's processes.
    _run: contain::Run,
}

/// How an attached child ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Exit {
    pub code: Option<i32>,
    pub signal: Option<i32>,
}

impl std::fmt::Display for Exit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (self.code, self.signal) {
            (Some(code), _) => write!(f, "exited with code {code}"),
            (None, Some(signal)) => write!(f, "was killed by signal {signal}"),
            (None, None) => write!(f, "ended"),
        }
    }
}

/// The last bytes of a stream, and how many came before them.
#[derive(Default)]
struct Tail {
    kept: std::collections::VecDeque<u8>,
    dropped: u64,
}

/// Starts `plan`'s program with its stdin and stdout piped to the caller,
/// keeping the last `stderr_cap` bytes of its stderr. `plan.stdin` and
/// `plan.timeout` are not used: the caller writes, and decides when the
/// child has had long enough (by dropping it). Must be called within a
/// Tokio runtime.
pub fn attach(plan: &Plan, stderr_cap: usize) -> Result<Attached, SpawnError> {
    let plan = Plan {
        stdin: Some(Vec::new()),
        timeout: None,
        ..plan.clone()
    };
    let mut run = contain::Run::new();
    let mut child = Started::new(&plan, &run).map_err(|source| SpawnError {
        command: plan.command.clone(),
        source,
    })?;
    let pid = child.id();
    run.started(pid);
    let (stdin, stdout, stderr) = child.pipes();
    let (Some(stdin), Some(stdout)) = (stdin, stdout) else {
        return Err(SpawnError {
            command: plan.command.clone(),
            source: std::io::Error::other("the child's stdin or stdout is not a pipe"),
        });
    };
    let tail = Arc::new(Mutex::new(Tail::default()));
    if let Some(mut stderr) = stderr {
        let tail = tail.clone();
        tokio::spawn(async move {
            let mut buf = vec![0u8; 16 * 1024];
            while let Ok(n) = stderr.read(&mut buf).await {
                if n == 0 {
                    break;
                }
                let mut tail = tail.lock().unwrap_or_else(|e| e.into_inner());
                tail.kept.extend(&buf[..n]);
                let excess = tail.kept.len().saturating_sub(stderr_cap);
                tail.kept.drain(..excess);
                tail.dropped += excess as u64;
            }
        });
    }
    let (exited, exit) = watch::channel(None);
    tokio::spawn(async move {
        let status = child.wait().await;
        let (code, signal) = status.unwrap_or((None, None));
        let _ = exited.send(Some(Exit { code, signal }));
    });
    Ok(Attached {
        pid,
        stdio: Mutex::new(Some((stdin, stdout))),
        stderr: tail,
        exit,
        _run: run,
    })
}

impl Attached {
    pub fn pid(&self) -> Option<u32> {
        self.pid
    }

    /// The child's stdin and stdout, the first time only.
    pub fn take_stdio(&mut self) -> Option<(Input, Output)> {
        self.stdio
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .take()
    }

    /// The last of the child's stderr, as text, and how many bytes came
    /// before it.
    pub fn stderr_tail(&self) -> (String, u64) {
        let tail = self.stderr.lock().unwrap_or_else(|e| e.into_inner());
        let bytes: Vec<u8> = tail.kept.iter().copied().collect();
        (String::from_utf8_lossy(&bytes).into_owned(), tail.dropped)
    }

    /// How the child ended, if it has.
    pub fn exit(&self) -> Option<Exit> {
        *self.exit.borrow()
    }

    /// Waits until the child has ended.
    pub async fn exited(&self) -> Exit {
        let mut exit = self.exit.clone();
        match exit.wait_for(Option::is_some).await {
            Ok(done) => done.unwrap_or(Exit {
                code: None,
                signal: None,
            }),
            // The waiting task is gone without a word: treat as ended.
            Err(_) => Exit {
                code: None,
                signal: None,
            },
        }
    }
}
