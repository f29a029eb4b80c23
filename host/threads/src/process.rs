//! Who runs a thread, in a form that survives pid reuse: the pid, the
//! process's start time in clock ticks since boot, and the boot's id. A
//! record whose process is gone, or whose pid now names another process,
//! or that was made before the last boot, is a dead run.

use std::sync::OnceLock;

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessIdentity {
    pub pid: u32,
    /// Field 22 of `/proc/<pid>/stat`: clock ticks after boot.
    pub start_ticks: u64,
    /// `/proc/sys/kernel/random/boot_id`.
    pub boot_id: String,
}

impl ProcessIdentity {
    /// This process (read once: its identity does not change while it
    /// runs).
    pub fn current() -> Option<Self> {
        static CURRENT: OnceLock<Option<ProcessIdentity>> = OnceLock::new();
        CURRENT.get_or_init(|| Self::of(std::process::id())).clone()
    }

    /// Process `pid` as it is now, if it exists and has not exited.
    pub fn of(pid: u32) -> Option<Self> {
        let (state, start_ticks) = stat(pid)?;
        if state == 'Z' || state == 'X' {
            return None;
        }
        Some(Self {
            pid,
            start_ticks,
            boot_id: boot_id()?,
        })
    }

    /// Whether the process this identity names is still running.
    pub fn is_alive(&self) -> bool {
        Self::of(self.pid).is_some_and(|now| now == *self)
    }
}

/// The boot's id, read once: a process outlives no boot.
fn boot_id() -> Option<String> {
    static BOOT: OnceLock<Option<String>> = OnceLock::new();
    BOOT.get_or_init(|| {
        std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
            .ok()
            .map(|id| id.trim().to_owned())
    })
    .clone()
}

/// The state letter and start time of `pid`. The command name in the
/// second field may hold spaces and parentheses, so the fields are
/// counted from the last `)`.
fn stat(pid: u32) -> Option<(char, u64)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &text[text.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let state = fields.first()?.chars().next()?;
    let start = fields.get(19)?.parse().ok()?;
    Some((state, start))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_is_alive_and_a_reused_pid_is_not() {
        let me = ProcessIdentity::current().unwrap();
        assert!(me.is_alive());
        let reused = ProcessIdentity {
            start_ticks: me.start_ticks + 1,
            ..me.clone()
        };
        assert!(!reused.is_alive());
        let other_boot = ProcessIdentity {
            boot_id: "00000000-0000-0000-0000-000000000000".into(),
            ..me
        };
        assert!(!other_boot.is_alive());
    }
}
