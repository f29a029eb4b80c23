//! Keeping every process a run starts inside the run.
//!
//! Killing the child's process group misses what left it (`setsid`,
//! `daemon`), and a host that dies leaves its runs under PID 1 with no
//! timeout. So each run is contained by the strongest means the machine
//! offers, reported by [`containment`]:
//!
//! - **cgroup**: on Linux with a writable cgroup v2 hierarchy, each run
//!   gets a cgroup of its own (`rye-run-<host pid>-<n>` beside the host's
//!   own cgroup); the child moves itself into it before it executes
//!   anything, and ending the run writes `cgroup.kill`, which takes every
//!   descendant however it detached.
//! - **process group + sweep**: elsewhere (or with `RYE_NO_CGROUP` set),
//!   the group is killed and then every process still carrying the run's
//!   marker in its environment (`RYE_RUN_ID`, set only in this mode and
//!   inherited by descendants) is found through `/proc` and killed.
//!
//! Either way the child is started with `PR_SET_PDEATHSIG` (Linux), so a
//! host that dies takes its child with it; a host stopped by SIGTERM,
//! SIGHUP or SIGINT kills every live run first ([`stop_all`], called from
//! the binary's signal handling); and every live run is recorded in the
//! runs folder (see [`init`]) so what a SIGKILLed host could not stop is
//! found and stopped when the next host starts. The child joins its
//! cgroup and sets its death signal itself, before it executes anything
//! (see `spawn` for how that is done without copying the host).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

/// The environment variable marking every process of a run.
pub const RUN_MARKER: &str = "RYE_RUN_ID";

/// How runs are contained on this machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Containment {
    /// A cgroup v2 per run, killed whole.
    Cgroup,
    /// A process group per run, plus a sweep for processes carrying the
    /// run's marker.
    ProcessGroup,
}

impl Containment {
    pub fn as_str(self) -> &'static str {
        match self {
            Containment::Cgroup => "cgroup",
            Containment::ProcessGroup => "process-group",
        }
    }
}

impl std::fmt::Display for Containment {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

struct State {
    /// Where run cgroups are made, when they can be.
    cgroup_parent: Option<PathBuf>,
    /// Where live runs are recorded, when a folder was given.
    runs_dir: Option<PathBuf>,
}

static STATE: OnceLock<State> = OnceLock::new();
static NEXT: AtomicU64 = AtomicU64::new(0);
static LIVE: OnceLock<Mutex<HashMap<String, LiveRun>>> = OnceLock::new();

fn live() -> &'static Mutex<HashMap<String, LiveRun>> {
    LIVE.get_or_init(Mutex::default)
}

fn state() -> &'static State {
    STATE.get_or_init(|| State {
        cgroup_parent: cgroup_parent(),
        runs_dir: None,
    })
}

/// Sets the folder where live runs are recorded and stops what runs of
/// dead hosts left behind there. Call once, early; later calls do nothing.
/// Returns how many leftover runs were stopped.
pub fn init(runs_dir: Option<PathBuf>) -> usize {
    let _ = STATE.set(State {
        cgroup_parent: cgroup_parent(),
        runs_dir,
    });
    state().runs_dir.as_deref().map_or(0, stop_abandoned)
}

/// Stops what runs of dead hosts left behind in the runs folder (see
/// [`init`]), as `init` does when a host starts: for a host that outlived
/// one it killed. How many were stopped.
pub fn stop_abandoned_runs() -> usize {
    state().runs_dir.as_deref().map_or(0, stop_abandoned)
}

/// How runs are contained here.
pub fn containment() -> Containment {
    if state().cgroup_parent.is_some() {
        Containment::Cgroup
    } else {
        Containment::ProcessGroup
    }
}

/// One run's containment, made before its child is spawned.
pub(crate) struct Run {
    pub(crate) id: String,
    /// `cgroup.procs` of the run's cgroup, opened for the child to move
    /// itself in, and the cgroup's folder, for a child cloned into it.
    #[cfg(target_os = "linux")]
    pub(crate) procs: Option<(std::fs::File, std::fs::File)>,
    cgroup: Option<PathBuf>,
    record: Option<PathBuf>,
    pgid: Option<i32>,
}

