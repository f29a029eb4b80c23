//! Graph walkers are untrusted too: a walker built from
//! `tests/test-programs/walker-hostile` loops, eats memory, panics,
//! answers garbage or floods the host with actions, and each is a typed
//! error naming its file while the host goes on serving.

use std::path::Path;
use std::time::{Duration, Instant};

use rye_components::{
    ComponentErrorKind, ComponentHost, HostConfig, Limits, WalkClock, WalkNext, WalkRequest, World,
};
use rye_test_artifacts as artifacts;
use serde_json::json;

fn host(limits: Limits, max_walkers: usize) -> ComponentHost {
    ComponentHost::new(HostConfig {
        walker_limits: limits,
        max_walkers,
        ..HostConfig::default()
    })
    .unwrap()
}

fn request(how: &str) -> WalkRequest {
    WalkRequest {
        graph_id: format!("hostile/{how}"),
        graph: json!({"permissions": []}),
        defaults: json!({}),
        parameters: json!({"command": "true"}),
        run_id: "run".into(),
        env_names: Vec::new(),
    }
}

fn clock() -> WalkClock {
    WalkClock {
        epoch_ms: 0,
        iso: "1970-01-01T00:00:00.000000+00:00".into(),
    }
}

fn start_error(host: &ComponentHost, how: &str) -> ComponentErrorKind {
    let component = host
        .load(Path::new(artifacts::WALKER_HOSTILE), World::GraphWalker)
        .unwrap();
    let mut walker = host.walker(&component).unwrap();
    let error = walker.start(&request(how), &clock()).unwrap_err();
    assert_eq!(error.path, Path::new(artifacts::WALKER_HOSTILE));
    error.kind
}

/// A walker that behaves still walks.
fn assert_serves(host: &ComponentHost) {
    let component = host
        .load(Path::new(artifacts::WALKER_HOSTILE), World::GraphWalker)
        .unwrap();
    let mut walker = host.walker(&component).unwrap();
    let outcome = walker
        .start(&request("escalate"), &clock())
        .unwrap()
        .unwrap();
    let WalkNext::Dispatch { actions, .. } = outcome.next else {
        panic!("{outcome:?}");
    };
    assert_eq!(actions[0].item_id, "rye/bash/bash");
    let finished = walker
        .advance(&[json!({"status": "success"})], &clock())
        .unwrap()
        .unwrap();
    assert!(
        matches!(finished.next, WalkNext::Finished(_)),
        "{finished:?}"
    );
}

#[test]
fn a_walker_that_never_decides_is_stopped_at_its_deadline() {
    let deadline = Duration::from_millis(300);
    let host = host(
        Limits {
            deadline,
            ..Limits::default()
        },
        8,
    );
    let started = Instant::now();
    assert_eq!(
        start_error(&host, "loop"),
        ComponentErrorKind::Timeout(deadline)
    );
    assert!(started.elapsed() < deadline + Duration::from_secs(2));
    assert_serves(&host);
}

#[test]
fn memory_panics_garbage_and_floods_are_the_walkers_errors() {
    let host = host(
        Limits {
            memory: 16 * 1024 * 1024,
            ..Limits::default()
        },
        8,
    );
    assert_eq!(
        start_error(&host, "memory"),
        ComponentErrorKind::MemoryLimit {
            limit: 16 * 1024 * 1024
        }
    );
    let ComponentErrorKind::Trap { stderr, .. } = start_error(&host, "panic") else {
        panic!("a panic is a trap");
    };
    assert!(stderr.contains("the walker gave up"), "{stderr}");
    let ComponentErrorKind::BadOutput(why) = start_error(&host, "garbage") else {
        panic!("garbage is bad output");
    };
    assert!(why.contains("cursor"), "{why}");
    let ComponentErrorKind::BadOutput(why) = start_error(&host, "flood") else {
        panic!("a flood is bad output");
    };
    assert!(why.contains("20000 actions"), "{why}");

    // Its analysis must be a JSON object too.
    let component = host
        .load(Path::new(artifacts::WALKER_HOSTILE), World::GraphWalker)
        .unwrap();
    let mut walker = host.walker(&component).unwrap();
    let error = walker.analyze(&request("escalate")).unwrap_err();
    assert!(
        matches!(error.kind, ComponentErrorKind::BadOutput(_)),
        "{error}"
    );
    assert_serves(&host);
}

#[test]
fn walkers_alive_at_once_are_bounded_and_freed_when_dropped() {
    let host = host(Limits::default(), 2);
    let component = host
        .load(Path::new(artifacts::WALKER_HOSTILE), World::GraphWalker)
        .unwrap();
    let first = host.walker(&component).unwrap();
    let _second = host.walker(&component).unwrap();
    let busy = host.walker(&component).err().unwrap();
    assert_eq!(busy.kind, ComponentErrorKind::Busy(2));
    assert!(busy.to_string().contains("all 2"), "{busy}");
    drop(first);
    assert!(host.walker(&component).is_ok());
}

#[test]
fn a_walker_is_no_component_of_another_world() {
    let host = host(Limits::default(), 2);
    let error = host
        .load(Path::new(artifacts::WALKER_HOSTILE), World::Parser)
        .unwrap_err();
    assert!(
        matches!(error.kind, ComponentErrorKind::WrongWorld { .. }),
        "{error}"
    );
}
