//! Processes that outlive the one that starts them: a runner handed an
//! async run leads a session of its own, so neither the end of the command
//! that started it nor a signal to that command's terminal or process
//! group reaches it. It is no run of its starter (no death signal, no
//! containment by it); it contains the processes of its own run as every
//! host does.

use std::ffi::OsStr;
use std::process::Stdio;

/// Starts `program` with `args` in a new session, stdin a pipe (the
/// caller writes the request and closes it), stdout and stderr `/dev/null`
/// unless `log` is given (stderr then goes there). The caller reaps it
/// (awaits the child) or lets tokio do so after dropping it.
pub fn spawn_detached<I, S>(
    program: &std::path::Path,
    args: I,
    log: Option<std::fs::File>,
) -> std::io::Result<tokio::process::Child>
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let mut command = tokio::process::Command::new(program);
    command
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(log.map_or_else(Stdio::null, Stdio::from))
        .kill_on_drop(false);
    #[cfg(unix)]
    {
        // SAFETY: the closure runs in the child between fork and exec and
        // makes one system call, which is async-signal-safe; it touches no
        // memory of the parent's.
        unsafe {
            command.pre_exec(|| {
                rustix::process::setsid()?;
                Ok(())
            });
        }
    }
    command.spawn()
}

/// A signal to send a process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    /// Asks it to stop (SIGTERM): a runner cancels its run and records so.
    Terminate,
    /// Ends it at once (SIGKILL).
    Kill,
}

/// Sends `signal` to process `pid`; whether it was delivered (false when
/// no such process exists or it is not this user's).
pub fn signal(pid: u32, signal: Signal) -> bool {
    #[cfg(unix)]
    {
        let Some(pid) = i32::try_from(pid)
            .ok()
            .and_then(rustix::process::Pid::from_raw)
        else {
            return false;
        };
        let signal = match signal {
            Signal::Terminate => rustix::process::Signal::TERM,
            Signal::Kill => rustix::process::Signal::KILL,
        };
        rustix::process::kill_process(pid, signal).is_ok()
    }
    #[cfg(not(unix))]
    {
        let _ = (pid, signal);
        false
    }
}
