//! Support for the host's tests: paths of the components built from
//! `tests/test-programs/` and `examples/`, one constant per package, named
//! after it (`parser-loop` → `PARSER_LOOP`), process checks, a small
//! HTTP server, and real PostgreSQL and S3 servers.

include!(concat!(env!("OUT_DIR"), "/components.rs"));

pub mod http_server;
pub mod servers;

/// Whether process `pid` is gone: no longer listed, or a zombie waiting to
/// be reaped.
pub fn process_gone(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => matches!(
            stat.rsplit(')')
                .next()
                .and_then(|rest| rest.split_whitespace().next()),
            Some("Z" | "X")
        ),
    }
}

/// Whether process `pid` goes within five seconds. A SIGKILL is delivered
/// asynchronously, so a process signalled a moment ago may still be listed
/// as running on a loaded machine.
pub fn process_dies_soon(pid: u32) -> bool {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while !process_gone(pid) {
        if std::time::Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    true
}

/// Says that `check` cannot run here because `missing`. Under CI
/// (`CI=true`), where `.ci/run` installs every tool the tests use, that is
/// a failure; elsewhere the skip is written past the test harness's output
/// capture, so it shows in the run's output even when the test passes.
pub fn skip(check: &str, missing: &str) {
    if std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false" && v != "0") {
        panic!(
            "{check} cannot run: {missing}; under CI=true a missing tool is a failure, not a skip"
        );
    }
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "SKIPPED {check}: {missing}");
}

#[cfg(test)]
mod tests {
    #[test]
    fn under_ci_a_missing_tool_fails_the_test_instead_of_skipping_it() {
        // SAFETY: the only test in this binary, so nothing reads the
        // environment concurrently.
        unsafe { std::env::set_var("CI", "true") };
        let failed = std::panic::catch_unwind(|| super::skip("a check", "no such tool"));
        unsafe { std::env::set_var("CI", "false") };
        assert!(failed.is_err(), "a skip under CI=true passed");
        super::skip("a check", "no such tool (a visible skip outside CI)");
    }
}
