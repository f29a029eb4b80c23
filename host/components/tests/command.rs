//! Command tools (`wasi:cli` components) run with exactly what each run
//! grants, proven with `tool-probe` built from `tests/test-programs/`:
//! every capability obeyed when granted and refused when not, every limit
//! stopping the run with an error naming it, and the host running the
//! next tool after each.

use std::path::Path;
use std::time::Duration;

use rye_components::{
    CommandGrants, CommandOutput, CommandStop, ComponentHost, DirGrant, HostConfig, Limits,
    LoadedCommand,
};
use rye_test_artifacts as artifacts;
use serde_json::{Value, json};

fn host() -> ComponentHost {
    ComponentHost::new(HostConfig::default()).unwrap()
}

fn probe(host: &ComponentHost) -> std::sync::Arc<LoadedCommand> {
    host.load_command(Path::new(artifacts::TOOL_PROBE), |_| {
        Ok::<(), std::convert::Infallible>(())
    })
    .unwrap()
    .unwrap()
}

fn grants() -> CommandGrants {
    CommandGrants {
        limits: Limits {
            deadline: Duration::from_secs(5),
            memory: 64 << 20,
        },
        output_cap: 1 << 20,
        ..CommandGrants::default()
    }
}

fn run(host: &ComponentHost, grants: &CommandGrants, asked: Value) -> Result<Value, CommandStop> {
    let probe = probe(host);
    let output: CommandOutput = host
        .run_command(&probe, grants, asked.to_string().into_bytes())
        .unwrap()?;
    assert_eq!(output.exit_code, 0, "{}", output.stderr);
    Ok(serde_json::from_slice(&output.stdout).unwrap())
}

/// The host still runs a tool after one failed.
fn assert_serves(host: &ComponentHost) {
    let answer = run(host, &grants(), json!({"do": "echo", "value": 7})).unwrap();
    assert_eq!(answer, json!({"echo": 7}));
}

#[test]
fn parameters_in_and_data_out_as_for_a_process() {
    let host = host();
    assert_serves(&host);
    let probe = probe(&host);
    let exit = host
        .run_command(&probe, &grants(), br#"{"do": "exit", "code": 4}"#.to_vec())
        .unwrap()
        .unwrap();
    // WASI 0.2 carries success or failure, not the code.
    assert_eq!(exit.exit_code, 1);
}

#[test]
fn a_read_only_directory_is_read_and_never_written() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("notes.md"), "# kept\n").unwrap();
    let host = host();
    let mut granted = grants();
    granted.dirs.push(DirGrant {
        host: dir.path().to_owned(),
        guest: "/project".into(),
        writable: false,
    });
    let read = run(
        &host,
        &granted,
        json!({"do": "read", "path": "/project/notes.md"}),
    )
    .unwrap();
    assert_eq!(read, json!({"content": "# kept\n"}));
    let write = run(
        &host,
        &granted,
        json!({"do": "write", "path": "/project/notes.md", "content": "gone"}),
    )
    .unwrap();
    assert!(write["error"].is_string(), "{write}");
    assert_eq!(
        std::fs::read_to_string(dir.path().join("notes.md")).unwrap(),
        "# kept\n"
    );
    let new = run(
        &host,
        &granted,
        json!({"do": "write", "path": "/project/new.md", "content": "x"}),
    )
    .unwrap();
    assert!(new["error"].is_string(), "{new}");
    assert!(!dir.path().join("new.md").exists());
}

#[test]
fn a_writable_directory_is_written_and_nothing_outside_it_is_reached() {
    let root = tempfile::tempdir().unwrap();
    let granted_dir = root.path().join("state");
    std::fs::create_dir(&granted_dir).unwrap();
    std::fs::write(root.path().join("secret.txt"), "outside").unwrap();
    // A link inside the granted folder that leads out of it.
    std::os::unix::fs::symlink(root.path().join("secret.txt"), granted_dir.join("link")).unwrap();
    let host = host();
    let mut granted = grants();
    granted.dirs.push(DirGrant {
        host: granted_dir.clone(),
        guest: "/state".into(),
        writable: true,
    });
    let wrote = run(
        &host,
        &granted,
        json!({"do": "write", "path": "/state/out.json", "content": "{}"}),
    )
    .unwrap();
    assert_eq!(wrote, json!({"written": true}));
    assert_eq!(
        std::fs::read_to_string(granted_dir.join("out.json")).unwrap(),
        "{}"
    );
    for path in [
        "/state/../secret.txt",
        "/state/link",
        root.path().join("secret.txt").to_str().unwrap(),
        "/etc/passwd",
    ] {
        let read = run(&host, &granted, json!({"do": "read", "path": path})).unwrap();
        assert!(read["error"].is_string(), "{path}: {read}");
    }
    assert_serves(&host);
}

