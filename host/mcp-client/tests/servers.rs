//! The MCP client against real servers: a FastMCP server (the Python SDK)
//! over stdio and streamable HTTP, and hostile processes that never answer,
//! hang, flood or die.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rye_mcp_client::{Connection, McpError, Pool, Transport, definition_hash};
use rye_process::Plan;
use serde_json::{Map, Value, json};

/// Python with the `mcp` package: `RYE_TEST_MCP_PYTHON` (`.ci/run` sets
/// it), else the virtual environment the CLI tests make.
fn python() -> Option<PathBuf> {
    if let Some(python) = std::env::var_os("RYE_TEST_MCP_PYTHON") {
        return Some(PathBuf::from(python));
    }
    let venv = Path::new(env!("CARGO_TARGET_TMPDIR")).join("mcp-venv/bin/python");
    if venv.exists() {
        return Some(venv);
    }
    rye_test_artifacts::skip(
        "the MCP client against FastMCP",
        "no Python with the mcp package (set RYE_TEST_MCP_PYTHON)",
    );
    None
}

fn script() -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/mcp-servers/notes_server.py")
        .display()
        .to_string()
}

fn notes(python: &Path) -> Transport {
    Transport::Stdio(
        Plan::new(python.display().to_string())
            .arg(script())
            .env("NOTES_GREETING", "hello"),
    )
}

fn args(value: Value) -> Map<String, Value> {
    value.as_object().cloned().unwrap()
}

const SECOND: Duration = Duration::from_secs(1);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fastmcp_server_over_stdio() {
    let Some(python) = python() else { return };
    let connection = Connection::open("notes", &notes(&python), 20 * SECOND)
        .await
        .unwrap();
    let pid = connection.pid().unwrap();
    let tools = connection.tools(10 * SECOND).await.unwrap();
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_str()).collect();
    for name in ["add", "echo", "fail", "sleep", "crash", "shout"] {
        assert!(names.contains(&name), "{names:?}");
    }
    let add = tools.iter().find(|t| t.name == "add").unwrap();
    assert_eq!(add.description.as_deref(), Some("Add two whole numbers."));
    assert_eq!(add.input_schema["required"], json!(["a", "b"]));
    // The hash is over name, description and input schema, canonically.
    assert_eq!(add.hash(), definition_hash(&add.pinned()));
    let again = connection.tools(10 * SECOND).await.unwrap();
    assert_eq!(
        again.iter().find(|t| t.name == "add").unwrap().hash(),
        add.hash()
    );

    let sum = connection
        .call("add", args(json!({"a": 2, "b": 3})), 10 * SECOND)
        .await
        .unwrap();
    assert!(!sum.is_error);
    assert_eq!(sum.data(), json!({"sum": 5}));
    let echoed = connection
        .call("echo", args(json!({"text": "hi there"})), 10 * SECOND)
        .await
        .unwrap();
    assert_eq!(echoed.text, "hi there");
    let failed = connection
        .call("fail", args(json!({"reason": "no such note"})), 10 * SECOND)
        .await
        .unwrap();
    assert!(failed.is_error);
    assert!(failed.text.contains("no such note"), "{}", failed.text);
    // Nothing of the host's environment reaches the server unasked.
    let home = connection
        .call("environment", args(json!({"name": "HOME"})), 10 * SECOND)
        .await
        .unwrap();
    assert_eq!(home.text, "(unset)");
    let greeting = connection
        .call(
            "environment",
            args(json!({"name": "NOTES_GREETING"})),
            10 * SECOND,
        )
        .await
        .unwrap();
    assert_eq!(greeting.text, "hello");

    drop(connection);
    assert!(rye_test_artifacts::process_dies_soon(pid));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fastmcp_server_over_streamable_http() {
    let Some(python) = python() else { return };
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let mut server = std::process::Command::new(&python)
        .arg(script())
        .arg("http")
        .env("NOTES_PORT", port.to_string())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + 20 * SECOND;
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "the HTTP server did not start");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let transport = Transport::Http {
        url: format!("http://127.0.0.1:{port}/mcp"),
        headers: vec![("X-Notes".into(), "1".into())],
    };
    let connection = Connection::open("notes-http", &transport, 20 * SECOND)
        .await
        .unwrap();
    let sum = connection
        .call("add", args(json!({"a": 40, "b": 2})), 10 * SECOND)
        .await
        .unwrap();
    assert_eq!(sum.data(), json!({"sum": 42}));
    let tools = connection.tools(10 * SECOND).await.unwrap();
    assert!(tools.iter().any(|t| t.name == "shout"));
    drop(connection);
    server.kill().unwrap();
    server.wait().unwrap();

    let gone = Connection::open("notes-http", &transport, 5 * SECOND)
        .await
        .err()
        .unwrap();
    assert!(
        matches!(
            gone,
            McpError::Initialize { .. } | McpError::StartupTimeout { .. }
        ),
        "{gone:?}"
    );
}

