//! The sandbox and its limits, proven with real components built from
//! `tests/test-programs/`: each hostile component fails with its own typed
//! error naming its file, and the host serves the next call.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rye_components::{
    ComponentErrorKind, ComponentHost, HostConfig, Limits, Origin, ParseRequest, PluginKind, World,
};
use rye_test_artifacts as artifacts;

fn host(limits: Limits) -> ComponentHost {
    ComponentHost::new(HostConfig {
        parser_limits: limits,
        ..HostConfig::default()
    })
    .unwrap()
}

fn request(content: &str) -> ParseRequest<'_> {
    ParseRequest {
        kind: PluginKind::Tool,
        item_id: "demo/x",
        file_name: "x.py",
        content,
    }
}

fn parse_error(host: &ComponentHost, wasm: &str) -> ComponentErrorKind {
    let component = host.load(Path::new(wasm), World::Parser).unwrap();
    let error = host.parse(&component, &request("x")).unwrap_err();
    assert_eq!(error.path, Path::new(wasm));
    error.kind
}

/// The host still parses after a component failed.
fn assert_serves(host: &ComponentHost) {
    let good = host
        .load(Path::new(artifacts::PARSER_OVERRIDE), World::Parser)
        .unwrap();
    let parsed = host.parse(&good, &request("x")).unwrap().unwrap();
    assert_eq!(parsed.document["__version__"], "9.9.9");
}

#[test]
fn endless_loop_is_stopped_at_the_deadline() {
    let deadline = Duration::from_millis(300);
    let host = host(Limits {
        deadline,
        ..Limits::default()
    });
    let started = Instant::now();
    let kind = parse_error(&host, artifacts::PARSER_LOOP);
    let took = started.elapsed();
    assert_eq!(kind, ComponentErrorKind::Timeout(deadline));
    assert!(
        took >= deadline,
        "stopped after {took:?}, before its deadline"
    );
    // Epoch ticks are 100 ms; far more than that means the deadline did
    // not stop it.
    assert!(took < deadline + Duration::from_secs(2), "took {took:?}");
    assert_serves(&host);
}

#[test]
fn at_most_the_bound_of_one_world_run_at_once() {
    // Two slots, six calls that each run to their deadline: they run two
    // at a time, so the last ends no earlier than three deadlines in. (A
    // lower bound only: a slow machine cannot make it pass wrongly.)
    let deadline = Duration::from_millis(300);
    let host = ComponentHost::new(HostConfig {
        parser_limits: Limits {
            deadline,
            ..Limits::default()
        },
        instances_per_world: 2,
        ..HostConfig::default()
    })
    .unwrap();
    let looping = host
        .load(Path::new(artifacts::PARSER_LOOP), World::Parser)
        .unwrap();
    let started = Instant::now();
    std::thread::scope(|s| {
        for _ in 0..6 {
            s.spawn(|| {
                let error = host.parse(&looping, &request("x")).unwrap_err();
                assert_eq!(error.kind, ComponentErrorKind::Timeout(deadline));
            });
        }
    });
    assert!(started.elapsed() >= deadline * 3, "{:?}", started.elapsed());
    assert_serves(&host);
}

#[test]
fn unbounded_allocation_hits_the_memory_cap() {
    let host = host(Limits {
        memory: 16 * 1024 * 1024,
        ..Limits::default()
    });
    let kind = parse_error(&host, artifacts::PARSER_MEMORY_BOMB);
    assert_eq!(
        kind,
        ComponentErrorKind::MemoryLimit {
            limit: 16 * 1024 * 1024
        }
    );
    assert_serves(&host);
}

#[test]
fn a_panic_is_a_trap_carrying_its_message() {
    let host = host(Limits::default());
    match parse_error(&host, artifacts::PARSER_PANIC) {
        ComponentErrorKind::Trap { stderr, .. } => {
            assert!(stderr.contains("cannot cope with x.py"), "{stderr}");
        }
        other => panic!("expected a trap, got {other:?}"),
    }
    assert_serves(&host);
}