#[test]
fn only_the_variables_granted_reach_the_tool() {
    // SAFETY: set before any thread of this test reads the environment.
    unsafe { std::env::set_var("RYE_PROBE_HOST_ONLY", "leaked") };
    let host = host();
    let mut granted = grants();
    granted.env.push(("GREETING".into(), "hello".into()));
    let found = run(&host, &granted, json!({"do": "env", "name": "GREETING"})).unwrap();
    assert_eq!(found["value"], "hello");
    assert_eq!(found["names"], json!(["GREETING"]));
    let hidden = run(
        &host,
        &granted,
        json!({"do": "env", "name": "RYE_PROBE_HOST_ONLY"}),
    )
    .unwrap();
    assert_eq!(hidden["value"], Value::Null);
}

#[test]
fn each_limit_stops_the_run_and_names_itself() {
    let host = host();
    let mut granted = grants();
    granted.limits.deadline = Duration::from_millis(300);
    let stop = run(&host, &granted, json!({"do": "loop"})).unwrap_err();
    assert_eq!(stop, CommandStop::Deadline(Duration::from_millis(300)));
    assert!(stop.to_string().contains("deadline of 300 ms"), "{stop}");
    assert_serves(&host);

    let mut granted = grants();
    granted.limits.memory = 32 << 20;
    let stop = run(&host, &granted, json!({"do": "allocate"})).unwrap_err();
    assert_eq!(stop, CommandStop::Memory(32 << 20));
    assert_serves(&host);

    let mut granted = grants();
    granted.output_cap = 64 << 10;
    let stop = run(&host, &granted, json!({"do": "flood"})).unwrap_err();
    assert_eq!(stop, CommandStop::Output(64 << 10));
    assert!(stop.to_string().contains("output cap"), "{stop}");
    assert_serves(&host);
}

#[test]
fn a_refused_check_compiles_nothing_and_bad_bytes_are_named() {
    let host = host();
    let refused = host
        .load_command(Path::new(artifacts::TOOL_PROBE), |_| Err("not signed"))
        .unwrap();
    assert_eq!(refused.unwrap_err(), "not signed");
    let dir = tempfile::tempdir().unwrap();
    let junk = dir.path().join("junk.wasm");
    std::fs::write(&junk, b"not wasm").unwrap();
    let error = host.load_command(&junk, |_| Ok::<(), ()>(())).unwrap_err();
    assert_eq!(error.path, junk);
    // A plugin component is no command.
    let parser = host
        .load_command(Path::new(artifacts::PARSER_OVERRIDE), |_| Ok::<(), ()>(()))
        .unwrap_err();
    assert!(parser.to_string().contains("command"), "{parser}");
    assert_serves(&host);
}

/// A run of the `tool`-world probe: its output.
fn typed(
    host: &ComponentHost,
    grants: &CommandGrants,
    asked: Value,
) -> Result<CommandOutput, CommandStop> {
    let probe = host
        .load_command(Path::new(artifacts::TYPED_PROBE), |_| {
            Ok::<(), std::convert::Infallible>(())
        })
        .unwrap()
        .unwrap();
    assert!(probe.is_typed());
    host.run_command(&probe, grants, asked.to_string().into_bytes())
        .unwrap()
}

#[test]
fn a_tool_world_component_is_handed_its_call_and_answers_data_or_a_typed_error() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("notes.md"), "# kept\n").unwrap();
    let host = host();
    let mut granted = grants();
    granted.item_id = "demo/typed".into();
    granted.project_path = Some("/project".into());
    granted.dirs.push(DirGrant {
        host: dir.path().to_owned(),
        guest: "/project".into(),
        writable: false,
    });
    let echoed = typed(&host, &granted, json!({"do": "echo", "value": [1, 2]})).unwrap();
    assert_eq!((echoed.exit_code, &echoed.error), (0, &None));
    assert_eq!(
        serde_json::from_slice::<Value>(&echoed.stdout).unwrap(),
        json!({"echo": [1, 2], "item_id": "demo/typed", "project_path": "/project"})
    );
    let read = typed(
        &host,
        &granted,
        json!({"do": "read", "path": "/project/notes.md"}),
    )
    .unwrap();
    assert_eq!(
        serde_json::from_slice::<Value>(&read.stdout).unwrap(),
        json!({"content": "# kept\n"})
    );
    for (asked, expected) in [
        (
            json!({"do": "read", "path": "/project/gone.md"}),
            "not found: /project/gone.md",
        ),
        (json!({"do": "read", "path": "/etc/passwd"}), "/etc/passwd"),
        (
            json!({"do": "fail", "message": "the index is stale"}),
            "the index is stale",
        ),
        (
            json!({"do": "dance"}),
            "invalid parameters: do is Some(\"dance\")",
        ),
        (
            json!(["not", "an", "object"]),
            "invalid parameters: the parameters are",
        ),
    ] {
        let output = typed(&host, &granted, asked.clone()).unwrap();
        assert_eq!(output.exit_code, 1, "{asked}");
        let error = output.error.unwrap_or_else(|| panic!("{asked}: no error"));
        assert!(error.to_string().contains(expected), "{asked}: {error}");
        assert!(output.stdout.is_empty());
    }
}