/// A server that is a shell script: never answers, floods, and the like.
fn shell(script: &str) -> Transport {
    Transport::Stdio(Plan::new("/bin/sh").arg("-c").arg(script))
}

/// Starts `transport` expecting a failure within `startup` + 100 ms (plus
/// the time to start a process on a loaded machine).
async fn fails_to_start(transport: &Transport, startup: Duration) -> McpError {
    let started = Instant::now();
    let error = Connection::open("hostile", transport, startup)
        .await
        .err()
        .expect("a hostile server must not start");
    assert!(
        started.elapsed() < startup + Duration::from_millis(500),
        "{:?}: {error}",
        started.elapsed()
    );
    error
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_servers_end_in_errors_and_take_nothing_with_them() {
    let Some(python) = python() else { return };
    let pidfile = tempfile::NamedTempFile::new().unwrap();
    let pidpath = pidfile.path().display().to_string();

    // Never answers initialize; the process is gone with its session.
    let silent = shell(&format!(
        "echo $$ > {pidpath}; echo listening >&2; sleep 300"
    ));
    let error = fails_to_start(&silent, Duration::from_millis(700)).await;
    assert!(
        matches!(&error, McpError::StartupTimeout { stderr, .. } if stderr.contains("listening")),
        "{error:?}"
    );
    let pid: u32 = std::fs::read_to_string(&pidpath)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(rye_test_artifacts::process_dies_soon(pid));

    // 200 MB of junk on stdout, never a line end: no line past 16 MiB is
    // kept, and the wait ends at the deadline.
    let flood = shell("head -c 200000000 /dev/zero | tr '\\0' 'x'; sleep 300");
    let error = fails_to_start(&flood, 3 * SECOND).await;
    assert!(
        matches!(
            error,
            McpError::Initialize { .. } | McpError::StartupTimeout { .. }
        ),
        "{error:?}"
    );

    // 1 GB on stderr: read and dropped, only the tail kept.
    let loud = shell("head -c 1000000000 /dev/zero | tr '\\0' 'e' >&2; sleep 300");
    let error = fails_to_start(&loud, 3 * SECOND).await;
    match &error {
        McpError::StartupTimeout { stderr, .. } => assert!(stderr.len() <= 64 * 1024),
        other => panic!("{other:?}"),
    }

    // Exits before answering.
    let gone = shell("echo bad config >&2; exit 7");
    let error = fails_to_start(&gone, 5 * SECOND).await;
    let text = error.to_string();
    assert!(
        text.contains("bad config") && text.contains("code 7"),
        "{text}"
    );

    // Hangs in a call: an error at the call's timeout; the session is not
    // trusted again and its process dies with it.
    let connection = Connection::open("notes", &notes(&python), 20 * SECOND)
        .await
        .unwrap();
    let pid = connection.pid().unwrap();
    let started = Instant::now();
    let error = connection
        .call(
            "sleep",
            args(json!({"seconds": 30})),
            Duration::from_millis(500),
        )
        .await
        .unwrap_err();
    assert!(started.elapsed() < Duration::from_millis(900));
    assert!(matches!(error, McpError::Timeout { .. }), "{error:?}");
    assert!(error.ends_session());
    drop(connection);
    assert!(rye_test_artifacts::process_dies_soon(pid));

    // Exits mid-call: the error says how, with its last words.
    let connection = Connection::open("notes", &notes(&python), 20 * SECOND)
        .await
        .unwrap();
    let error = connection
        .call("crash", Map::new(), 10 * SECOND)
        .await
        .unwrap_err();
    let text = error.to_string();
    assert!(text.contains("crashing now"), "{text}");
    assert!(!connection.is_open());

    // And a healthy server still answers.
    let healthy = Connection::open("notes", &notes(&python), 20 * SECOND)
        .await
        .unwrap();
    let sum = healthy
        .call("add", args(json!({"a": 1, "b": 1})), 10 * SECOND)
        .await
        .unwrap();
    assert_eq!(sum.data(), json!({"sum": 2}));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pool_keeps_one_warm_session_per_key() {
    let Some(python) = python() else { return };
    let pool = Arc::new(Pool::new(Duration::from_secs(60)));
    let transport = notes(&python);
    let (first, fresh) = pool
        .session("notes@1", "notes", &transport, 20 * SECOND)
        .await
        .unwrap();
    assert!(fresh);
    // Concurrent calls share the one session.
    let calls = (0..8).map(|i| {
        let pool = pool.clone();
        let transport = transport.clone();
        tokio::spawn(async move {
            let (session, fresh) = pool
                .session("notes@1", "notes", &transport, 20 * SECOND)
                .await
                .unwrap();
            let sum = session
                .call("add", args(json!({"a": i, "b": 1})), 10 * SECOND)
                .await
                .unwrap();
            (fresh, session.pid(), sum.data())
        })
    });
    for (i, call) in calls.enumerate() {
        let (fresh, pid, data) = call.await.unwrap();
        assert!(!fresh);
        assert_eq!(pid, first.pid());
        assert_eq!(data, json!({"sum": i + 1}));
    }
    // Another key, another session.
    let (other, fresh) = pool
        .session("notes@2", "notes", &transport, 20 * SECOND)
        .await
        .unwrap();
    assert!(fresh);
    assert_ne!(other.pid(), first.pid());
    assert_eq!(pool.open_sessions(), 2);

    // A discarded session is replaced on the next request.
    let old = first.pid().unwrap();
    pool.discard("notes@1", &first);
    drop(first);
    assert!(rye_test_artifacts::process_dies_soon(old));
    let (replaced, fresh) = pool
        .session("notes@1", "notes", &transport, 20 * SECOND)
        .await
        .unwrap();
    assert!(fresh);
    assert_ne!(replaced.pid(), Some(old));

    // A dead one too.
    let crashed = replaced.pid().unwrap();
    let _ = replaced.call("crash", Map::new(), 10 * SECOND).await;
    drop(replaced);
    assert!(rye_test_artifacts::process_dies_soon(crashed));
    let (revived, fresh) = pool
        .session("notes@1", "notes", &transport, 20 * SECOND)
        .await
        .unwrap();
    assert!(fresh);
    assert!(revived.is_open());

    // Idle sessions close.
    let idle = Pool::new(Duration::from_millis(100));
    let (session, _) = idle
        .session("k", "notes", &transport, 20 * SECOND)
        .await
        .unwrap();
    let pid = session.pid().unwrap();
    drop(session);
    tokio::time::sleep(Duration::from_millis(200)).await;
    idle.close_idle();
    assert_eq!(idle.open_sessions(), 0);
    assert!(rye_test_artifacts::process_dies_soon(pid));
}