#[test]
fn files_that_are_not_components_are_refused() {
    let host = host(Limits::default());
    let dir = tempfile::tempdir().unwrap();
    type Expect = fn(&ComponentErrorKind) -> bool;
    let cases: [(&str, &[u8], Expect); 4] = [
        ("garbage.wasm", b"this is not wasm at all", |k| {
            *k == ComponentErrorKind::NotWasm
        }),
        ("empty.wasm", b"", |k| *k == ComponentErrorKind::NotWasm),
        ("module.wasm", b"\0asm\x01\0\0\0", |k| {
            *k == ComponentErrorKind::CoreModule
        }),
        ("broken.wasm", b"\0asm\x0d\0\x01\0\xff\xff\xff", |k| {
            matches!(k, ComponentErrorKind::Invalid(_))
        }),
    ];
    for (name, bytes, expected) in cases {
        let path = dir.path().join(name);
        std::fs::write(&path, bytes).unwrap();
        let error = host.load(&path, World::Parser).unwrap_err();
        assert!(expected(&error.kind), "{name}: {error}");
        assert!(
            error.to_string().contains(name),
            "the error names the file: {error}"
        );
    }
    assert_serves(&host);
}

#[test]
fn a_component_of_another_world_is_refused() {
    let host = host(Limits::default());
    let error = host
        .load(Path::new(artifacts::VALIDATOR_NOOP), World::Parser)
        .unwrap_err();
    let message = error.to_string();
    assert!(
        matches!(&error.kind, ComponentErrorKind::WrongWorld { found, .. } if found.iter().any(|f| f.contains("rye:plugin/validation@0.1.0"))),
        "{message}"
    );
    assert!(message.contains("is not a parser component"), "{message}");
    // The same bytes are a perfectly good validator.
    host.load(Path::new(artifacts::VALIDATOR_NOOP), World::Validator)
        .unwrap();
}

#[test]
fn a_component_of_another_contract_version_is_refused() {
    let host = host(Limits::default());
    let error = host
        .load(Path::new(artifacts::PARSER_FUTURE), World::Parser)
        .unwrap_err();
    assert_eq!(
        error.kind,
        ComponentErrorKind::ContractVersion {
            component: "0.2.0".into(),
            host: "0.1.0".into()
        }
    );
    let message = error.to_string();
    assert!(
        message.contains("rye:plugin@0.2.0") && message.contains("rye:plugin@0.1.0"),
        "{message}"
    );
}

#[test]
fn output_that_breaks_the_contract_is_refused() {
    let host = host(Limits::default());
    let kind = parse_error(&host, artifacts::PARSER_BAD_OUTPUT);
    assert!(
        matches!(&kind, ComponentErrorKind::BadOutput(m) if m.contains("an array")),
        "{kind:?}"
    );
}

#[test]
fn the_sandbox_grants_nothing() {
    let host = host(Limits::default());
    let dir = tempfile::tempdir().unwrap();
    let secret = dir.path().join("secret.txt");
    std::fs::write(&secret, "do not read").unwrap();
    let snoop = host
        .load(Path::new(artifacts::PARSER_SNOOP), World::Parser)
        .unwrap();
    let content = secret.display().to_string();
    let report = host
        .parse(&snoop, &request(&content))
        .unwrap()
        .unwrap()
        .document;
    for key in ["read", "read_root", "read_relative", "connect"] {
        let outcome = report[key].as_str().unwrap();
        assert!(outcome.starts_with("error:"), "{key}: {outcome}");
    }
    assert!(
        !report
            .values()
            .any(|v| v.as_str().is_some_and(|s| s.contains("do not read")))
    );
    assert_eq!(report["env_count"], 0);
    assert_eq!(report["args_count"], 0);
    assert_eq!(report["unix_time"], 0, "clocks stand still");
}

