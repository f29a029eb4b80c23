//! The registry on real SQLite files, shared by real processes: a thread's
//! life, a runner killed with SIGKILL, concurrent writers, and files that
//! are not a registry.

use std::io::BufRead;
use std::process::{Command, Stdio};

use rye_threads::{Ended, Ending, NewThread, ProcessIdentity, Registry, Status, ThreadError};
use serde_json::json;

fn new_thread(item: &str) -> NewThread {
    NewThread {
        item_type: "tool".into(),
        item_id: item.into(),
        params_hash: "0".repeat(64),
        chain: json!([{"item_id": item}]),
        execution_mode: "sync".into(),
        ..NewThread::default()
    }
}

fn completed(hash: &str) -> Ending {
    Ending {
        status: Status::Completed,
        result_hash: Some(hash.into()),
        result: None,
        error: None,
        chain: None,
    }
}

#[tokio::test]
async fn a_thread_runs_logs_and_ends_once() {
    let dir = tempfile::tempdir().unwrap();
    let registry = Registry::open(dir.path()).await.unwrap();
    assert!(dir.path().join("registry.db").is_file());
    let id = registry.start(new_thread("demo/echo")).await.unwrap();
    assert_eq!(uuid_shape(&id), (8, 4, 4, 4, 12), "{id}");
    let running = registry.get(&id).await.unwrap().unwrap();
    assert_eq!(running.status, Status::Running);
    assert_eq!(running.pid, Some(std::process::id()));
    assert_eq!(running.chain, json!([{"item_id": "demo/echo"}]));

    // Starting logs `started` with the process; the run adds its own.
    let first = registry.events(&id, 0).await.unwrap();
    assert_eq!(first.len(), 1);
    assert_eq!(first[0].kind, "started");
    assert_eq!(first[0].detail, json!({"pid": std::process::id()}));
    for (kind, n) in [("progress", 2), ("output", 3)] {
        let seq = registry.event(&id, kind, &json!({"n": n})).await.unwrap();
        assert_eq!(seq, n);
    }
    let later = registry.events(&id, 1).await.unwrap();
    assert_eq!(
        later.iter().map(|e| e.kind.as_str()).collect::<Vec<_>>(),
        ["progress", "output"]
    );
    assert_eq!(later[1].detail, json!({"n": 3}));

    registry.finish(&id, completed("ab")).await.unwrap();
    let done = registry.get(&id).await.unwrap().unwrap();
    assert_eq!(done.status, Status::Completed);
    assert_eq!(done.result_hash.as_deref(), Some("ab"));
    assert!(done.finished_at.is_some_and(|t| t >= done.created_at));
    // Finishing logs `finished` with the ending, in the same write.
    let last = registry.events(&id, 3).await.unwrap();
    assert_eq!(last.len(), 1);
    assert_eq!(last[0].kind, "finished");
    assert_eq!(
        last[0].detail,
        json!({"status": "completed", "result_hash": "ab", "error": null})
    );
    // Once only: a late cancel or a second finish is refused.
    match registry.finish(&id, completed("cd")).await {
        Err(ThreadError::NotRunning { status, .. }) => assert_eq!(status, Status::Completed),
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        registry.finish("no-such-thread", completed("x")).await,
        Err(ThreadError::NotFound(_))
    ));
    assert!(matches!(
        registry.event("no-such-thread", "x", &json!({})).await,
        Err(ThreadError::NotFound(_))
    ));

    let other = registry.start(new_thread("demo/other")).await.unwrap();
    let listed = registry.list(None, 10).await.unwrap();
    assert_eq!(listed.len(), 2);
    assert_eq!(listed[0].thread_id, other, "newest first");
    let running = registry.list(Some(Status::Running), 10).await.unwrap();
    assert_eq!(running.len(), 1);
    assert_eq!("timed_out".parse::<Status>().unwrap(), Status::TimedOut);
    assert!("sleeping".parse::<Status>().is_err());
}

