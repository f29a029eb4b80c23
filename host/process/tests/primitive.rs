//! The subprocess primitive against real processes.

use std::path::Path;
use std::time::{Duration, Instant};

use rye_process::{Capture, Plan, run};
use rye_test_artifacts::process_dies_soon;

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap()
}

fn sh(script: &str) -> Plan {
    Plan::new("/bin/sh").arg("-c").arg(script)
}

fn wait_for_pid(file: &Path) -> u32 {
    for _ in 0..200 {
        if let Ok(text) = std::fs::read_to_string(file)
            && let Ok(pid) = text.trim().parse()
        {
            return pid;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("{} never appeared", file.display());
}

#[test]
fn runs_argv_without_a_shell() {
    let out = rt()
        .block_on(run(
            &Plan::new("/bin/echo").arg("a b").arg("$HOME;*"),
            &Capture::default(),
        ))
        .unwrap();
    assert!(out.success());
    assert_eq!(out.stdout, b"a b $HOME;*\n");
}

#[test]
fn the_environment_is_exactly_the_plan() {
    let plan = Plan::new("/usr/bin/env")
        .env("ONLY", "this")
        .env("AND", "that");
    let out = rt().block_on(run(&plan, &Capture::default())).unwrap();
    let mut lines: Vec<_> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect();
    lines.sort();
    // Where no cgroup contains runs, each carries its marker for the sweep.
    if rye_process::containment() == rye_process::Containment::ProcessGroup {
        let marker = format!("{}=", rye_process::RUN_MARKER);
        assert_eq!(lines.iter().filter(|l| l.starts_with(&marker)).count(), 1);
        lines.retain(|l| !l.starts_with(&marker));
    }
    assert_eq!(lines, ["AND=that", "ONLY=this"]);
}

#[test]
fn cwd_exit_code_and_stderr() {
    let dir = tempfile::tempdir().unwrap();
    let out = rt()
        .block_on(run(
            &sh("pwd; echo oops >&2; exit 3").cwd(dir.path()),
            &Capture::default(),
        ))
        .unwrap();
    assert_eq!(out.code, Some(3));
    assert!(!out.success());
    assert_eq!(
        String::from_utf8(out.stdout).unwrap().trim(),
        dir.path().canonicalize().unwrap().to_str().unwrap()
    );
    assert_eq!(out.stderr, b"oops\n");
}

#[test]
fn ten_megabytes_reach_stdin() {
    let payload = vec![b'x'; 10 << 20];
    let out = rt()
        .block_on(run(
            &Plan::new("/usr/bin/wc").arg("-c").stdin(payload),
            &Capture::default(),
        ))
        .unwrap();
    assert_eq!(
        String::from_utf8(out.stdout).unwrap().trim(),
        (10 << 20).to_string()
    );
}

#[test]
fn a_flood_of_output_is_capped_not_buffered() {
    let capture = Capture {
        stdout: 1 << 20,
        stderr: 1 << 10,
    };
    let out = rt()
        .block_on(run(
            &sh("head -c 100000000 /dev/zero; head -c 5000 /dev/zero >&2"),
            &capture,
        ))
        .unwrap();
    assert!(out.success());
    assert_eq!(out.stdout.len(), 1 << 20);
    assert_eq!(out.stdout_dropped, 100_000_000 - (1 << 20));
    assert_eq!(out.stderr.len(), 1 << 10);
    assert_eq!(out.stderr_dropped, 5000 - (1 << 10));
}

#[test]
fn a_watcher_sees_the_output_counted_while_the_child_runs() {
    let dir = tempfile::tempdir().unwrap();
    let gate = dir.path().join("gate");
    let counts = rye_process::OutputCounts::default();
    let script = format!(
        "head -c 70000 /dev/zero; printf 'abc' >&2; while [ ! -e {} ]; do sleep 0.01; done; printf 'z'",
        gate.display()
    );
    let capture = Capture {
        stdout: 10,
        stderr: 1 << 10,
    };
    let out = rt().block_on(async {
        let plan = sh(&script);
        let run = rye_process::run_watched(&plan, &capture, Some(&counts));
        tokio::pin!(run);
        // Before it ends: all it wrote, kept or not.
        while counts.stdout() < 70_000 || counts.stderr() < 3 {
            tokio::select! {
                _ = &mut run => panic!("it ended before its gate opened"),
                () = tokio::time::sleep(std::time::Duration::from_millis(10)) => {}
            }
        }
        assert_eq!((counts.stdout(), counts.stderr()), (70_000, 3));
        std::fs::write(&gate, "").unwrap();
        run.await.unwrap()
    });
    assert!(out.success());
    assert_eq!(counts.stdout(), 70_001);
    assert_eq!(out.stdout.len() as u64 + out.stdout_dropped, 70_001);
}

#[test]
fn a_timeout_kills_the_whole_group() {
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("bg.pid");
    let script = format!("sleep 30 & echo $! > {}; sleep 30", pidfile.display());
    let started = Instant::now();
    let out = rt()
        .block_on(run(
            &sh(&script).timeout(Duration::from_millis(300)),
            &Capture::default(),
        ))
        .unwrap();
    assert!(out.timed_out);
    assert!(!out.success());
    assert_eq!(out.signal, Some(9));
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "it waited for the sleeps"
    );
    let background = wait_for_pid(&pidfile);
    assert!(
        process_dies_soon(background),
        "the background child survived"
    );
}

#[test]
fn leftovers_are_killed_when_the_child_exits() {
    let out = rt()
        .block_on(run(&sh("sleep 30 & echo $!"), &Capture::default()))
        .unwrap();
    assert!(out.success());
    let background: u32 = String::from_utf8(out.stdout)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(
        process_dies_soon(background),
        "the background child survived"
    );
}

#[test]
fn cancelling_the_run_kills_the_group() {
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("child.pid");
    let plan = sh(&format!("echo $$ > {}; sleep 30", pidfile.display()));
    let runtime = rt();
    runtime.block_on(async {
        let running = tokio::spawn(async move { run(&plan, &Capture::default()).await });
        let pid = tokio::task::spawn_blocking(move || wait_for_pid(&pidfile))
            .await
            .unwrap();
        running.abort();
        let _ = running.await;
        assert!(
            process_dies_soon(pid),
            "the child outlived its cancelled run"
        );
    });
}

#[test]
fn a_missing_program_is_a_spawn_error_naming_it() {
    let error = refused(Plan::new("/no/such/program"));
    assert!(error.to_string().contains("/no/such/program"), "{error}");
}

/// The error of a plan that cannot start.
fn refused(plan: Plan) -> rye_process::SpawnError {
    rt().block_on(run(&plan, &Capture::default())).unwrap_err()
}

#[test]
fn a_bare_name_is_found_on_the_plans_path() {
    let rt = rt();
    let found = rt
        .block_on(run(
            &Plan::new("echo")
                .arg("found")
                .env("PATH", "/nonexistent:/usr/bin:/bin"),
            &Capture::default(),
        ))
        .unwrap();
    assert_eq!(found.stdout, b"found\n");
    // Without PATH, the default search path, as execvp has it.
    let default = rt
        .block_on(run(
            &Plan::new("sh").arg("-c").arg("echo default"),
            &Capture::default(),
        ))
        .unwrap();
    assert_eq!(default.stdout, b"default\n");
    // The host's own PATH is not consulted.
    let error = refused(Plan::new("echo").env("PATH", "/nonexistent"));
    assert_eq!(error.source.kind(), std::io::ErrorKind::NotFound, "{error}");
    assert!(error.to_string().contains("\"echo\""), "{error}");
}

#[test]
fn a_program_that_may_not_be_executed_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("tool.sh");
    std::fs::write(&script, "#!/bin/sh\necho ran\n").unwrap();
    let error = refused(Plan::new(script.display().to_string()));
    assert_eq!(
        error.source.kind(),
        std::io::ErrorKind::PermissionDenied,
        "{error}"
    );
    // The same through a PATH search: permission denied, not "not found".
    let error = refused(Plan::new("tool.sh").env("PATH", dir.path().display().to_string()));
    assert_eq!(
        error.source.kind(),
        std::io::ErrorKind::PermissionDenied,
        "{error}"
    );
}