#[test]
fn compiled_once_then_deserialized_from_the_cache() {
    let cache = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let config = HostConfig {
        cache_dir: Some(cache.path().to_owned()),
        cache_key_file: Some(state.path().join("cache.key")),
        ..HostConfig::default()
    };
    let first = ComponentHost::new(config.clone()).unwrap();
    let loaded = first
        .load(Path::new(artifacts::PARSER_OVERRIDE), World::Parser)
        .unwrap();
    assert_eq!(loaded.origin, Origin::Compiled);
    let artifacts_on_disk = std::fs::read_dir(cache.path()).unwrap().filter(|e| {
        e.as_ref()
            .unwrap()
            .path()
            .extension()
            .is_some_and(|x| x == "cwasm")
    });
    assert_eq!(artifacts_on_disk.count(), 1);

    let second = ComponentHost::new(config).unwrap();
    let again = second
        .load(Path::new(artifacts::PARSER_OVERRIDE), World::Parser)
        .unwrap();
    assert_eq!(again.origin, Origin::Cache);
    assert_eq!(again.hash, loaded.hash);
    assert_serves(&second);
}

/// The artifact `precompiled` answers with in the tests below, made
/// once per process from the override parser.
fn override_artifact(make: fn(&[u8]) -> Vec<u8>) -> ([u8; 32], Vec<u8>) {
    use sha2::Digest;
    let wasm = std::fs::read(artifacts::PARSER_OVERRIDE).unwrap();
    (sha2::Sha256::digest(&wasm).into(), make(&wasm))
}

fn bundled_host(
    cache: &Path,
    state: &Path,
    precompiled: rye_components::Precompiled,
) -> ComponentHost {
    ComponentHost::new(HostConfig {
        cache_dir: Some(cache.to_owned()),
        cache_key_file: Some(state.join("cache.key")),
        precompiled: Some(precompiled),
        ..HostConfig::default()
    })
    .unwrap()
}

fn cached_artifacts(dir: &Path) -> usize {
    std::fs::read_dir(dir).map_or(0, |entries| {
        entries
            .filter(|e| {
                e.as_ref()
                    .unwrap()
                    .path()
                    .extension()
                    .is_some_and(|x| x == "cwasm")
            })
            .count()
    })
}

/// A component precompiled under the host's engine settings is used as
/// built: nothing compiled, nothing written to the cache.
#[test]
fn a_precompiled_component_is_used_without_compiling() {
    static ARTIFACT: std::sync::OnceLock<([u8; 32], Vec<u8>)> = std::sync::OnceLock::new();
    fn find(hash: &[u8; 32]) -> Option<&'static [u8]> {
        let (known, bytes) = ARTIFACT
            .get_or_init(|| override_artifact(|wasm| rye_engine::precompile(wasm).unwrap()));
        (known == hash).then_some(bytes.as_slice())
    }
    let (cache, state) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let host = bundled_host(cache.path(), state.path(), find);
    let loaded = host
        .load(Path::new(artifacts::PARSER_OVERRIDE), World::Parser)
        .unwrap();
    assert_eq!(loaded.origin, Origin::Bundled);
    assert_eq!(cached_artifacts(cache.path()), 0);
    assert_serves(&host);
    // Another component is not found there and is compiled.
    let other = host
        .load(Path::new(artifacts::PARSER_PANIC), World::Parser)
        .unwrap();
    assert_eq!(other.origin, Origin::Compiled);
}

/// An artifact the engine refuses (made under other settings, or not an
/// artifact at all) is never run: the component is compiled as usual.
#[test]
fn a_refused_precompiled_artifact_falls_back_to_compiling() {
    static FOREIGN: std::sync::OnceLock<([u8; 32], Vec<u8>)> = std::sync::OnceLock::new();
    fn foreign(hash: &[u8; 32]) -> Option<&'static [u8]> {
        let (known, bytes) = FOREIGN.get_or_init(|| {
            override_artifact(|wasm| {
                // No epoch interruption: code that could not be stopped.
                let mut config = wasmtime::Config::new();
                config.wasm_component_model(true);
                wasmtime::Engine::new(&config)
                    .unwrap()
                    .precompile_component(wasm)
                    .unwrap()
            })
        });
        (known == hash).then_some(bytes.as_slice())
    }
    static GARBAGE: std::sync::OnceLock<([u8; 32], Vec<u8>)> = std::sync::OnceLock::new();
    fn garbage(hash: &[u8; 32]) -> Option<&'static [u8]> {
        let (known, bytes) = GARBAGE.get_or_init(|| {
            override_artifact(|wasm| {
                let mut artifact = rye_engine::precompile(wasm).unwrap();
                let middle = artifact.len() / 2;
                artifact.truncate(middle);
                artifact
            })
        });
        (known == hash).then_some(bytes.as_slice())
    }
    for find in [foreign as rye_components::Precompiled, garbage] {
        let (cache, state) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let host = bundled_host(cache.path(), state.path(), find);
        let loaded = host
            .load(Path::new(artifacts::PARSER_OVERRIDE), World::Parser)
            .unwrap();
        assert_eq!(loaded.origin, Origin::Compiled);
        assert_serves(&host);
    }
}

