//! Spent instances handed on by idle workers (`chores_when_idle`): a
//! switch for the whole process, so these tests have a binary of their
//! own.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use rye_components::{
    Busy, CommandGrants, ComponentHost, HostConfig, IDLE_QUEUED, Limits, LoadedCommand,
    chores_when_idle, idle_chores, idle_chores_waiting,
};
use rye_test_artifacts as artifacts;
use serde_json::{Value, json};

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

/// Runs the probe once on a runtime task, as a call does.
async fn remember(host: &Arc<ComponentHost>, probe: &Arc<LoadedCommand>, secret: &str) -> Value {
    let run = host.async_run(probe).expect("a free stack");
    let asked = json!({"do": "remember", "secret": secret});
    let (answer, spent) = run.run(grants(), asked.to_string().into_bytes()).await;
    assert!(spent.is_none(), "the spent store is handed on");
    let answer = answer.unwrap().unwrap();
    assert_eq!(answer.exit_code, 0, "{}", answer.stderr);
    serde_json::from_slice(&answer.stdout).unwrap()
}

/// The probe's answer, from an instance no run had before, to `secret`.
fn fresh(answer: &Value, secret: &str) {
    assert_eq!(answer["runs_before"], 0, "{answer}");
    assert_eq!(answer["secret"], secret, "{answer}");
}

/// Waits until no chore waits: a worker hands them on as it next goes
/// idle (each sleep here ends with one going idle).
async fn handed_on() {
    for _ in 0..500 {
        if idle_chores_waiting() == 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("{} chores still wait after 5 s", idle_chores_waiting());
}

fn spares_thread_runs() -> bool {
    std::fs::read_dir("/proc/self/task").unwrap().any(|task| {
        std::fs::read_to_string(task.unwrap().path().join("comm"))
            .is_ok_and(|name| name.trim() == "rye-spares")
    })
}

/// While a call is under way its spent instance waits; once none is and
/// a worker goes idle, the worker hands it to the spares' thread. A call
/// made beside another hands its own on at once, and so does one that
/// finds the waiting ones full. Every run is answered by a fresh
/// instance of its own.
#[test]
fn idle_workers_hand_on_what_calls_leave() {
    chores_when_idle();
    let host = Arc::new(
        ComponentHost::new(HostConfig {
            spares: true,
            ..HostConfig::default()
        })
        .unwrap(),
    );
    let probe = host
        .load_command(Path::new(artifacts::TOOL_PROBE), |_| {
            Ok::<(), std::convert::Infallible>(())
        })
        .unwrap()
        .unwrap();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .on_thread_park(idle_chores)
        .enable_all()
        .build()
        .unwrap();
    // On a worker's task, as a server's calls are: a worker goes idle
    // when the task waits, not while a thread outside the workers does.
    let body = async move {
        // One call alone: its instance waits until the call is over.
        let busy = Busy::new();
        fresh(&remember(&host, &probe, "first").await, "first");
        assert_eq!(idle_chores_waiting(), 1);
        assert!(!spares_thread_runs(), "nothing woke the thread yet");
        drop(busy);
        handed_on().await;
        assert!(spares_thread_runs(), "an idle worker handed the chore on");

        // Calls beside another: nothing is left waiting.
        let outer = Busy::new();
        for n in 0..8 {
            let _inner = Busy::new();
            let secret = format!("beside {n}");
            fresh(&remember(&host, &probe, &secret).await, &secret);
            assert_eq!(idle_chores_waiting(), 0);
        }
        drop(outer);

        // Calls one after another with never a moment between them
        // when none is under way (each one's guard taken before the
        // last one's is let go): their instances wait, up to the bound,
        // and past it are handed on at once.
        let mut busy = Busy::new();
        for n in 0..IDLE_QUEUED + 3 {
            let secret = format!("in a row {n}");
            fresh(&remember(&host, &probe, &secret).await, &secret);
            assert_eq!(idle_chores_waiting(), (n + 1).min(IDLE_QUEUED));
            let next = Busy::new();
            drop(std::mem::replace(&mut busy, next));
        }
        drop(busy);
        handed_on().await;

        // Back to back: each a fresh instance.
        for n in 0..20 {
            let secret = format!("again {n}");
            let _busy = Busy::new();
            fresh(&remember(&host, &probe, &secret).await, &secret);
        }
    };
    runtime.block_on(async { tokio::spawn(body).await.unwrap() });
}