#[test]
fn a_missing_working_folder_is_a_spawn_error() {
    let error = refused(Plan::new("/bin/true").cwd("/no/such/folder"));
    assert_eq!(error.source.kind(), std::io::ErrorKind::NotFound, "{error}");
}

#[test]
fn a_nul_byte_in_an_argument_is_refused_before_anything_starts() {
    let error = refused(Plan::new("/bin/echo").arg("a\0b"));
    assert_eq!(
        error.source.kind(),
        std::io::ErrorKind::InvalidInput,
        "{error}"
    );
}

#[cfg(target_os = "linux")]
#[test]
fn the_child_starts_with_no_signal_blocked_or_ignored() {
    // The host ignores SIGPIPE (Rust does) and blocks every signal while
    // it starts a child; neither may reach the program. (Signals 32 and
    // 33 belong to the C library, which keeps them as it likes.) What the
    // host was started ignoring (SIGHUP under nohup) stays ignored, as
    // POSIX has it.
    let own = std::fs::read_to_string("/proc/self/status").unwrap();
    let inherited = {
        let line = own.lines().find(|l| l.starts_with("SigIgn:")).unwrap();
        u64::from_str_radix(line["SigIgn:".len()..].trim(), 16).unwrap()
    };
    let sigpipe = 1u64 << (libc::SIGPIPE - 1);
    let out = rt()
        .block_on(run(
            &Plan::new("/bin/cat").arg("/proc/self/status"),
            &Capture::default(),
        ))
        .unwrap();
    let status = String::from_utf8(out.stdout).unwrap();
    let mask = |field: &str| {
        let line = status.lines().find(|l| l.starts_with(field)).unwrap();
        u64::from_str_radix(line[field.len()..].trim(), 16).unwrap()
    };
    assert_eq!(mask("SigBlk:"), 0, "{status}");
    assert_eq!(
        mask("SigIgn:") & 0x7fff_ffff,
        inherited & !sigpipe & 0x7fff_ffff,
        "{status}"
    );
}