#[test]
fn a_tool_world_component_is_held_to_the_same_limits() {
    let host = host();
    let mut granted = grants();
    granted.limits.deadline = Duration::from_millis(300);
    let stop = typed(&host, &granted, json!({"do": "loop"})).unwrap_err();
    assert_eq!(stop, CommandStop::Deadline(Duration::from_millis(300)));
    let mut granted = grants();
    granted.output_cap = 1024;
    let stop = typed(&host, &granted, json!({"do": "big", "bytes": 4096})).unwrap_err();
    assert_eq!(stop, CommandStop::Output(1024));
    let fits = typed(&host, &granted, json!({"do": "big", "bytes": 100})).unwrap();
    assert_eq!(fits.exit_code, 0);
    let stop = typed(&host, &grants(), json!({"do": "panic"})).unwrap_err();
    assert!(matches!(stop, CommandStop::Trap { .. }), "{stop:?}");
    assert_serves(&host);
}

#[test]
fn a_cancelled_run_stops_at_the_next_tick_wherever_its_code_is() {
    let host = host();
    for tool in [artifacts::TOOL_PROBE, artifacts::TYPED_PROBE] {
        let loaded = host
            .load_command(Path::new(tool), |_| Ok::<(), std::convert::Infallible>(()))
            .unwrap()
            .unwrap();
        let cancel = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let mut granted = grants();
        granted.limits.deadline = Duration::from_secs(30);
        granted.cancel = Some(std::sync::Arc::clone(&cancel));
        let stopper = {
            let cancel = std::sync::Arc::clone(&cancel);
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(300));
                cancel.store(true, std::sync::atomic::Ordering::Relaxed);
            })
        };
        let started = std::time::Instant::now();
        let stop = host
            .run_command(&loaded, &granted, br#"{"do": "loop"}"#.to_vec())
            .unwrap()
            .unwrap_err();
        stopper.join().unwrap();
        assert_eq!(stop, CommandStop::Cancelled, "{tool}");
        assert!(stop.to_string().contains("cancelled"), "{stop}");
        // Stopped by the cancel, far short of the 30 s deadline.
        assert!(started.elapsed() < Duration::from_secs(20), "{tool}");
        // A run whose flag is never set ends as it would have.
        let mut granted = grants();
        granted.cancel = Some(std::sync::Arc::new(std::sync::atomic::AtomicBool::new(
            false,
        )));
        granted.limits.deadline = Duration::from_millis(300);
        let stop = host
            .run_command(&loaded, &granted, br#"{"do": "loop"}"#.to_vec())
            .unwrap()
            .unwrap_err();
        assert_eq!(stop, CommandStop::Deadline(Duration::from_millis(300)));
    }
    assert_serves(&host);
}

/// A command run on an async task: its answer as on a thread; a run
/// still going at an epoch tick goes on elsewhere, so the task's thread
/// is free for other work while it runs; more runs at once than there
/// are fiber stacks are refused the async way (they run on threads).
#[test]
fn an_async_run_answers_as_a_thread_run_and_leaves_its_worker_free() {
    let host = std::sync::Arc::new(host());
    let loaded = probe(&host);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let asked = br#"{"do": "echo", "value": 3}"#.to_vec();
        let run = host
            .async_run(&loaded)
            .expect("a command with a free stack");
        let (answer, spent) = run.run(grants(), asked).await;
        assert!(spent.is_some());
        let answer = answer.unwrap().unwrap();
        assert_eq!(
            serde_json::from_slice::<Value>(&answer.stdout).unwrap(),
            json!({"echo": 3})
        );

        // A loop to its deadline, on this one-thread runtime, beside a
        // task that counts milliseconds: held by the loop, the thread
        // would count about one a tick (ten a second).
        let mut granted = grants();
        granted.limits.deadline = Duration::from_millis(1500);
        let run = host.async_run(&loaded).unwrap();
        let counted = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counter = {
            let counted = std::sync::Arc::clone(&counted);
            tokio::spawn(async move {
                loop {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    counted.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
            })
        };
        let (stopped, _) = run.run(granted, br#"{"do": "loop"}"#.to_vec()).await;
        counter.abort();
        assert_eq!(
            stopped.unwrap().unwrap_err(),
            CommandStop::Deadline(Duration::from_millis(1500))
        );
        let counted = counted.load(std::sync::atomic::Ordering::Relaxed);
        assert!(
            counted > 200,
            "the loop held the thread: {counted} ticks counted"
        );

        // Every stack taken: the next run is not offered the async way.
        let held: Vec<_> = std::iter::from_fn(|| host.async_run(&loaded))
            .take(64)
            .collect();
        assert!(
            !held.is_empty() && held.len() < 64,
            "{} async runs at once",
            held.len()
        );
        assert!(host.async_run(&loaded).is_none());
        drop(held);
        assert!(host.async_run(&loaded).is_some());
    });
    assert_serves(&host);
}

