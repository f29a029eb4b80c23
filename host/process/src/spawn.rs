//! Starting a child without copying the host (Linux).
//!
//! The child must join its run's cgroup and set its death signal before it
//! executes anything, so those steps run in the child. Doing that through
//! `std`'s `pre_exec` forks the host: its page tables are copied, which for
//! a process holding a WebAssembly engine, compiled components and caches
//! costs milliseconds a run. This does what `posix_spawn` does instead:
//! `clone(CLONE_VM | CLONE_VFORK)`, the child running on a small stack of
//! its own in the host's memory until it executes the program, the calling
//! thread suspended meanwhile. Every allocation happens before the clone;
//! the child only makes system calls.
//!
//! The child is waited for through a pidfd (`CLONE_PIDFD`, Linux 5.2), so
//! waiting needs no SIGCHLD and signalling cannot hit a reused process id.
//! Where the kernel lacks it, [`spawn`] answers [`Unsupported`] and the
//! caller uses `std`'s spawn.
//!
//! A child with a cgroup is cloned straight into it where it can be
//! (`clone3` with `CLONE_INTO_CGROUP`, Linux 5.7, on x86-64): moving a
//! process in by writing `cgroup.procs` takes the kernel's cgroup
//! migration lock for writing, which waits out an RCU grace period, some
//! 10–20 ms whenever runs do not follow each other closely. Where `clone3`
//! refuses (an older kernel, a cgroup it cannot place a child in), the
//! child joins by `cgroup.procs` as before. `RYE_NO_CLONE3` asks for the
//! latter.

use std::ffi::{CString, c_int, c_void};
use std::io;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::sync::atomic::{AtomicI32, AtomicU8, Ordering};

use tokio::io::unix::AsyncFd;
use tokio::net::unix::pipe;

use crate::Plan;

/// The kernel cannot start a child this way (no `CLONE_PIDFD`).
#[derive(Debug)]
pub(crate) struct Unsupported;

/// A started child: its pipes and the means to wait for it.
pub(crate) struct Child {
    pub(crate) pid: u32,
    pidfd: Option<AsyncFd<OwnedFd>>,
    pub(crate) stdin: Option<pipe::Sender>,
    pub(crate) stdout: Option<pipe::Receiver>,
    pub(crate) stderr: Option<pipe::Receiver>,
}

/// How a child ended: its exit code, or the signal that killed it.
pub(crate) struct Exit {
    pub(crate) code: Option<i32>,
    pub(crate) signal: Option<i32>,
}

impl Child {
    /// Waits until the child has ended, and reaps it.
    pub(crate) async fn wait(&mut self) -> io::Result<Exit> {
        let Some(pidfd) = &self.pidfd else {
            return Err(io::Error::other("the child was already reaped"));
        };
        loop {
            let mut ready = pidfd.readable().await?;
            let options =
                rustix::process::WaitIdOptions::EXITED | rustix::process::WaitIdOptions::NOHANG;
            match rustix::process::waitid(
                rustix::process::WaitId::PidFd(pidfd.get_ref().as_fd()),
                options,
            ) {
                Ok(Some(status)) => {
                    self.pidfd = None;
                    return Ok(Exit {
                        code: status.exit_status(),
                        signal: status.terminating_signal(),
                    });
                }
                Ok(None) => ready.clear_ready(),
                Err(rustix::io::Errno::INTR) => {}
                Err(e) => return Err(e.into()),
            }
        }
    }
}

impl Drop for Child {
    /// A child not waited for is killed, and reaped off this thread (a
    /// process in uninterruptible sleep can take a while to die).
    fn drop(&mut self) {
        if let Some(pidfd) = self.pidfd.take() {
            let pidfd = pidfd.into_inner();
            let _ = rustix::process::pidfd_send_signal(&pidfd, rustix::process::Signal::KILL);
            crate::contain::reap(pidfd);
        }
    }
}

/// Which step of starting the child failed, reported by the child.
#[derive(Clone, Copy)]
#[repr(u8)]
enum Step {
    Started = 0,
    Cgroup,
    DeathSignal,
    HostGone,
    Group,
    Stdio,
    Cwd,
    Exec,
}