#[derive(Clone)]
struct LiveRun {
    cgroup: Option<PathBuf>,
    pgid: Option<i32>,
}

impl Run {
    pub(crate) fn new() -> Self {
        let id = format!(
            "{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        // A cgroup counts only with its `cgroup.procs` open for writing.
        let contained = state().cgroup_parent.as_ref().and_then(|parent| {
            let dir = parent.join(format!("rye-run-{id}"));
            std::fs::create_dir(&dir).ok()?;
            let opened = std::fs::OpenOptions::new()
                .write(true)
                .open(dir.join("cgroup.procs"))
                .and_then(|procs| Ok((procs, std::fs::File::open(&dir)?)));
            match opened {
                Ok(procs) => Some((dir, procs)),
                Err(_) => {
                    let _ = std::fs::remove_dir(&dir);
                    None
                }
            }
        });
        let (cgroup, procs) = contained.unzip();
        #[cfg(not(target_os = "linux"))]
        drop(procs);
        let mut run = Self {
            id,
            #[cfg(target_os = "linux")]
            procs,
            cgroup,
            record: None,
            pgid: None,
        };
        run.register();
        run
    }

    /// Makes the run known before its child exists, so no moment passes
    /// in which a child runs that a stopping host or the next host could
    /// not find: to this host's live runs (for [`stop_all`]) and as a
    /// record in the runs folder (for the next host, if this one is
    /// killed).
    fn register(&mut self) {
        live().lock().expect("live runs lock").insert(
            self.id.clone(),
            LiveRun {
                cgroup: self.cgroup.clone(),
                pgid: None,
            },
        );
        if let Some(dir) = &state().runs_dir {
            let record = dir.join(format!("{}.run", self.id));
            let text = format!(
                "host {}\nhost_start {}\ncgroup {}\n",
                std::process::id(),
                start_time(std::process::id() as i32).unwrap_or_default(),
                self.cgroup
                    .as_ref()
                    .map_or(String::new(), |c| c.display().to_string()),
            );
            if std::fs::create_dir_all(dir).is_ok() && std::fs::write(&record, text).is_ok() {
                self.record = Some(record);
            }
        }
    }

    /// Whether the run's processes carry [`RUN_MARKER`]: only where no
    /// cgroup contains them, since only the sweep needs it.
    pub(crate) fn marked(&self) -> bool {
        self.cgroup.is_none()
    }

    /// Notes the started child (the leader of its process group, already
    /// in the run's cgroup: it moved itself there before executing).
    pub(crate) fn started(&mut self, pid: Option<u32>) {
        self.pgid = pid.and_then(|p| i32::try_from(p).ok());
        if let Some(run) = live().lock().expect("live runs lock").get_mut(&self.id) {
            run.pgid = self.pgid;
        }
    }

    /// Kills every process of the run.
    pub(crate) fn kill(&self) {
        kill_run(self.cgroup.as_deref(), self.pgid);
    }
}

impl Drop for Run {
    fn drop(&mut self) {
        self.kill();
        if self.cgroup.is_none() {
            // What left the group is found by its marker: a walk of /proc
            // that costs milliseconds, so it runs off the run's path.
            reaper().send(Job::Sweep(self.id.clone()));
        }
        if let Some(cgroup) = self.cgroup.take() {
            // Empty at once as a rule; a killed cgroup empties shortly.
            if std::fs::remove_dir(&cgroup).is_err() {
                reaper().send(Job::RemoveCgroup(cgroup));
            }
        }
        if let Some(record) = &self.record {
            let _ = std::fs::remove_file(record);
        }
        live().lock().expect("live runs lock").remove(&self.id);
    }
}

/// Kills every live run of this host: for a host about to exit on a
/// signal.
pub fn stop_all() {
    let runs: Vec<(String, LiveRun)> = live()
        .lock()
        .map(|l| l.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
        .unwrap_or_default();
    for (id, run) in runs {
        kill_run(run.cgroup.as_deref(), run.pgid);
        if run.cgroup.is_none() {
            sweep_marked(&id);
        }
        if let Some(cgroup) = &run.cgroup {
            remove_cgroup(cgroup);
        }
        if let Some(dir) = &state().runs_dir {
            let _ = std::fs::remove_file(dir.join(format!("{id}.run")));
        }
    }
}

/// Kills the run's cgroup, or its process group (what left the group is
/// for the marker sweep).
fn kill_run(cgroup: Option<&Path>, pgid: Option<i32>) {
    if let Some(cgroup) = cgroup {
        let _ = std::fs::write(cgroup.join("cgroup.kill"), "1");
    }
    #[cfg(unix)]
    if let Some(pid) = pgid.and_then(rustix::process::Pid::from_raw) {
        // ESRCH (already gone) is the usual, fine answer.
        let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
    }
}

/// Work that finishes a run after its result is out: sweeping for its
/// marker, removing its cgroup once empty. One thread, fed by a queue;
/// [`settle`] waits until it is idle.
struct Reaper {
    jobs: std::sync::mpsc::Sender<Job>,
    pending: Arc<(Mutex<usize>, std::sync::Condvar)>,
}

enum Job {
    Sweep(String),
    RemoveCgroup(PathBuf),
    #[cfg(target_os = "linux")]
    Reap(std::os::fd::OwnedFd),
}

fn reaper() -> &'static Reaper {
    static REAPER: OnceLock<Reaper> = OnceLock::new();
    REAPER.get_or_init(|| {
        let (jobs, queue) = std::sync::mpsc::channel::<Job>();
        let pending: Arc<(Mutex<usize>, std::sync::Condvar)> = Arc::default();
        let done = pending.clone();
        std::thread::Builder::new()
            .name("rye-reaper".into())
            .spawn(move || {
                for job in queue {
                    match job {
                        Job::Sweep(id) => sweep_marked(&id),
                        Job::RemoveCgroup(dir) => remove_cgroup(&dir),
                        #[cfg(target_os = "linux")]
                        Job::Reap(pidfd) => {
                            let _ = rustix::process::waitid(
                                rustix::process::WaitId::PidFd(std::os::fd::AsFd::as_fd(&pidfd)),
                                rustix::process::WaitIdOptions::EXITED,
                            );
                        }
                    }
                    let (count, idle) = &*done;
                    *count.lock().expect("reaper lock") -= 1;
                    idle.notify_all();
                }
            })
            .expect("a reaper thread");
        Reaper { jobs, pending }
    })
}

impl Reaper {
    fn send(&self, job: Job) {
        let _ = REAPER_STARTED.set(());
        *self.pending.0.lock().expect("reaper lock") += 1;
        if self.jobs.send(job).is_err() {
            *self.pending.0.lock().expect("reaper lock") -= 1;
        }
    }
}

/// Reaps a killed child off the caller's thread.
#[cfg(target_os = "linux")]
pub(crate) fn reap(pidfd: std::os::fd::OwnedFd) {
    reaper().send(Job::Reap(pidfd));
}

/// Waits (up to `limit`) until every finished run's sweep and cleanup is
/// done: for a one-shot command about to exit, so nothing it started is
/// left to a thread the exit would end.
pub fn settle(limit: std::time::Duration) {
    let Some(reaper) = REAPER_STARTED.get().map(|()| reaper()) else {
        return;
    };
    let (count, idle) = &*reaper.pending;
    let guard = count.lock().expect("reaper lock");
    let _ = idle.wait_timeout_while(guard, limit, |pending| *pending > 0);
}

/// Set once a job was queued, so [`settle`] starts no thread of its own.
static REAPER_STARTED: OnceLock<()> = OnceLock::new();

/// Kills the processes whose environment carries run `id`'s marker.
fn sweep_marked(id: &str) {
    #[cfg(target_os = "linux")]
    {
        let needle = format!("{RUN_MARKER}={id}");
        let Ok(entries) = std::fs::read_dir("/proc") else {
            return;
        };
        for entry in entries.flatten() {
            let Some(pid) = entry
                .file_name()
                .to_str()
                .and_then(|n| n.parse::<i32>().ok())
            else {
                continue;
            };
            let Ok(environ) = std::fs::read(entry.path().join("environ")) else {
                continue;
            };
            if environ
                .split(|&b| b == 0)
                .any(|var| var == needle.as_bytes())
                && let Some(pid) = rustix::process::Pid::from_raw(pid)
            {
                let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
            }
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = id;
}

/// Removes a run's cgroup once its processes are gone (a killed cgroup
/// empties asynchronously).
fn remove_cgroup(cgroup: &Path) {
    for _ in 0..200 {
        match std::fs::remove_dir(cgroup) {
            Ok(()) => return,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return,
            Err(_) => std::thread::sleep(std::time::Duration::from_millis(5)),
        }
    }
    warn_left_behind(cgroup);
}

fn warn_left_behind(cgroup: &Path) {
    eprintln!(
        "rye: the run cgroup {} could not be removed; it is stopped when rye next starts",
        cgroup.display()
    );
}

/// Stops the runs recorded in `dir` by hosts that are gone.
fn stop_abandoned(dir: &Path) -> usize {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    let mut stopped = 0;
    for entry in entries.flatten() {
        let path = entry.path();
        if path.extension().is_none_or(|e| e != "run") {
            continue;
        }
        let Ok(text) = std::fs::read_to_string(&path) else {
            continue;
        };
        let field = |name: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
                .unwrap_or_default()
                .to_owned()
        };
        let host: i32 = field("host").parse().unwrap_or(0);
        let host_alive =
            host > 0 && start_time(host).is_some_and(|t| t.to_string() == field("host_start"));
        if host_alive {
            continue;
        }
        let id = path
            .file_stem()
            .and_then(|s| s.to_str())
            .unwrap_or_default()
            .to_owned();
        let cgroup = Some(PathBuf::from(field("cgroup"))).filter(|c| !c.as_os_str().is_empty());
        // A process group whose leader is gone may have been reused by
        // now; only the cgroup and the marker identify the run for sure.
        kill_run(cgroup.as_deref(), None);
        if cgroup.is_none() {
            sweep_marked(&id);
        }
        if let Some(cgroup) = &cgroup {
            remove_cgroup(cgroup);
        }
        let _ = std::fs::remove_file(&path);
        stopped += 1;
    }
    stopped
}

/// A process's start time (clock ticks since boot), which tells it from a
/// later process given the same id.
fn start_time(pid: i32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may hold spaces and parentheses: fields are
    // counted after its closing parenthesis.
    let rest = &stat[stat.rfind(')')? + 2..];
    // A zombie has ended (its parent has not reaped it yet; an init that
    // reaps slowly leaves them for a while).
    if rest.starts_with(['Z', 'X']) {
        return None;
    }
    rest.split(' ').nth(19)?.parse().ok()
}

/// The cgroup v2 folder in which run cgroups can be made: the host's own
/// cgroup, when this process may create cgroups there and they offer
/// `cgroup.kill`.
fn cgroup_parent() -> Option<PathBuf> {
    if !cfg!(target_os = "linux") || std::env::var_os("RYE_NO_CGROUP").is_some() {
        return None;
    }
    let own = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let relative = own.lines().find_map(|l| l.strip_prefix("0::"))?;
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    let mount = mounts.lines().find_map(|line| {
        let (left, right) = line.split_once(" - ")?;
        (right.split(' ').next()? == "cgroup2")
            .then(|| left.split(' ').nth(4).map(PathBuf::from))?
    })?;
    let parent = mount.join(relative.trim_start_matches('/'));
    let probe = parent.join(format!("rye-probe-{}", std::process::id()));
    std::fs::create_dir(&probe).ok()?;
    let usable = probe.join("cgroup.kill").exists();
    let _ = std::fs::remove_dir(&probe);
    usable.then_some(parent)
}