/// A host that keeps spares runs each command on an instance made ahead
/// of the run, yet no run sees anything of another: each finds itself the
/// first run of its instance, with its own input, variables and
/// directories, whether its instance was a spare or made for it (runs
/// with no time between them for the spares' thread), and whatever the
/// memory cap of the run before.
#[test]
fn runs_on_spare_instances_see_only_their_own_grants_and_input() {
    let host = std::sync::Arc::new(
        ComponentHost::new(HostConfig {
            spares: true,
            ..HostConfig::default()
        })
        .unwrap(),
    );
    let loaded = probe(&host);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let folders: Vec<_> = (0..4).map(|_| tempfile::tempdir().unwrap()).collect();
    for (n, folder) in folders.iter().enumerate() {
        std::fs::write(folder.path().join("secret"), format!("file {n}")).unwrap();
    }
    runtime.block_on(async {
        for round in 0..40 {
            let n = round % folders.len();
            let mut granted = grants();
            granted.env = vec![("SECRET".into(), format!("env {round}"))];
            granted.dirs = vec![DirGrant {
                host: folders[n].path().to_owned(),
                guest: "/data".into(),
                writable: false,
            }];
            if round % 5 == 4 {
                granted.limits.memory = 32 << 20;
            }
            let asked = json!({"do": "remember", "secret": format!("input {round}")});
            let run = host.async_run(&loaded).expect("a free stack");
            let (answer, spent) = run.run(granted, asked.to_string().into_bytes()).await;
            assert!(spent.is_none(), "the spares' thread takes the spent store");
            let answer = answer.unwrap().unwrap();
            assert_eq!(
                serde_json::from_slice::<Value>(&answer.stdout).unwrap(),
                json!({
                    "runs_before": 0,
                    "last_secret": null,
                    "secret": format!("input {round}"),
                    "env": format!("env {round}"),
                    "file": format!("file {n}"),
                }),
                "round {round}"
            );
            // Every other round, the time a client's next request gives
            // the spares' thread.
            if round % 2 == 0 {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    });
    assert_serves(&host);
}

/// Each limit stops a run on a spare instance as on one made for it, and
/// the runs after it are answered: a loop past its deadline, memory past
/// its cap (the spare made with that cap, its first memory counted), and
/// output past its cap.
#[test]
fn each_limit_stops_a_run_on_a_spare_instance() {
    let host = std::sync::Arc::new(
        ComponentHost::new(HostConfig {
            spares: true,
            ..HostConfig::default()
        })
        .unwrap(),
    );
    let loaded = probe(&host);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let echo = br#"{"do": "echo", "value": 1}"#;
    let mut deadline = grants();
    deadline.limits.deadline = Duration::from_millis(300);
    let mut memory = grants();
    memory.limits.memory = 32 << 20;
    let mut output = grants();
    output.output_cap = 64 << 10;
    let cases = [
        (
            deadline,
            "loop",
            CommandStop::Deadline(Duration::from_millis(300)),
        ),
        (memory, "allocate", CommandStop::Memory(32 << 20)),
        (output, "flood", CommandStop::Output(64 << 10)),
    ];
    runtime.block_on(async {
        for (granted, action, stop) in cases {
            // A run with the same cap first, and time for the spares'
            // thread, so that the run past the limit takes a spare.
            let run = host.async_run(&loaded).unwrap();
            let (answer, _) = run.run(granted.clone(), echo.to_vec()).await;
            assert_eq!(answer.unwrap().unwrap().exit_code, 0);
            tokio::time::sleep(Duration::from_millis(50)).await;
            let run = host.async_run(&loaded).unwrap();
            let asked = json!({"do": action}).to_string().into_bytes();
            let (answer, _) = run.run(granted.clone(), asked).await;
            assert_eq!(answer.unwrap().unwrap_err(), stop, "{action}");
            let run = host.async_run(&loaded).unwrap();
            let (answer, _) = run.run(granted, echo.to_vec()).await;
            let answer = answer.unwrap().unwrap();
            assert_eq!(
                serde_json::from_slice::<Value>(&answer.stdout).unwrap(),
                json!({"echo": 1}),
                "after {action}"
            );
        }
    });
    assert_serves(&host);
}
