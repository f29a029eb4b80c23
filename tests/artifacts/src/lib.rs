//! Support for the host's tests: paths of the components built from
//! `tests/test-programs/` and `examples/`, one constant per package, named
//! after it (`parser-loop` → `PARSER_LOOP`), and process checks.

include!(concat!(env!("OUT_DIR"), "/components.rs"));

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