/// The one artifact in `dir`.
fn artifact_in(dir: &Path) -> PathBuf {
    let mut found: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "cwasm"))
        .collect();
    assert_eq!(found.len(), 1, "{found:?}");
    found.pop().unwrap()
}

#[test]
fn a_damaged_swapped_or_foreign_artifact_is_recompiled_never_run() {
    let state = tempfile::tempdir().unwrap();
    let config = |cache: &Path, key: &str| HostConfig {
        cache_dir: Some(cache.to_owned()),
        cache_key_file: Some(state.path().join(key)),
        ..HostConfig::default()
    };
    let override_parser = Path::new(artifacts::PARSER_OVERRIDE);
    let panic_parser = Path::new(artifacts::PARSER_PANIC);
    let cache = tempfile::tempdir().unwrap();
    let other = tempfile::tempdir().unwrap();
    let compile = |dir: &Path, path: &Path, key: &str| {
        let host = ComponentHost::new(config(dir, key)).unwrap();
        assert_eq!(
            host.load(path, World::Parser).unwrap().origin,
            Origin::Compiled
        );
    };
    compile(cache.path(), override_parser, "cache.key");
    compile(other.path(), panic_parser, "cache.key");
    let artifact = artifact_in(cache.path());
    let pristine = std::fs::read(&artifact).unwrap();
    let loads_fresh = |key: &str| {
        let host = ComponentHost::new(config(cache.path(), key)).unwrap();
        let loaded = host.load(override_parser, World::Parser).unwrap();
        assert_eq!(loaded.origin, Origin::Compiled, "a bad artifact was used");
        let parsed = host.parse(&loaded, &request("x")).unwrap().unwrap();
        assert_eq!(
            parsed.document["__version__"], "9.9.9",
            "ran the wrong code"
        );
    };

    // Bytes flipped in the middle of the machine code, then at the end.
    for at in [pristine.len() / 2, pristine.len() - 1] {
        let mut damaged = pristine.clone();
        damaged[at] ^= 0xff;
        std::fs::write(&artifact, &damaged).unwrap();
        loads_fresh("cache.key");
    }
    // Truncated, empty, and a bare wasmtime artifact with no tag.
    for bytes in [&pristine[..100], &[][..], &pristine[40..]] {
        std::fs::write(&artifact, bytes).unwrap();
        loads_fresh("cache.key");
    }
    // Another component's valid artifact copied over this one's name.
    std::fs::copy(artifact_in(other.path()), &artifact).unwrap();
    loads_fresh("cache.key");
    // An artifact made under another key (a restored or shared cache).
    std::fs::write(&artifact, &pristine).unwrap();
    loads_fresh("another.key");
    // The recompiled artifact is stored again and used next time.
    let host = ComponentHost::new(config(cache.path(), "another.key")).unwrap();
    assert_eq!(
        host.load(override_parser, World::Parser).unwrap().origin,
        Origin::Cache
    );
}

#[test]
fn a_key_file_that_cannot_be_used_turns_the_disk_cache_off() {
    let cache = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let key = state.path().join("cache.key");
    std::fs::write(&key, b"too short").unwrap();
    let config = HostConfig {
        cache_dir: Some(cache.path().to_owned()),
        cache_key_file: Some(key),
        ..HostConfig::default()
    };
    for _ in 0..2 {
        let host = ComponentHost::new(config.clone()).unwrap();
        let loaded = host
            .load(Path::new(artifacts::PARSER_OVERRIDE), World::Parser)
            .unwrap();
        assert_eq!(loaded.origin, Origin::Compiled);
    }
    assert_eq!(std::fs::read_dir(cache.path()).unwrap().count(), 0);
}

