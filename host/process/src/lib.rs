//! Rye's subprocess primitive: the one native piece that runs what a chain
//! planned.
//!
//! A [`Plan`] is run exactly as written: the program and its arguments as
//! argv (no shell unless the program is one), the environment replaced by
//! the planned one (plus [`RUN_MARKER`] where no cgroup contains the run),
//! the working directory, and stdin
//! fed from memory. The child leads a new process group and is contained
//! as [`contain`] describes (a cgroup per run where the machine allows), so
//! a timeout, a cancellation (dropping the future), the end of the run or
//! the host's death kills every process it started, including those that
//! left the group. Stdout and stderr are captured up to a cap each;
//! output past it is read and counted, never buffered, so a chatty child
//! can neither exhaust memory nor block on a full pipe.
//!
//! ```no_run
//! # async fn demo() -> Result<(), rye_process::SpawnError> {
//! use std::time::Duration;
//! let plan = rye_process::Plan::new("echo").arg("hello").timeout(Duration::from_secs(5));
//! let outcome = rye_process::run(&plan, &rye_process::Capture::default()).await?;
//! assert_eq!(outcome.stdout, b"hello\n");
//! # Ok(()) }
//! ```

mod attach;
mod contain;
mod detach;
#[cfg(target_os = "linux")]
mod spawn;

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};

pub use attach::{Attached, Exit, attach};
pub use contain::{
    Containment, RUN_MARKER, containment, init, settle, stop_abandoned_runs, stop_all,
};
pub use detach::{Signal, signal, spawn_detached};

/// What to run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    pub command: String,
    pub args: Vec<String>,
    /// The child's whole environment; nothing is inherited.
    pub env: Vec<(String, String)>,
    pub cwd: Option<PathBuf>,
    /// Written to the child's stdin, which is then closed. `None` gives the
    /// child an empty stdin.
    pub stdin: Option<Vec<u8>>,
    pub timeout: Option<Duration>,
}

impl Plan {
    pub fn new(command: impl Into<String>) -> Self {
        Self {
            command: command.into(),
            ..Self::default()
        }
    }

    pub fn arg(mut self, arg: impl Into<String>) -> Self {
        self.args.push(arg.into());
        self
    }

    pub fn env(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.env.push((name.into(), value.into()));
        self
    }

    pub fn cwd(mut self, cwd: impl Into<PathBuf>) -> Self {
        self.cwd = Some(cwd.into());
        self
    }

    pub fn stdin(mut self, bytes: impl Into<Vec<u8>>) -> Self {
        self.stdin = Some(bytes.into());
        self
    }

    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }
}

/// How much output to keep.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Capture {
    pub stdout: usize,
    pub stderr: usize,
}

impl Default for Capture {
    /// 16 MiB of stdout (a tool's JSON result), 1 MiB of stderr.
    fn default() -> Self {
        Self {
            stdout: 16 << 20,
            stderr: 1 << 20,
        }
    }
}

/// How a run ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// The exit code, if the child exited rather than being killed.
    pub code: Option<i32>,
    /// The signal that ended the child, if one did.
    pub signal: Option<i32>,
    /// The timeout passed and the process group was killed.
    pub timed_out: bool,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    /// Bytes read past the capture cap and dropped.
    pub stdout_dropped: u64,
    pub stderr_dropped: u64,
    pub duration: Duration,
}

impl Outcome {
    /// Exited with code 0 in time.
    pub fn success(&self) -> bool {
        self.code == Some(0) && !self.timed_out
    }
}

/// The child could not be started.
#[derive(Debug, thiserror::Error)]
#[error("cannot start {command:?}: {source}")]
pub struct SpawnError {
    pub command: String,
    #[source]
    pub source: std::io::Error,
}

/// How long to keep reading output after the child has gone: enough for
/// the pipes to drain, short enough that a process that left the group and
/// holds them open cannot stall the result.
const DRAIN_GRACE: Duration = Duration::from_millis(500);

/// The output a running child has written so far, for a watcher while the
/// run goes on (see [`run_watched`]).
#[derive(Debug, Default)]
pub struct OutputCounts {
    stdout: AtomicU64,
    stderr: AtomicU64,
}

impl OutputCounts {
    /// Bytes of stdout read so far, kept or not.
    pub fn stdout(&self) -> u64 {
        self.stdout.load(Ordering::Relaxed)
    }