#[test]
fn many_runs_at_once_each_get_their_own_output() {
    let rt = rt();
    let outcomes = rt.block_on(async {
        let runs = (0..64).map(|i| async move {
            let plan = sh(&format!("echo out{i}; echo err{i} >&2; exit {}", i % 7));
            (i, run(&plan, &Capture::default()).await.unwrap())
        });
        futures_join_all(runs).await
    });
    for (i, outcome) in outcomes {
        assert_eq!(outcome.stdout, format!("out{i}\n").as_bytes());
        assert_eq!(outcome.stderr, format!("err{i}\n").as_bytes());
        assert_eq!(outcome.code, Some(i % 7));
    }
}

/// Runs every future on the runtime at once.
async fn futures_join_all<F: std::future::Future + Send + 'static>(
    futures: impl Iterator<Item = F>,
) -> Vec<F::Output>
where
    F::Output: Send + 'static,
{
    let handles: Vec<_> = futures.map(tokio::spawn).collect();
    let mut outputs = Vec::new();
    for handle in handles {
        outputs.push(handle.await.unwrap());
    }
    outputs
}

#[test]
fn an_environment_name_that_cannot_be_one_is_refused() {
    // An adapter's plan is a component's output: names with `=`, empty
    // names and NUL bytes are refused, not passed on mangled.
    for (name, value) in [("A=B", "x"), ("", "x"), ("A\0B", "x"), ("OK", "x\0y")] {
        let error = refused(Plan::new("/bin/true").env(name, value));
        assert_eq!(
            error.source.kind(),
            std::io::ErrorKind::InvalidInput,
            "{name:?}: {error}"
        );
    }
}