/// Everything the child reads, prepared before the clone.
struct Prepared {
    /// Where the program may be: the command itself, or each `PATH` entry
    /// joined with it, tried in order as `execvp` does.
    candidates: Vec<CString>,
    argv: Vec<*const libc::c_char>,
    envp: Vec<*const libc::c_char>,
    cwd: Option<CString>,
    /// The child's stdin, stdout and stderr, each numbered 3 or above so
    /// putting one in place cannot close another.
    stdio: [RawFd; 3],
    /// `cgroup.procs` of the run's cgroup for the child to join by, or
    /// -1 (none, or it was cloned into the cgroup).
    procs: RawFd,
    host: libc::pid_t,
    /// What failed, if anything did: set by the child before it exits.
    step: AtomicU8,
    errno: AtomicI32,
}

/// A run's cgroup: its folder (to clone into) and its `cgroup.procs`
/// (to join by).
#[derive(Clone, Copy)]
pub(crate) struct Cgroup<'a> {
    pub folder: std::os::fd::BorrowedFd<'a>,
    pub procs: std::os::fd::BorrowedFd<'a>,
}

/// Starts `plan`'s program. `marker` is the run's marker variable, when the
/// run carries one; `cgroup` the run's cgroup, when it has one.
pub(crate) fn spawn(
    plan: &Plan,
    marker: Option<(&str, &str)>,
    cgroup: Option<Cgroup<'_>>,
) -> Result<io::Result<Child>, Unsupported> {
    if !pidfds() {
        return Err(Unsupported);
    }
    Ok(prepare_and_clone(plan, marker, cgroup))
}

/// Whether this kernel has pidfds (`pidfd_open`, Linux 5.3, implies
/// `CLONE_PIDFD`, 5.2). An older kernel ignores an unknown clone flag
/// rather than refusing it, so this is asked once, up front.
/// `RYE_NO_PIDFD` answers no, as such a kernel would.
fn pidfds() -> bool {
    static PIDFDS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *PIDFDS.get_or_init(|| {
        std::env::var_os("RYE_NO_PIDFD").is_none()
            && rustix::process::pidfd_open(
                rustix::process::getpid(),
                rustix::process::PidfdFlags::empty(),
            )
            .is_ok()
    })
}

fn prepare_and_clone(
    plan: &Plan,
    marker: Option<(&str, &str)>,
    cgroup: Option<Cgroup<'_>>,
) -> io::Result<Child> {
    let text = |s: &[u8]| {
        CString::new(s).map_err(|_| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                "a NUL byte in the command line or environment",
            )
        })
    };
    let program = text(plan.command.as_bytes())?;
    let mut args = vec![program.clone()];
    for arg in &plan.args {
        args.push(text(arg.as_bytes())?);
    }
    let mut vars = Vec::with_capacity(plan.env.len() + 1);
    for (name, value) in plan
        .env
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .chain(marker)
    {
        if name.is_empty() || name.contains('=') {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{name:?} is not an environment variable name"),
            ));
        }
        vars.push(text(format!("{name}={value}").as_bytes())?);
    }
    let candidates = candidates(plan, &program)?;
    let cwd = plan
        .cwd
        .as_ref()
        .map(|c| text(c.as_os_str().as_bytes()))
        .transpose()?;

    let (stdin_child, stdin_parent) = match plan.stdin {
        Some(_) => {
            let (read, write) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)?;
            (read, Some(write))
        }
        None => (
            rustix::fs::open(
                "/dev/null",
                rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::CLOEXEC,
                rustix::fs::Mode::empty(),
            )?,
            None,
        ),
    };
    let (stdout_parent, stdout_child) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)?;
    let (stderr_parent, stderr_child) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)?;
    let stdio = [
        above_stdio(stdin_child)?,
        above_stdio(stdout_child)?,
        above_stdio(stderr_child)?,
    ];

    let mut prepared = Prepared {
        argv: nul_terminated(&args),
        envp: nul_terminated(&vars),
        candidates,
        cwd,
        stdio: [
            stdio[0].as_raw_fd(),
            stdio[1].as_raw_fd(),
            stdio[2].as_raw_fd(),
        ],
        procs: cgroup.map_or(-1, |c| c.procs.as_raw_fd()),
        host: rustix::process::getpid().as_raw_nonzero().get(),
        step: AtomicU8::new(Step::Started as u8),
        errno: AtomicI32::new(0),
    };
    let (pid, pidfd) = clone_child(&mut prepared, cgroup.map(|c| c.folder))?;
    // The child has executed its program or exited; its ends of the pipes
    // are no longer ours to hold.
    drop(stdio);
    let step = prepared.step.load(Ordering::Acquire);
    if step != Step::Started as u8 {
        // It has exited: reap it, then say what failed.
        let _ = rustix::process::waitid(
            rustix::process::WaitId::PidFd(pidfd.as_fd()),
            rustix::process::WaitIdOptions::EXITED,
        );
        let errno = io::Error::from_raw_os_error(prepared.errno.load(Ordering::Acquire));
        let context = |what: &str| io::Error::new(errno.kind(), format!("{what}: {errno}"));
        return Err(match step {
            s if s == Step::Cgroup as u8 => context("joining the run's cgroup"),
            s if s == Step::DeathSignal as u8 => context("setting the death signal"),
            s if s == Step::HostGone as u8 => io::Error::other("the host exited"),
            s if s == Step::Group as u8 => context("starting a process group"),
            s if s == Step::Stdio as u8 => context("connecting stdin and output"),
            _ => errno,
        });
    }
    // SAFETY: an `OwnedFd` keeps its descriptor open and unchanged until
    // it is dropped, which the `AsyncFd` owning it decides.
    let pidfd = unsafe { AsyncFd::register(pidfd) }.map_err(io::Error::from)?;
    Ok(Child {
        pid,
        pidfd: Some(pidfd),
        stdin: stdin_parent.map(pipe::Sender::from_owned_fd).transpose()?,
        stdout: Some(pipe::Receiver::from_owned_fd(stdout_parent)?),
        stderr: Some(pipe::Receiver::from_owned_fd(stderr_parent)?),
    })
}