fn uuid_shape(id: &str) -> (usize, usize, usize, usize, usize) {
    let parts: Vec<usize> = id.split('-').map(str::len).collect();
    (parts[0], parts[1], parts[2], parts[3], parts[4])
}

const RUNNER: &str = "RYE_THREADS_TEST_RUNNER";

/// Starts this test binary's test `name` as a runner for the registry in
/// `dir` (passed in `variable`); the runner and the thread id it says.
fn runner(name: &str, variable: &str, dir: &std::path::Path) -> (std::process::Child, String) {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", name, "--nocapture", "--test-threads", "1"])
        .env(variable, dir)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let id = std::io::BufReader::new(child.stdout.take().unwrap())
        .lines()
        .map_while(Result::ok)
        // libtest writes "test name ... " without a line end before it.
        .find_map(|line| {
            line.split_once("THREAD ")
                .map(|(_, id)| id.trim().to_owned())
        })
        .expect("the runner said its thread");
    (child, id)
}

/// The runner the kill test kills: records a thread, says its id, waits.
#[tokio::test]
async fn runner_for_the_kill_test() {
    let Some(dir) = std::env::var_os(RUNNER) else {
        return;
    };
    let registry = Registry::open(std::path::Path::new(&dir)).await.unwrap();
    let id = registry.start(new_thread("demo/sleep")).await.unwrap();
    registry.event(&id, "started", &json!({})).await.unwrap();
    println!("THREAD {id}");
    tokio::time::sleep(std::time::Duration::from_secs(60)).await;
}