    /// Bytes of stderr read so far, kept or not.
    pub fn stderr(&self) -> u64 {
        self.stderr.load(Ordering::Relaxed)
    }
}

/// Runs `plan` and waits for it, within its timeout.
pub async fn run(plan: &Plan, capture: &Capture) -> Result<Outcome, SpawnError> {
    run_watched(plan, capture, None).await
}

/// [`run`], counting the output in `counts` as it is read.
pub async fn run_watched(
    plan: &Plan,
    capture: &Capture,
    counts: Option<&OutputCounts>,
) -> Result<Outcome, SpawnError> {
    let started = Instant::now();
    let mut run = contain::Run::new();
    let mut child = Started::new(plan, &run).map_err(|source| SpawnError {
        command: plan.command.clone(),
        source,
    })?;
    run.started(child.id());
    let group = &run;

    let (stdin, stdout_pipe, stderr_pipe) = child.pipes();
    let input = plan.stdin.clone();
    let writer = tokio::spawn(async move {
        if let (Some(mut pipe), Some(bytes)) = (stdin, input) {
            // A child that exits without reading its input is not an error.
            let _ = pipe.write_all(&bytes).await;
            let _ = pipe.shutdown().await;
        }
    });
    // Output is read in this task, not in tasks of its own: a busy runtime
    // cannot then leave a reader unscheduled past the grace period and
    // lose what the child wrote. Bytes read survive the reading being cut
    // short.
    let (mut out, mut err) = (Captured::default(), Captured::default());
    let (exited, exit_seen) = tokio::sync::oneshot::channel::<()>();
    let reading = async {
        let both = async {
            tokio::join!(
                read_capped(
                    stdout_pipe,
                    capture.stdout,
                    &mut out,
                    counts.map(|c| &c.stdout)
                ),
                read_capped(
                    stderr_pipe,
                    capture.stderr,
                    &mut err,
                    counts.map(|c| &c.stderr)
                )
            )
        };
        tokio::select! {
            biased;
            _ = both => {}
            () = async {
                let _ = exit_seen.await;
                tokio::time::sleep(DRAIN_GRACE).await;
            } => {}
        }
    };
    let waiting = async {
        let (status, timed_out) = match plan.timeout {
            Some(limit) => match tokio::time::timeout(limit, child.wait()).await {
                Ok(status) => (status, false),
                Err(_) => {
                    group.kill();
                    (child.wait().await, true)
                }
            },
            None => (child.wait().await, false),
        };
        // Whatever the child left running in its group goes with it.
        group.kill();
        let _ = exited.send(());
        (status, timed_out)
    };
    let ((), (status, timed_out)) = tokio::join!(reading, waiting);
    writer.abort();
    let (stdout, stdout_dropped) = (out.kept, out.dropped);
    let (stderr, stderr_dropped) = (err.kept, err.dropped);
    let (code, signal) = status.unwrap_or((None, None));
    Ok(Outcome {
        code,
        signal,
        timed_out,
        stdout,
        stderr,
        stdout_dropped,
        stderr_dropped,
        duration: started.elapsed(),
    })
}

/// [`run`] from synchronous code, on a thread and runtime of its own (so
/// it may be called from inside another runtime's task).
pub fn run_blocking(plan: &Plan, capture: &Capture) -> Result<Outcome, SpawnError> {
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_io()
                    .enable_time()
                    .build()
                    .map_err(|source| SpawnError {
                        command: plan.command.clone(),
                        source,
                    })?;
                runtime.block_on(run(plan, capture))
            })
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
    })
}

/// Output read so far: the bytes kept and the count of those dropped.
#[derive(Default)]
struct Captured {
    kept: Vec<u8>,
    dropped: u64,
}

/// Reads everything into `into`, keeping the first `cap` bytes and
/// counting the rest (and all of it in `count`, when given).
async fn read_capped(
    pipe: Option<impl AsyncRead + Unpin>,
    cap: usize,
    into: &mut Captured,
    count: Option<&AtomicU64>,
) {
    let Some(mut pipe) = pipe else {
        return;
    };
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match pipe.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                let room = cap.saturating_sub(into.kept.len()).min(n);
                into.kept.extend_from_slice(&buf[..room]);
                into.dropped += (n - room) as u64;
                if let Some(count) = count {
                    count.fetch_add(n as u64, Ordering::Relaxed);
                }
            }
        }
    }
}