/// The paths to try for the program, as `execvp` would with the child's
/// `PATH` (its default when the plan sets none).
fn candidates(plan: &Plan, program: &CString) -> io::Result<Vec<CString>> {
    if plan.command.is_empty() {
        return Err(io::Error::from_raw_os_error(libc::ENOENT));
    }
    if plan.command.contains('/') {
        return Ok(vec![program.clone()]);
    }
    let path = plan
        .env
        .iter()
        .rev()
        .find(|(k, _)| k == "PATH")
        .map_or("/bin:/usr/bin", |(_, v)| v.as_str());
    path.split(':')
        .map(|dir| {
            let joined = if dir.is_empty() {
                plan.command.clone()
            } else {
                format!("{}/{}", dir.trim_end_matches('/'), plan.command)
            };
            CString::new(joined)
                .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a NUL byte in PATH"))
        })
        .collect()
}

fn nul_terminated(strings: &[CString]) -> Vec<*const libc::c_char> {
    strings
        .iter()
        .map(|s| s.as_ptr())
        .chain(std::iter::once(std::ptr::null()))
        .collect()
}

/// `fd` renumbered to 3 or above (a host whose own stdio is closed gets
/// 0–2 back from `pipe`).
fn above_stdio(fd: OwnedFd) -> io::Result<OwnedFd> {
    if fd.as_raw_fd() > 2 {
        return Ok(fd);
    }
    Ok(rustix::io::fcntl_dupfd_cloexec(&fd, 3)?)
}

/// The child's stack: small, since the child only makes system calls, and
/// with a guard page below it.
const STACK: usize = 64 * 1024;
const GUARD: usize = 4096;