#[tokio::test]
async fn a_runner_killed_mid_run_is_marked_killed_on_the_next_open() {
    let dir = tempfile::tempdir().unwrap();
    let (mut child, id) = runner("runner_for_the_kill_test", RUNNER, dir.path());
    let pid = child.id();

    // While it runs, opening the registry leaves it running.
    let registry = Registry::open(dir.path()).await.unwrap();
    assert_eq!(
        registry.get(&id).await.unwrap().unwrap().status,
        Status::Running
    );
    registry.close().await;

    child.kill().unwrap();
    child.wait().unwrap();
    let registry = Registry::open(dir.path()).await.unwrap();
    let killed = registry.get(&id).await.unwrap().unwrap();
    assert_eq!(killed.status, Status::Killed);
    assert!(
        killed
            .error
            .as_deref()
            .unwrap()
            .contains(&format!("pid {pid}")),
        "{killed:?}"
    );
    // Its log is kept, and says how it ended.
    let log = registry.events(&id, 0).await.unwrap();
    assert_eq!(
        log.iter().map(|e| e.kind.as_str()).collect::<Vec<_>>(),
        ["started", "started", "finished"]
    );
    assert_eq!(log[2].detail["status"], "killed");

    // A record from another boot, or whose pid now names another process,
    // is swept too; one of a live process is not.
    let me = ProcessIdentity::current().unwrap();
    let stale = [
        ProcessIdentity {
            boot_id: "another-boot".into(),
            ..me.clone()
        },
        ProcessIdentity {
            start_ticks: me.start_ticks + 7,
            ..me.clone()
        },
    ];
    let mut stale_ids = Vec::new();
    for process in stale {
        let mut new = new_thread("demo/stale");
        new.process = Some(process);
        stale_ids.push(registry.start(new).await.unwrap());
    }
    let live = registry.start(new_thread("demo/live")).await.unwrap();
    let mut swept = registry.recover().await.unwrap();
    swept.sort();
    stale_ids.sort();
    assert_eq!(swept, stale_ids);
    assert_eq!(
        registry.get(&live).await.unwrap().unwrap().status,
        Status::Running
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hosts_writing_at_once_lose_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let first = Registry::open(dir.path()).await.unwrap();
    let second = Registry::open(dir.path()).await.unwrap();
    let mut tasks = Vec::new();
    for worker in 0..8 {
        let registry = if worker % 2 == 0 {
            first.clone()
        } else {
            second.clone()
        };
        tasks.push(tokio::spawn(async move {
            for n in 0..40 {
                let id = registry
                    .start(new_thread(&format!("w{worker}/t{n}")))
                    .await
                    .unwrap();
                registry
                    .event(&id, "started", &json!({"n": n}))
                    .await
                    .unwrap();
                registry
                    .finish(&id, completed(&format!("{worker}-{n}")))
                    .await
                    .unwrap();
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let all = first.list(None, 1000).await.unwrap();
    assert_eq!(all.len(), 320);
    assert!(all.iter().all(|t| t.status == Status::Completed));
    let mut hashes: Vec<_> = all.iter().filter_map(|t| t.result_hash.clone()).collect();
    hashes.sort();
    hashes.dedup();
    assert_eq!(hashes.len(), 320);
}

#[tokio::test]
async fn what_is_not_a_registry_is_refused_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("registry.db"), vec![0x5a; 8192]).unwrap();
    let error = Registry::open(dir.path()).await.unwrap_err();
    assert!(error.to_string().contains("registry.db"), "{error}");

    let newer = tempfile::tempdir().unwrap();
    let registry = Registry::open(newer.path()).await.unwrap();
    registry.close().await;
    let db = newer.path().join("registry.db");
    let status = Command::new("python3")
        .args(["-c", "import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); c.execute('PRAGMA user_version = 99'); c.commit()"])
        .arg(&db)
        .status();
    if status.is_ok_and(|s| s.success()) {
        let error = Registry::open(newer.path()).await.unwrap_err();
        assert!(
            matches!(error, ThreadError::NewerSchema { found: 99, .. }),
            "{error}"
        );
    }
}

#[tokio::test]
async fn prune_removes_finished_threads_and_their_logs_never_running_ones() {
    let dir = tempfile::tempdir().unwrap();
    let registry = Registry::open(dir.path()).await.unwrap();
    let old = registry.start(new_thread("demo/old")).await.unwrap();
    registry.event(&old, "started", &json!({})).await.unwrap();
    registry.finish(&old, completed("old-hash")).await.unwrap();
    let running = registry.start(new_thread("demo/running")).await.unwrap();
    let cutoff = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
        + 1;
    let released = registry.prune(cutoff).await.unwrap();
    assert_eq!(released, [Some("old-hash".to_owned())]);
    assert!(registry.get(&old).await.unwrap().is_none());
    assert!(registry.events(&old, 0).await.unwrap().is_empty());
    assert!(registry.get(&running).await.unwrap().is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_hosts_creating_one_registry_at_once_all_open_it() {
    for _ in 0..5 {
        let dir = tempfile::tempdir().unwrap();
        let opens: Vec<_> = (0..8)
            .map(|_| {
                let dir = dir.path().to_owned();
                tokio::spawn(async move { Registry::open(&dir).await })
            })
            .collect();
        for open in opens {
            let registry = open.await.unwrap().unwrap();
            registry.start(new_thread("demo/race")).await.unwrap();
        }
    }
}

#[tokio::test]
async fn a_whole_run_recorded_at_once_reads_as_one_started_and_finished() {
    let dir = tempfile::tempdir().unwrap();
    let registry = Registry::open(dir.path()).await.unwrap();
    let mut new = new_thread("demo/quick");
    new.thread_id = Some("quick-1".into());
    let started_at = 1_700_000_000_000;
    let id = registry
        .record(new, started_at, completed("cd"))
        .await
        .unwrap();
    assert_eq!(id, "quick-1");
    let done = registry.get(&id).await.unwrap().unwrap();
    assert_eq!(done.status, Status::Completed);
    assert_eq!(done.result_hash.as_deref(), Some("cd"));
    assert_eq!(done.created_at, started_at);
    assert!(done.finished_at.unwrap() >= started_at);
    let events = registry.events(&id, 0).await.unwrap();
    assert_eq!(
        events.iter().map(|e| e.kind.as_str()).collect::<Vec<_>>(),
        ["started", "finished"]
    );
    assert_eq!(events[0].at, started_at);
    assert_eq!(events.iter().map(|e| e.seq).collect::<Vec<_>>(), [1, 2]);
    // Its log goes on where the two left it.
    let next = registry
        .event(&id, "note", &serde_json::json!({}))
        .await
        .unwrap();
    assert_eq!(next, 3);
    // Recorded once: the same id again is refused, and it is not running.
    let mut again = new_thread("demo/quick");
    again.thread_id = Some("quick-1".into());
    assert!(
        registry
            .record(again, started_at, completed("ef"))
            .await
            .is_err()
    );
    assert!(matches!(
        registry.finish(&id, completed("ef")).await,
        Err(ThreadError::NotRunning { .. })
    ));
}

#[tokio::test]
async fn runs_ended_together_are_each_answered_and_one_refused_costs_the_others_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let registry = Registry::open(dir.path()).await.unwrap();
    let started = registry.start(new_thread("demo/long")).await.unwrap();
    let done = registry.start(new_thread("demo/done")).await.unwrap();
    registry.finish(&done, completed("aa")).await.unwrap();
    let mut quick = new_thread("demo/quick");
    quick.thread_id = Some("quick-2".into());
    let started_at = 1_700_000_000_000;
    let ended = |id: &str, hash: &str, whole: Option<(NewThread, i64)>| Ended {
        id: id.into(),
        ending: completed(hash),
        whole,
    };
    let answers = registry
        .end_all(vec![
            ended(&started, "b1", None),
            ended("quick-2", "b2", Some((quick.clone(), started_at))),
            ended(&done, "b3", None),
            ended("never-started", "b4", None),
        ])
        .await
        .unwrap();
    assert!(answers[0].is_ok() && answers[1].is_ok(), "{answers:?}");
    assert!(
        matches!(&answers[2], Err(ThreadError::NotRunning { id, status: Status::Completed }) if *id == done),
        "{answers:?}"
    );
    assert!(
        matches!(&answers[3], Err(ThreadError::NotFound(id)) if id == "never-started"),
        "{answers:?}"
    );
    let hash = |id: String| {
        let registry = registry.clone();
        async move { registry.get(&id).await.unwrap().unwrap().result_hash }
    };
    assert_eq!(hash(started.clone()).await.as_deref(), Some("b1"));
    assert_eq!(hash("quick-2".into()).await.as_deref(), Some("b2"));
    // The refused run keeps what it had.
    assert_eq!(hash(done.clone()).await.as_deref(), Some("aa"));

    // A whole run whose id is recorded already (its noted start was
    // folded in) ends that row; one that ended already is refused alone.
    let other = registry.start(new_thread("demo/other")).await.unwrap();
    let answers = registry
        .end_all(vec![
            ended(&other, "c1", None),
            ended("quick-2", "c2", Some((quick, started_at))),
        ])
        .await
        .unwrap();
    assert!(answers[0].is_ok(), "{answers:?}");
    assert!(
        matches!(&answers[1], Err(ThreadError::NotRunning { id, status: Status::Completed }) if id == "quick-2"),
        "{answers:?}"
    );
    assert_eq!(hash(other).await.as_deref(), Some("c1"));
    assert_eq!(hash("quick-2".into()).await.as_deref(), Some("b2"));
}

#[test]
fn thread_ids_made_later_sort_after_and_differ_in_their_random_tail() {
    let first = rye_threads::new_thread_id();
    std::thread::sleep(std::time::Duration::from_millis(2));
    let second = rye_threads::new_thread_id();
    let third = rye_threads::new_thread_id();
    assert!(first < second, "{first} {second}");
    assert_eq!(uuid_shape(&second), (8, 4, 4, 4, 12), "{second}");
    // Made in the same millisecond, they still differ where callers take
    // a random part: the last digits.
    assert_ne!(second[28..], third[28..]);
}

fn kept(hash: &str, object: &[u8]) -> Ending {
    Ending {
        result: Some(object.into()),
        ..completed(hash)
    }
}

#[tokio::test]
async fn a_result_kept_beside_its_thread_is_read_back_once_and_goes_with_it() {
    let dir = tempfile::tempdir().unwrap();
    let registry = Registry::open(dir.path()).await.unwrap();
    let started = registry.start(new_thread("demo/started")).await.unwrap();
    registry
        .finish(&started, kept("h1", b"{\"first\":1}"))
        .await
        .unwrap();
    // A second ending is refused and leaves the kept result as it was.
    assert!(
        registry
            .finish(&started, kept("h2", b"{\"second\":2}"))
            .await
            .is_err()
    );
    assert_eq!(
        registry.result(&started).await.unwrap().as_deref(),
        Some(&b"{\"first\":1}"[..])
    );
    let mut whole = new_thread("demo/whole");
    whole.thread_id = Some("whole-1".into());
    registry
        .end_all(vec![Ended {
            id: "whole-1".into(),
            ending: kept("h3", b"{\"whole\":3}"),
            whole: Some((whole, rye_threads::now_ms())),
        }])
        .await
        .unwrap();
    assert_eq!(
        registry.result("whole-1").await.unwrap().as_deref(),
        Some(&b"{\"whole\":3}"[..])
    );
    let plain = registry.start(new_thread("demo/plain")).await.unwrap();
    registry.finish(&plain, completed("h4")).await.unwrap();
    assert_eq!(registry.result(&plain).await.unwrap(), None);

    let released = registry.prune(i64::MAX).await.unwrap();
    assert_eq!(released.len(), 3);
    for id in [started.as_str(), "whole-1"] {
        assert_eq!(registry.result(id).await.unwrap(), None, "{id}");
    }
}

#[tokio::test]
async fn a_registry_of_the_first_schema_is_brought_up_to_date_keeping_its_threads() {
    let dir = tempfile::tempdir().unwrap();
    let registry = Registry::open(dir.path()).await.unwrap();
    let old = registry.start(new_thread("demo/old")).await.unwrap();
    registry.finish(&old, completed("old-hash")).await.unwrap();
    registry.close().await;
    drop(registry);
    // The first schema is this one without its results.
    let conn = rusqlite::Connection::open(dir.path().join("registry.db")).unwrap();
    conn.execute_batch("DROP TABLE results; PRAGMA user_version = 1;")
        .unwrap();
    drop(conn);

    let registry = Registry::open(dir.path()).await.unwrap();
    let shown = registry.get(&old).await.unwrap().unwrap();
    assert_eq!(shown.result_hash.as_deref(), Some("old-hash"));
    let new = registry.start(new_thread("demo/new")).await.unwrap();
    registry
        .finish(&new, kept("new-hash", b"{}"))
        .await
        .unwrap();
    assert_eq!(
        registry.result(&new).await.unwrap().as_deref(),
        Some(&b"{}"[..])
    );
}

const NOTER: &str = "RYE_THREADS_TEST_NOTER";

/// The runner the noted-start kill test kills: notes a start (nothing in
/// the registry), says its id, waits.
#[tokio::test]
async fn noter_for_the_kill_test() {
    let Some(dir) = std::env::var_os(NOTER) else {
        return;
    };
    let registry = Registry::open(std::path::Path::new(&dir)).await.unwrap();
    let mut new = new_thread("demo/call");
    let id = rye_threads::new_thread_id();
    new.thread_id = Some(id.clone());
    registry.note_start(&new, rye_threads::now_ms()).unwrap();
    println!("THREAD {id}");
    tokio::time::sleep(std::time::Duration::from_secs(60)).await;
}

#[tokio::test]
async fn a_host_killed_after_only_noting_a_start_leaves_its_run_found_and_marked_killed() {
    let dir = tempfile::tempdir().unwrap();
    let (mut child, id) = runner("noter_for_the_kill_test", NOTER, dir.path());
    let pid = child.id();

    // While it runs, an open folds the start in as a running thread.
    let registry = Registry::open(dir.path()).await.unwrap();
    let running = registry.get(&id).await.unwrap().expect("folded in");
    assert_eq!(running.status, Status::Running);
    assert_eq!(running.pid, Some(pid));
    assert_eq!(running.item_id, "demo/call");
    assert_eq!(
        std::fs::metadata(registry.starts_path()).unwrap().len(),
        0,
        "folded starts leave their file"
    );
    registry.close().await;

    child.kill().unwrap();
    child.wait().unwrap();
    let registry = Registry::open(dir.path()).await.unwrap();
    let killed = registry.get(&id).await.unwrap().unwrap();
    assert_eq!(killed.status, Status::Killed, "{killed:?}");
    assert!(
        killed
            .error
            .as_deref()
            .unwrap()
            .contains(&format!("pid {pid}")),
        "{killed:?}"
    );
}

fn noted(registry: &Registry, item: &str) -> (String, NewThread) {
    let mut new = new_thread(item);
    let id = rye_threads::new_thread_id();
    new.thread_id = Some(id.clone());
    registry.note_start(&new, rye_threads::now_ms()).unwrap();
    (id, new)
}

#[tokio::test]
async fn a_noted_run_ends_as_one_thread_however_its_start_and_end_meet_a_fold() {
    let dir = tempfile::tempdir().unwrap();
    let registry = Registry::open(dir.path()).await.unwrap();

    // Recorded whole before any fold: the fold then adds nothing.
    let (whole, new) = noted(&registry, "demo/whole");
    let ended = Ended {
        id: whole.clone(),
        ending: completed("aa"),
        whole: Some((new, rye_threads::now_ms())),
    };
    registry
        .end_all(vec![ended])
        .await
        .unwrap()
        .pop()
        .unwrap()
        .unwrap();
    assert_eq!(registry.fold_starts().await.unwrap(), 0);

    // Folded while it ran, then ended as a whole run: its row is ended.
    let (folded, new) = noted(&registry, "demo/folded");
    assert_eq!(registry.fold_starts().await.unwrap(), 1);
    let ended = Ended {
        id: folded.clone(),
        ending: completed("bb"),
        whole: Some((new, rye_threads::now_ms())),
    };
    registry
        .end_all(vec![ended])
        .await
        .unwrap()
        .pop()
        .unwrap()
        .unwrap();

    // Folded, then started in the registry as a long run is: one row,
    // still running, then finished.
    let (long, new) = noted(&registry, "demo/long");
    assert_eq!(registry.fold_starts().await.unwrap(), 1);
    assert_eq!(registry.start(new).await.unwrap(), long);
    registry.finish(&long, completed("cc")).await.unwrap();

    for (id, hash) in [(&whole, "aa"), (&folded, "bb"), (&long, "cc")] {
        let thread = registry.get(id).await.unwrap().unwrap();
        assert_eq!(thread.status, Status::Completed, "{thread:?}");
        assert_eq!(thread.result_hash.as_deref(), Some(hash));
        let log = registry.events(id, 0).await.unwrap();
        assert_eq!(
            log.iter().map(|e| e.kind.as_str()).collect::<Vec<_>>(),
            ["started", "finished"],
            "{id}"
        );
    }
    assert_eq!(registry.list(None, 100).await.unwrap().len(), 3);
}

#[tokio::test]
async fn noted_starts_that_are_not_starts_are_dropped_and_the_good_ones_kept() {
    let dir = tempfile::tempdir().unwrap();
    let registry = Registry::open(dir.path()).await.unwrap();
    let (good, _) = noted(&registry, "demo/good");
    let me = serde_json::to_value(ProcessIdentity::current().unwrap()).unwrap();
    let line = |id: &str, process: &serde_json::Value| {
        json!({
            "thread_id": id, "parent_id": null, "item_type": "tool",
            "item_id": "demo/bad", "params_hash": "0", "execution_mode": "sync",
            "created_at": 1, "process": process,
        })
        .to_string()
    };
    let hostile = [
        "not json at all".to_owned(),
        "{\"thread_id\": ".to_owned(),
        // An id of another shape, one far too long, and no process.
        line("../../etc/passwd", &me),
        line(&"a".repeat(5000), &me),
        line(&rye_threads::new_thread_id(), &serde_json::Value::Null),
        // Cut off mid-line, as a write torn by a full disk leaves it.
        line(&rye_threads::new_thread_id(), &me)[..40].to_owned(),
    ];
    let mut text = std::fs::read_to_string(registry.starts_path()).unwrap();
    for bad in &hostile {
        text.push_str(bad);
        text.push('\n');
    }
    std::fs::write(registry.starts_path(), text).unwrap();

    assert_eq!(registry.fold_starts().await.unwrap(), 1);
    let threads = registry.list(None, 100).await.unwrap();
    assert_eq!(threads.len(), 1, "{threads:?}");
    assert_eq!(threads[0].thread_id, good);
    assert_eq!(std::fs::metadata(registry.starts_path()).unwrap().len(), 0);
}

#[tokio::test]
async fn a_link_where_noted_starts_go_is_never_followed() {
    let dir = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    let target = outside.path().join("victim");
    std::fs::write(&target, "untouched\n").unwrap();
    let registry = Registry::open(dir.path()).await.unwrap();
    std::os::unix::fs::symlink(&target, registry.starts_path()).unwrap();

    let mut new = new_thread("demo/call");
    new.thread_id = Some(rye_threads::new_thread_id());
    let refused = registry
        .note_start(&new, rye_threads::now_ms())
        .unwrap_err();
    assert!(
        refused.to_string().contains("starts.log"),
        "names the file: {refused}"
    );
    // A fold refuses it too, and the registry still opens.
    assert!(registry.fold_starts().await.is_err());
    let reopened = Registry::open(dir.path()).await.unwrap();
    assert!(reopened.list(None, 10).await.unwrap().is_empty());
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "untouched\n");
}

#[tokio::test]
async fn a_start_without_its_id_is_refused_and_nothing_is_noted() {
    let dir = tempfile::tempdir().unwrap();
    let registry = Registry::open(dir.path()).await.unwrap();
    let refused = registry
        .note_start(&new_thread("demo/call"), rye_threads::now_ms())
        .unwrap_err();
    assert!(
        matches!(refused, rye_threads::ThreadError::MissingId(_)),
        "{refused:?}"
    );
    assert!(refused.to_string().contains("no id"), "{refused}");
    assert_eq!(registry.fold_starts().await.unwrap(), 0);
    assert!(registry.list(None, 10).await.unwrap().is_empty());
}

/// Starts noted by one host while another folds them, over and over:
/// the lock on the file keeps a fold from emptying it between a line's
/// write and its reading, so every start ends up in the registry once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn starts_noted_while_another_host_folds_are_all_kept() {
    let dir = tempfile::tempdir().unwrap();
    let noting = Registry::open(dir.path()).await.unwrap();
    let folding = Registry::open(dir.path()).await.unwrap();
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let notes: Vec<_> = (0..4)
        .map(|_| {
            let noting = noting.clone();
            std::thread::spawn(move || {
                (0..300)
                    .map(|_| noted(&noting, "demo/many").0)
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    let folder = {
        let (folding, done) = (folding.clone(), done.clone());
        tokio::spawn(async move {
            let mut folds = 0;
            while !done.load(std::sync::atomic::Ordering::SeqCst) {
                folding.fold_starts().await.unwrap();
                folds += 1;
            }
            folds
        })
    };
    let mut ids: Vec<String> = notes.into_iter().flat_map(|n| n.join().unwrap()).collect();
    done.store(true, std::sync::atomic::Ordering::SeqCst);
    assert!(folder.await.unwrap() > 0);
    folding.fold_starts().await.unwrap();

    let mut kept: Vec<String> = folding
        .list(None, u32::MAX)
        .await
        .unwrap()
        .into_iter()
        .map(|t| t.thread_id)
        .collect();
    ids.sort();
    kept.sort();
    assert_eq!(kept.len(), 1200);
    assert_eq!(kept, ids);
}