/// A child's stdin, for writing.
pub type Input = Box<dyn tokio::io::AsyncWrite + Unpin + Send>;
/// A child's stdout or stderr, for reading.
pub type Output = Box<dyn AsyncRead + Unpin + Send>;

/// A started child, however it was started.
enum Started {
    /// Cloned without copying the host (Linux with pidfds).
    #[cfg(target_os = "linux")]
    Cloned(spawn::Child),
    /// Started by `std`: `posix_spawn`, or on Linux without pidfds a fork
    /// of the host, for the steps the child must take itself.
    Std(tokio::process::Child),
}

impl Started {
    fn new(plan: &Plan, run: &contain::Run) -> std::io::Result<Self> {
        #[cfg(target_os = "linux")]
        {
            use std::os::fd::AsFd;
            let marker = run.marked().then_some((RUN_MARKER, run.id.as_str()));
            let cgroup = run.procs.as_ref().map(|(procs, folder)| spawn::Cgroup {
                folder: folder.as_fd(),
                procs: procs.as_fd(),
            });
            if let Ok(cloned) = spawn::spawn(plan, marker, cgroup) {
                return cloned.map(Started::Cloned);
            }
        }
        std_spawn(plan, run).map(Started::Std)
    }

    fn id(&self) -> Option<u32> {
        match self {
            #[cfg(target_os = "linux")]
            Started::Cloned(child) => Some(child.pid),
            Started::Std(child) => child.id(),
        }
    }

    fn pipes(&mut self) -> (Option<Input>, Option<Output>, Option<Output>) {
        match self {
            #[cfg(target_os = "linux")]
            Started::Cloned(child) => (
                child.stdin.take().map(|p| Box::new(p) as Input),
                child.stdout.take().map(|p| Box::new(p) as Output),
                child.stderr.take().map(|p| Box::new(p) as Output),
            ),
            Started::Std(child) => (
                child.stdin.take().map(|p| Box::new(p) as Input),
                child.stdout.take().map(|p| Box::new(p) as Output),
                child.stderr.take().map(|p| Box::new(p) as Output),
            ),
        }
    }

    /// Waits for the child to end: its exit code and the signal that
    /// ended it, if either; `None` if waiting failed.
    async fn wait(&mut self) -> Option<(Option<i32>, Option<i32>)> {
        match self {
            #[cfg(target_os = "linux")]
            Started::Cloned(child) => child.wait().await.ok().map(|exit| (exit.code, exit.signal)),
            Started::Std(child) => {
                let status = child.wait().await.ok()?;
                #[cfg(unix)]
                let signal = std::os::unix::process::ExitStatusExt::signal(&status);
                #[cfg(not(unix))]
                let signal = None;
                Some((status.code(), signal))
            }
        }
    }
}

/// Starts the child through `std`. On Linux the child joins its cgroup and
/// sets its death signal in a hook before it executes, which makes `std`
/// fork the host: used only where [`spawn`] cannot clone.
fn std_spawn(plan: &Plan, run: &contain::Run) -> std::io::Result<tokio::process::Child> {
    let mut command = tokio::process::Command::new(&plan.command);
    command
        .args(&plan.args)
        .env_clear()
        .envs(plan.env.iter().map(|(k, v)| (k, v)))
        .stdin(if plan.stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    if let Some(cwd) = &plan.cwd {
        command.current_dir(cwd);
    }
    if run.marked() {
        command.env(RUN_MARKER, &run.id);
    }
    #[cfg(unix)]
    command.process_group(0);
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsRawFd;
        let host = rustix::process::getpid();
        let procs = run.procs.as_ref().map(|(f, _)| f.as_raw_fd());
        // SAFETY: the closure runs in the forked child before it executes
        // the program and makes only async-signal-safe system calls
        // (prctl, getppid, write), allocating nothing. `procs` stays open
        // in the parent until the spawn has returned.
        unsafe {
            command.pre_exec(move || {
                rustix::process::set_parent_process_death_signal(Some(
                    rustix::process::Signal::KILL,
                ))?;
                if rustix::process::getppid() != Some(host) {
                    return Err(std::io::Error::other("the host exited"));
                }
                if let Some(fd) = procs {
                    let fd = std::os::fd::BorrowedFd::borrow_raw(fd);
                    // "0" moves the writing process into the cgroup.
                    rustix::io::write(fd, b"0")?;
                }
                Ok(())
            });
        }
    }
    command.spawn()
}