/// Clones the child, which runs [`child_main`] until it executes the
/// program; returns once it has, or has exited. With `cgroup` (the run's
/// cgroup folder) it is cloned into that cgroup where the kernel allows,
/// else it joins it itself.
fn clone_child(
    prepared: &mut Prepared,
    cgroup: Option<std::os::fd::BorrowedFd<'_>>,
) -> io::Result<(u32, OwnedFd)> {
    // SAFETY: an anonymous private mapping, unmapped below on every path.
    let stack = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            STACK + GUARD,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_STACK,
            -1,
            0,
        )
    };
    if stack == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the mapping made above; its lowest page becomes the guard.
    unsafe { libc::mprotect(stack, GUARD, libc::PROT_NONE) };
    // The child may not run a signal handler of the host's in the host's
    // memory: every signal is blocked across the clone, and the child
    // resets the handlers before it unblocks them.
    let mut all: libc::sigset_t = unsafe { std::mem::zeroed() };
    let mut before: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: plain signal-mask calls on valid sets.
    unsafe {
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut before);
    }
    let mut pidfd: c_int = -1;
    let mut pid = -1;
    if let Some(folder) = cgroup.filter(|_| clone3_wanted()) {
        let joins_by = prepared.procs;
        prepared.procs = -1;
        // SAFETY: as for `clone` below; the stack is the same mapping.
        pid = unsafe { clone3_into(prepared, stack, folder, &mut pidfd) };
        if pid < 0 {
            // Refused before any child existed: it joins by itself.
            prepared.procs = joins_by;
        }
    }
    if pid < 0 {
        // SAFETY: `clone` with CLONE_VM | CLONE_VFORK runs `child_main` on
        // the stack mapped above, in this memory, while this thread waits
        // until the child executes or exits; `prepared` outlives that and
        // the child only reads it (and stores its atomics). The stack
        // pointer given is the top of the mapping, 16-byte aligned.
        pid = unsafe {
            let top = stack.cast::<u8>().add(STACK + GUARD).cast::<c_void>();
            libc::clone(
                child_main,
                top,
                libc::CLONE_VM | libc::CLONE_VFORK | libc::CLONE_PIDFD | libc::SIGCHLD,
                std::ptr::from_mut(prepared).cast::<c_void>(),
                &mut pidfd as *mut c_int,
            )
        };
    }
    let error = io::Error::last_os_error();
    // SAFETY: restoring the mask saved above; unmapping the stack, which
    // the child no longer uses (it has executed or exited).
    unsafe {
        libc::pthread_sigmask(libc::SIG_SETMASK, &before, std::ptr::null_mut());
        libc::munmap(stack, STACK + GUARD);
    }
    if pid < 0 {
        return Err(error);
    }
    // SAFETY: the kernel stored a new pidfd, owned by nobody else.
    let pidfd = unsafe { OwnedFd::from_raw_fd(pidfd) };
    Ok((pid as u32, pidfd))
}

/// Whether to try cloning children straight into their cgroups.
fn clone3_wanted() -> bool {
    static WANTED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *WANTED
        .get_or_init(|| cfg!(target_arch = "x86_64") && std::env::var_os("RYE_NO_CLONE3").is_none())
}

/// `struct clone_args` as far as its `cgroup` field (the kernel's
/// `CLONE_ARGS_SIZE_VER2`).
#[repr(C)]
struct CloneArgs {
    flags: u64,
    pidfd: u64,
    child_tid: u64,
    parent_tid: u64,
    exit_signal: u64,
    stack: u64,
    stack_size: u64,
    tls: u64,
    set_tid: u64,
    set_tid_size: u64,
    cgroup: u64,
}

const CLONE_INTO_CGROUP: u64 = 0x2_0000_0000;

/// `clone3` with CLONE_VM | CLONE_VFORK | CLONE_PIDFD | CLONE_INTO_CGROUP:
/// the child runs [`child_main`] on `stack` (the mapping of [`STACK`] +
/// [`GUARD`] bytes) inside the cgroup `folder` names. The child's pid, or
/// -1 with `errno` set and no child made.
///
/// # Safety
///
/// As for `clone` in [`clone_child`]: `prepared` outlives the child's
/// time before it executes, and `stack` is mapped and unused.
#[cfg(target_arch = "x86_64")]
unsafe fn clone3_into(
    prepared: &mut Prepared,
    stack: *mut c_void,
    folder: std::os::fd::BorrowedFd<'_>,
    pidfd: &mut c_int,
) -> c_int {
    let args = CloneArgs {
        flags: (libc::CLONE_VM | libc::CLONE_VFORK | libc::CLONE_PIDFD) as u64 | CLONE_INTO_CGROUP,
        pidfd: std::ptr::from_mut(pidfd) as u64,
        child_tid: 0,
        parent_tid: 0,
        exit_signal: libc::SIGCHLD as u64,
        stack: stack as u64,
        stack_size: (STACK + GUARD) as u64,
        tls: 0,
        set_tid: 0,
        set_tid_size: 0,
        cgroup: folder.as_raw_fd() as u64,
    };
    let arg = std::ptr::from_mut(prepared).cast::<c_void>();
    let result: i64;
    // SAFETY: the raw system call. In the parent it returns the child's
    // pid or a negated errno and touches nothing else (rcx and r11 are the
    // registers `syscall` itself overwrites). The child starts on its own
    // stack (the top of the mapping, 16-byte aligned), calls `child_main`
    // with `arg` and ends with what it returns; it never comes back to
    // this function's frame, which it does not share.
    unsafe {
        std::arch::asm!(
            "syscall",
            "test rax, rax",
            "jnz 2f",
            "xor ebp, ebp",
            "mov rdi, r12",
            "call {main}",
            "mov edi, eax",
            "mov eax, 60",
            "syscall",
            "ud2",
            "2:",
            main = sym child_main,
            inlateout("rax") libc::SYS_clone3 => result,
            in("rdi") &args as *const CloneArgs,
            in("rsi") std::mem::size_of::<CloneArgs>(),
            in("r12") arg,
            lateout("rcx") _,
            lateout("r11") _,
            options(nostack),
        );
    }
    if result < 0 {
        set_errno(-result as c_int);
        return -1;
    }
    result as c_int
}