#[test]
fn a_changed_file_is_loaded_anew() {
    let host = host(Limits::default());
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("parser.wasm");
    std::fs::copy(artifacts::PARSER_OVERRIDE, &path).unwrap();
    let before = host.load(&path, World::Parser).unwrap();
    std::fs::copy(artifacts::PARSER_PANIC, &path).unwrap();
    let after = host.load(&path, World::Parser).unwrap();
    assert_ne!(before.hash, after.hash);
    assert!(host.parse(&after, &request("x")).is_err());
}

#[test]
fn calls_run_in_parallel() {
    let host = host(Limits::default());
    let parser = host
        .load(Path::new(artifacts::PARSER_OVERRIDE), World::Parser)
        .unwrap();
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..8)
            .map(|_| {
                s.spawn(|| {
                    for _ in 0..50 {
                        let parsed = host.parse(&parser, &request("x")).unwrap().unwrap();
                        assert_eq!(parsed.document["__version__"], "9.9.9");
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
    });
}

struct NoServices;

impl rye_components::AdapterServices for NoServices {
    fn get_env(&mut self, _: &str) -> Option<String> {
        None
    }
    fn environment(&mut self) -> Vec<(String, String)> {
        Vec::new()
    }
    fn which(&mut self, _: &str) -> Option<String> {
        None
    }
    fn run_declared_command(&mut self, _: &str) -> Result<String, String> {
        Err("none".into())
    }
    fn read_config(
        &mut self,
        _: rye_components::PluginSpace,
        _: &str,
    ) -> Result<Option<String>, String> {
        Ok(None)
    }
}

/// An adapter's word that a tool call is reusable is taken while it asked
/// the host nothing: a later plan of the same input with other parameters
/// is the kept call, those parameters its arguments, and the adapter does
/// not run (the name it would have taken from them stays the first one).
/// An adapter that asked the host's services anything is asked again
/// every time, whatever it says; so is one shown another input.
#[test]
fn a_reusable_call_is_reused_only_when_the_adapter_asked_the_host_nothing() {
    let host = ComponentHost::new(HostConfig {
        spares: true,
        ..HostConfig::default()
    })
    .unwrap();
    let adapter = host
        .load(Path::new(artifacts::ADAPTER_REUSES), World::RuntimeAdapter)
        .unwrap();
    let views = tempfile::tempdir().unwrap();
    let grants = [views.path().to_owned()];
    let plan = |request: &rye_components::PlanRequest| {
        let planned = host
            .plan(&adapter, request, &grants, Box::new(NoServices))
            .unwrap()
            .unwrap();
        let rye_components::PlannedAction::Mcp(call) = planned.action else {
            panic!("not a tool call");
        };
        (planned.reused, call.tool_name, call.arguments)
    };

    let first = plan_request(serde_json::json!({"name": "a"}));
    assert_eq!(
        plan(&first),
        (false, "a".into(), serde_json::json!({"name": "a"}))
    );
    let second = plan_request(serde_json::json!({"name": "b", "n": 2}));
    assert_eq!(
        plan(&second),
        (true, "a".into(), serde_json::json!({"name": "b", "n": 2})),
        "the kept call, with these parameters as its arguments"
    );
    // Another input: the adapter is asked, and its call kept in place of
    // the first.
    let elsewhere = rye_components::PlanRequest {
        project_path: PathBuf::from("/elsewhere"),
        ..plan_request(serde_json::json!({"name": "c"}))
    };
    let (reused, tool_name, _) = plan(&elsewhere);
    assert!(!reused);
    assert_eq!(tool_name, "c");
    assert_eq!(
        plan(&elsewhere),
        (true, "c".into(), serde_json::json!({"name": "c"}))
    );

    // Asking the host anything makes every plan the adapter's.
    for name in ["d", "e", "f"] {
        let asks = plan_request(serde_json::json!({"name": name, "ask": true}));
        let (reused, tool_name, _) = plan(&asks);
        assert!(!reused, "{name}");
        assert_eq!(tool_name, name);
    }
}

/// A host that makes spares, and the adapter that remembers its calls.
fn remembering_host() -> (
    ComponentHost,
    std::sync::Arc<rye_components::LoadedComponent>,
) {
    let host = ComponentHost::new(HostConfig {
        spares: true,
        ..HostConfig::default()
    })
    .unwrap();
    let adapter = host
        .load(
            Path::new(artifacts::ADAPTER_REMEMBERS),
            World::RuntimeAdapter,
        )
        .unwrap();
    (host, adapter)
}

/// A request with an empty chain and `parameters`.
fn plan_request(parameters: serde_json::Value) -> rye_components::PlanRequest {
    rye_components::PlanRequest {
        chain: Vec::new(),
        parameters,
        project_path: PathBuf::from("/p"),
        user_space: PathBuf::from("/u"),
        system_space: PathBuf::from("/s"),
    }
}

/// One plan of the remembering adapter, asserting its instance is new:
/// it counts one call, saw no parameters before this plan's, and found
/// the memory it grew zeroed although every plan before marked its own.
fn plan_on_a_new_instance(
    host: &ComponentHost,
    adapter: &rye_components::LoadedComponent,
    grants: &[PathBuf],
    round: usize,
) {
    let request = plan_request(serde_json::json!({"secret": round}));
    let planned = host
        .plan(adapter, &request, grants, Box::new(NoServices))
        .unwrap()
        .unwrap();
    let rye_components::PlannedAction::Process(process) = planned.action else {
        panic!("not a process plan");
    };
    assert_eq!(process.args, ["1", "", "0"], "round {round}");
}

/// Plans are served by instances made ahead of them, yet each instance
/// serves one plan: an adapter that counts its calls and keeps the last
/// parameters it saw always finds itself new.
#[test]
fn every_plan_has_an_instance_no_other_plan_touched() {
    let (host, adapter) = remembering_host();
    let views = tempfile::tempdir().unwrap();
    let grants = [views.path().to_owned()];
    for round in 0..20 {
        plan_on_a_new_instance(&host, &adapter, &grants, round);
        // Spares are made on a thread of the host's: give it the time a
        // client's next request would, or none at all.
        if round % 2 == 0 {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// A granted path that is missing, a file, a link to nowhere or a loop of
/// links is left out of an adapter's views, on a fresh instance and on a
/// spare alike; the plan goes on with the folders there are.
#[test]
fn grants_that_are_not_folders_are_left_out_of_the_views() {
    let (host, adapter) = remembering_host();
    let views = tempfile::tempdir().unwrap();
    let file = views.path().join("a-file");
    std::fs::write(&file, "not a folder").unwrap();
    let dangling = views.path().join("dangling");
    std::os::unix::fs::symlink(views.path().join("gone"), &dangling).unwrap();
    let (ping, pong) = (views.path().join("ping"), views.path().join("pong"));
    std::os::unix::fs::symlink(&pong, &ping).unwrap();
    std::os::unix::fs::symlink(&ping, &pong).unwrap();
    let grants = [
        views.path().join("missing"),
        views.path().to_owned(),
        file,
        dangling,
        ping,
    ];
    for round in 0..4 {
        plan_on_a_new_instance(&host, &adapter, &grants, round);
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A granted path that cannot be opened for a reason other than naming
/// no folder (here a NUL inside it, which no system call takes) fails
/// the plan, naming the path, rather than leaving the adapter a view
/// short without a word; the host plans on after it.
#[test]
fn a_grant_that_cannot_be_opened_fails_the_plan_naming_it() {
    let (host, adapter) = remembering_host();
    let views = tempfile::tempdir().unwrap();
    let bad = views.path().join("a\0b");
    let request = plan_request(serde_json::json!({}));
    for _ in 0..2 {
        let error = host
            .plan(
                &adapter,
                &request,
                &[views.path().to_owned(), bad.clone()],
                Box::new(NoServices),
            )
            .unwrap_err();
        let message = error.to_string();
        assert!(
            message.contains("cannot grant") && message.contains(&*bad.to_string_lossy()),
            "{message}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    plan_on_a_new_instance(&host, &adapter, &[views.path().to_owned()], 0);
}

/// The nice value of this process's thread named `name`, if one runs.
fn nice_of_thread(name: &str) -> Option<i64> {
    std::fs::read_dir("/proc/self/task").ok()?.find_map(|task| {
        let task = task.ok()?.path();
        let comm = std::fs::read_to_string(task.join("comm")).ok()?;
        if comm.trim() != name {
            return None;
        }
        let stat = std::fs::read_to_string(task.join("stat")).ok()?;
        // After the command's closing parenthesis: state is field 3, nice 19.
        let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
        fields.get(16)?.parse().ok()
    })
}

/// Plans back to back from four threads, with no time between them for
/// the spares' thread (its queue fills, and plans then drop their spent
/// stores themselves): every plan is answered by an instance of its own.
/// The spares' thread runs below the calls, so waking it does not take
/// their core.
#[test]
fn plans_faster_than_spares_are_made_are_all_answered() {
    let (host, adapter) = remembering_host();
    let host = std::sync::Arc::new(host);
    let views = tempfile::tempdir().unwrap();
    let grants = [views.path().to_owned()];
    let workers: Vec<_> = (0..4)
        .map(|_| {
            let (host, adapter, grants) = (host.clone(), adapter.clone(), grants.clone());
            std::thread::spawn(move || {
                for round in 0..200 {
                    plan_on_a_new_instance(&host, &adapter, &grants, round);
                }
            })
        })
        .collect();
    for worker in workers {
        worker.join().unwrap();
    }
    assert_eq!(nice_of_thread("rye-spares"), Some(10));
}

/// A request to the spinning adapter: to spin, or to plan at once.
fn spin_request(spin: bool) -> rye_components::PlanRequest {
    plan_request(serde_json::json!({"spin": spin}))
}

/// A plan of the spinning adapter on the awaiting task; it never returns
/// when `spin`.
async fn spin_plan(
    host: &std::sync::Arc<ComponentHost>,
    adapter: &std::sync::Arc<rye_components::LoadedComponent>,
    spin: bool,
) -> Result<
    Result<rye_components::Planned, rye_components::PlanFailure>,
    rye_components::ComponentError,
> {
    host.plan_on_task(
        adapter,
        spin_request(spin),
        Vec::new(),
        Box::new(NoServices),
    )
    .await
}

/// Asks the spinning adapter for a plan it makes at once, and checks it.
async fn answered(
    host: &std::sync::Arc<ComponentHost>,
    adapter: &std::sync::Arc<rye_components::LoadedComponent>,
) {
    let planned = spin_plan(host, adapter, false).await.unwrap().unwrap();
    assert!(matches!(
        planned.action,
        rye_components::PlannedAction::Process(ref p) if p.args == ["planned"]
    ));
}

/// A multi-threaded runtime of `count` workers: two as on a two-core
/// machine, one as `rye serve` runs over stdio.
fn workers(count: usize) -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(count)
        .enable_all()
        .build()
        .unwrap()
}

/// Plans that never return, awaited on a runtime's tasks, are stopped at
/// their deadline, and meanwhile the runtime goes on serving: each plan
/// leaves the worker it began on at its first tick. Then a plan of the
/// same adapter is answered. On one worker as on two.
#[test]
fn spinning_plans_leave_the_runtime_serving() {
    spinning_plans_leave_serving(1);
    spinning_plans_leave_serving(2);
}

fn spinning_plans_leave_serving(worker_count: usize) {
    let deadline = Duration::from_millis(800);
    let host = std::sync::Arc::new(
        ComponentHost::new(HostConfig {
            adapter_limits: Limits {
                deadline,
                ..Limits::default()
            },
            spares: true,
            ..HostConfig::default()
        })
        .unwrap(),
    );
    let adapter = host
        .load(Path::new(artifacts::ADAPTER_SPIN), World::RuntimeAdapter)
        .unwrap();
    workers(worker_count).block_on(async {
        let ticks = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let ticker = tokio::spawn({
            let ticks = ticks.clone();
            async move {
                let mut every = tokio::time::interval(Duration::from_millis(10));
                loop {
                    every.tick().await;
                    ticks.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
            }
        });
        let started = Instant::now();
        let plans: Vec<_> = (0..3)
            .map(|_| {
                let (host, adapter) = (host.clone(), adapter.clone());
                tokio::spawn(async move { spin_plan(&host, &adapter, true).await })
            })
            .collect();
        // Measured from the ticker's side: what it counted in the half of
        // the deadline after the plans began, 40 ticks if nothing held it.
        let before = ticks.load(std::sync::atomic::Ordering::Relaxed);
        std::thread::sleep(deadline / 2);
        let during = ticks.load(std::sync::atomic::Ordering::Relaxed) - before;
        for plan in plans {
            let error = plan.await.unwrap().unwrap_err();
            assert_eq!(error.kind, ComponentErrorKind::Timeout(deadline));
        }
        let took = started.elapsed();
        assert!(took >= deadline, "stopped after {took:?}");
        assert!(took < deadline + Duration::from_secs(2), "took {took:?}");
        assert!(
            during >= 10,
            "{worker_count}-worker runtime: it ticked {during} times in {:?}",
            deadline / 2
        );
        ticker.abort();

        answered(&host, &adapter).await;

        // A plan given up while it spins (its future dropped at one of its
        // ticks, as when a client cancels the request) ends there, and the
        // next plan is answered.
        let given_up =
            tokio::time::timeout(Duration::from_millis(250), spin_plan(&host, &adapter, true))
                .await;
        assert!(given_up.is_err(), "a spinning plan answered: {given_up:?}");
        for _ in 0..3 {
            answered(&host, &adapter).await;
        }
    });
}

/// A plan given up while it spins on a blocking thread, where its first
/// tick sent it, stops at its next tick instead of its deadline: with one
/// instance of the adapter allowed, the next plan, which needs that
/// instance, is answered long before the given-up plan's deadline.
#[test]
fn a_plan_given_up_stops_at_its_next_tick() {
    let deadline = Duration::from_secs(20);
    let host = std::sync::Arc::new(
        ComponentHost::new(HostConfig {
            adapter_limits: Limits {
                deadline,
                ..Limits::default()
            },
            instances_per_world: 1,
            ..HostConfig::default()
        })
        .unwrap(),
    );
    let adapter = host
        .load(Path::new(artifacts::ADAPTER_SPIN), World::RuntimeAdapter)
        .unwrap();
    for worker_count in [1, 2] {
        workers(worker_count).block_on(async {
            let given_up =
                tokio::time::timeout(Duration::from_millis(300), spin_plan(&host, &adapter, true))
                    .await;
            assert!(given_up.is_err(), "a spinning plan answered: {given_up:?}");
            let started = Instant::now();
            answered(&host, &adapter).await;
            let waited = started.elapsed();
            assert!(
                waited < Duration::from_secs(5),
                "{worker_count}-worker runtime: the next plan waited {waited:?}"
            );
        });
    }
}

/// Plans awaited on a runtime's tasks, many at once and back to back,
/// are each answered by an instance no other plan touched.
#[test]
fn plans_on_async_tasks_each_have_an_instance_of_their_own() {
    let (host, adapter) = remembering_host();
    let host = std::sync::Arc::new(host);
    workers(2).block_on(async {
        let tasks: Vec<_> = (0..12)
            .map(|task| {
                let (host, adapter) = (host.clone(), adapter.clone());
                tokio::spawn(async move {
                    for round in 0..40 {
                        let request =
                            plan_request(serde_json::json!({"task": task, "round": round}));
                        let planned = host
                            .plan_on_task(&adapter, request, Vec::new(), Box::new(NoServices))
                            .await
                            .unwrap()
                            .unwrap();
                        let rye_components::PlannedAction::Process(process) = planned.action else {
                            panic!("not a process plan");
                        };
                        assert_eq!(process.args, ["1", "", "0"], "task {task} round {round}");
                    }
                })
            })
            .collect();
        for task in tasks {
            task.await.unwrap();
        }
    });
}