#[cfg(not(target_arch = "x86_64"))]
unsafe fn clone3_into(
    _prepared: &mut Prepared,
    _stack: *mut c_void,
    _folder: std::os::fd::BorrowedFd<'_>,
    _pidfd: &mut c_int,
) -> c_int {
    set_errno(libc::ENOSYS);
    -1
}

/// The child, from the clone until it executes the program. It shares the
/// host's memory, so it allocates nothing, takes no lock and runs no Rust
/// code that could panic: system calls on what [`Prepared`] holds.
extern "C" fn child_main(arg: *mut c_void) -> c_int {
    // SAFETY: `arg` is the `Prepared` the parent keeps alive, unmoved,
    // until this child has executed or exited.
    let p = unsafe { &*(arg as *const Prepared) };
    let fail = |step: Step| -> c_int {
        p.errno.store(errno(), Ordering::Release);
        p.step.store(step as u8, Ordering::Release);
        // SAFETY: ends this child without running the host's exit code.
        unsafe { libc::_exit(127) }
    };
    // SAFETY: each call is an async-signal-safe system call wrapper on
    // memory prepared by the parent.
    unsafe {
        // Handlers of the host would run in its memory: back to default
        // (ignored signals stay ignored, except SIGPIPE, which Rust
        // ignores and programs expect at its default).
        for signal in 1..=libc::SIGRTMAX() {
            let mut old: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(signal, std::ptr::null(), &mut old) == 0
                && ((old.sa_sigaction != libc::SIG_IGN && old.sa_sigaction != libc::SIG_DFL)
                    || signal == libc::SIGPIPE)
            {
                let mut default: libc::sigaction = std::mem::zeroed();
                default.sa_sigaction = libc::SIG_DFL;
                libc::sigaction(signal, &default, std::ptr::null_mut());
            }
        }
        if p.procs >= 0 && libc::write(p.procs, b"0".as_ptr().cast(), 1) != 1 {
            return fail(Step::Cgroup);
        }
        // The child dies with the host; if the host is already gone, it
        // must not start at all.
        if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong) != 0 {
            return fail(Step::DeathSignal);
        }
        if libc::getppid() != p.host {
            return fail(Step::HostGone);
        }
        if libc::setpgid(0, 0) != 0 {
            return fail(Step::Group);
        }
        for (target, &fd) in p.stdio.iter().enumerate() {
            if libc::dup2(fd, target as c_int) < 0 {
                return fail(Step::Stdio);
            }
        }
        if let Some(cwd) = &p.cwd
            && libc::chdir(cwd.as_ptr()) != 0
        {
            return fail(Step::Cwd);
        }
        let empty: libc::sigset_t = std::mem::zeroed();
        libc::sigprocmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut());
        // As execvp: a candidate that is missing or not searchable moves on
        // to the next; permission denied is remembered; anything else ends
        // the search.
        let mut denied = false;
        for path in &p.candidates {
            libc::execve(path.as_ptr(), p.argv.as_ptr(), p.envp.as_ptr());
            match errno() {
                libc::EACCES => denied = true,
                libc::ENOENT | libc::ENOTDIR | libc::ESTALE | libc::ENODEV | libc::ETIMEDOUT => {}
                _ => return fail(Step::Exec),
            }
        }
        if denied {
            set_errno(libc::EACCES);
        }
        fail(Step::Exec)
    }
}

fn errno() -> c_int {
    // SAFETY: reads this thread's errno.
    unsafe { *libc::__errno_location() }
}

fn set_errno(value: c_int) {
    // SAFETY: writes this thread's errno.
    unsafe { *libc::__errno_location() = value }
}
