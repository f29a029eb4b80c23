//! The real `rye` binary and server against hostile input: queries nested
//! to break the stack, damaged and swapped compiled components, links out
//! of the spaces, protocol abuse over stdio and HTTP, clients that trickle
//! or vanish, too many sessions, and tools that try to outlive their run
//! or their host. After each, the same process (or the next one) still
//! answers a normal call.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use rye_test_artifacts::process_dies_soon;

mod common;
use serde_json::{Value, json};

struct Env {
    project: tempfile::TempDir,
    home: tempfile::TempDir,
    cache: PathBuf,
    /// Run rye with cgroup containment turned off.
    no_cgroup: bool,
}

impl Env {
    fn new() -> Self {
        Self::with_cache(common::shared_cache())
    }

    fn with_cache(cache: PathBuf) -> Self {
        Self {
            project: tempfile::tempdir().unwrap(),
            home: tempfile::tempdir().unwrap(),
            cache,
            no_cgroup: false,
        }
    }

    fn command(&self) -> Command {
        let mut command = Command::new(env!("CARGO_BIN_EXE_rye"));
        self.configure(&mut command);
        command
    }

    /// A clean environment, the project as working folder.
    fn configure(&self, command: &mut Command) {
        common::clean_env(command, self.project.path(), self.home.path(), &self.cache)
            .env("RYE_ALLOW_UNSIGNED_PROJECT", "1")
            .env("RYE_LOG", "warn");
        if self.no_cgroup {
            command.env("RYE_NO_CGROUP", "1");
        }
    }

    fn rye(&self, args: &[&str]) -> Output {
        self.command().args(args).output().unwrap()
    }

    fn write(&self, relative: &str, content: &str) -> PathBuf {
        let path = self.project.path().join(relative);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, content).unwrap();
        path
    }

    fn project(&self) -> String {
        self.project.path().display().to_string()
    }

    /// A project runtime that runs `{command}` with bash, with a timeout.
    fn slow_runtime(&self, timeout_s: u32) {
        self.write(
            ".ai/tools/slow/runtime.yaml",
            &format!(
                "executor_id: rye/core/primitives/execute\nconfig:\n  command: /bin/bash\n  args: ['-c', '{{command}}']\n  timeout: {timeout_s}\n"
            ),
        );
        self.write(".ai/tools/slow/tool.yaml", "executor_id: slow/runtime\n");
    }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Waits up to `limit` for `path` to hold a pid.
fn wait_for_pid(path: &Path, limit: Duration) -> u32 {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(pid) = std::fs::read_to_string(path)
            .ok()
            .and_then(|t| t.trim().parse().ok())
        {
            return pid;
        }
        assert!(
            Instant::now() < deadline,
            "{} never appeared",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `rye serve` over stdio, spoken to line by line.
struct Stdio_ {
    child: Child,
    stdin: ChildStdin,
    lines: mpsc::Receiver<String>,
}

impl Stdio_ {
    fn start(env: &Env) -> Self {
        let mut child = env
            .command()
            .arg("serve")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let stdout = child.stdout.take().unwrap();
        let (send, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { return };
                if send.send(line).is_err() {
                    return;
                }
            }
        });
        let mut server = Self {
            child,
            stdin,
            lines,
        };
        let init = server.call(json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "hostile", "version": "1"}}}));
        assert!(init["result"]["serverInfo"].is_object(), "{init}");
        server.send_raw(br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
        server
    }

    fn send_raw(&mut self, line: &[u8]) {
        self.stdin.write_all(line).unwrap();
        self.stdin.write_all(b"\n").unwrap();
        self.stdin.flush().unwrap();
    }

    /// The next message from the server that is not a notification.
    fn next(&mut self) -> Value {
        loop {
            let line = self
                .lines
                .recv_timeout(Duration::from_secs(60))
                .expect("the server answers");
            let value: Value = serde_json::from_str(&line).unwrap();
            if value.get("id").is_some() {
                return value;
            }
        }
    }

    fn call(&mut self, message: Value) -> Value {
        self.send_raw(message.to_string().as_bytes());
        self.next()
    }

    fn tool(&mut self, id: u64, name: &str, arguments: Value) -> Value {
        let answer = self.call(json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": name, "arguments": arguments}}));
        assert_eq!(answer["id"], id, "{answer}");
        answer
    }

    /// A search that must succeed: the server still serves.
    fn serves(&mut self, env: &Env) {
        let answer = self.tool(
            4242,
            "search",
            json!({"scope": "tool", "query": "bash", "project_path": env.project()}),
        );
        assert_eq!(answer["result"]["isError"], false, "{answer}");
    }
}

impl Drop for Stdio_ {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn queries_nested_past_the_bound_are_refused_not_a_crash() {
    let env = Env::new();
    // One argument may hold at most 128 KiB.
    for query in ["(".repeat(20_000), "NOT ".repeat(30_000)] {
        let out = env.rye(&["search", "all", &query]);
        assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
        assert!(
            text(&out.stderr).contains("nest more than 64 deep"),
            "{}",
            text(&out.stderr)
        );
    }
    let mut server = Stdio_::start(&env);
    for (n, query) in ["(".repeat(4_000), "NOT ".repeat(50_000)]
        .iter()
        .enumerate()
    {
        let answer = server.tool(
            n as u64 + 1,
            "search",
            json!({"scope": "all", "query": query, "project_path": env.project()}),
        );
        assert_eq!(answer["result"]["isError"], true, "{answer}");
        assert!(
            answer.to_string().contains("nest more than 64 deep"),
            "{answer}"
        );
    }
    server.serves(&env);
}

#[test]
fn stdio_answers_what_it_cannot_read_and_keeps_serving() {
    let env = Env::new();
    let mut server = Stdio_::start(&env);
    server.send_raw(b"{garbage");
    let garbage = server.next();
    assert_eq!(garbage["error"]["code"], -32700, "{garbage}");
    assert_eq!(garbage["id"], Value::Null);

    let deep = format!(
        r#"{{"jsonrpc":"2.0","id":77,"method":"ping","params":{}"#,
        "[".repeat(100_000)
    );
    server.send_raw(deep.as_bytes());
    let deep = server.next();
    assert_eq!(deep["error"]["code"], -32700, "{deep}");
    assert_eq!(deep["id"], 77, "the id is recovered");

    server.send_raw(br#"{"jsonrpc":"2.0","id":78}"#);
    let shapeless = server.next();
    assert_eq!(shapeless["error"]["code"], -32600, "{shapeless}");
    assert_eq!(shapeless["id"], 78);

    // An unknown notification is ignored, as JSON-RPC asks.
    server.send_raw(br#"{"jsonrpc":"2.0","method":"lsp/didOpen"}"#);
    server.serves(&env);
}

#[test]
fn a_damaged_or_swapped_compiled_component_costs_a_recompile() {
    let cache = tempfile::tempdir().unwrap();
    let env = Env::with_cache(cache.path().join("rye"));
    // The components the binary holds compiled would never reach the
    // cache: this run compiles them as one whose build embedded none.
    let rye = |args: &[&str]| {
        env.command()
            .args(args)
            .env("RYE_PRECOMPILED", "0")
            .output()
            .unwrap()
    };
    let first = rye(&["--json", "search", "all", "rye", "--limit", "100"]);
    assert!(first.status.success(), "{}", text(&first.stderr));
    let artifacts: Vec<PathBuf> = std::fs::read_dir(cache.path().join("rye/components"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "cwasm"))
        .collect();
    assert!(!artifacts.is_empty());
    // Flipped bytes in every artifact: once this made every command die
    // with SIGILL until the cache was deleted.
    for path in &artifacts {
        let mut bytes = std::fs::read(path).unwrap();
        let middle = bytes.len() / 2;
        for b in &mut bytes[middle..middle + 64] {
            *b ^= 0xa5;
        }
        std::fs::write(path, bytes).unwrap();
    }
    let damaged = rye(&["--json", "search", "all", "rye", "--limit", "100"]);
    assert!(damaged.status.success(), "{}", text(&damaged.stderr));
    assert_eq!(damaged.stdout, first.stdout);
    // One component's (valid, tagged) artifact copied over all the others:
    // once this ran that code in place of the YAML parser.
    let donor = std::fs::read(&artifacts[0]).unwrap();
    let mut recompiled = 0;
    for path in &artifacts[1..] {
        std::fs::write(path, &donor).unwrap();
        recompiled += 1;
    }
    let swapped = rye(&["--json", "search", "all", "rye", "--limit", "100"]);
    assert!(swapped.status.success(), "{}", text(&swapped.stderr));
    assert_eq!(swapped.stdout, first.stdout, "{recompiled} swapped");
}

#[cfg(unix)]
#[test]
fn links_out_of_a_space_are_refused_by_every_command() {
    use std::os::unix::fs::symlink;
    let env = Env::new();
    let ai = env.project.path().join(".ai");
    std::fs::create_dir_all(ai.join("knowledge/demo")).unwrap();
    let secret = env.home.path().join("secret.md");
    std::fs::write(&secret, "root:x:0:0:SECRET\n").unwrap();
    symlink(&secret, ai.join("knowledge/demo/passwd.md")).unwrap();

    let loaded = env.rye(&["load", "knowledge", "demo/passwd"]);
    assert_eq!(loaded.status.code(), Some(1));
    let stderr = text(&loaded.stderr);
    assert!(
        stderr.contains("passwd.md") && stderr.contains("out of its space"),
        "{stderr}"
    );
    assert!(!text(&loaded.stdout).contains("SECRET"));

    let found = env.rye(&["--json", "search", "knowledge", "root OR passwd"]);
    assert!(found.status.success(), "{}", text(&found.stderr));
    assert!(
        !text(&found.stdout).contains("SECRET"),
        "{}",
        text(&found.stdout)
    );
    assert!(
        !text(&found.stdout).contains("demo/passwd"),
        "{}",
        text(&found.stdout)
    );

    assert!(env.rye(&["keys", "generate"]).status.success());
    let signed = env.rye(&["sign", "knowledge", "demo/passwd"]);
    assert_ne!(signed.status.code(), Some(0));
    let said = text(&signed.stdout) + &text(&signed.stderr);
    assert!(said.contains("out of its space"), "{said}");
    assert_eq!(
        std::fs::read_to_string(&secret).unwrap(),
        "root:x:0:0:SECRET\n"
    );

    let validated = env.rye(&["validate", "--format", "json"]);
    assert_eq!(validated.status.code(), Some(1));
    assert!(
        text(&validated.stdout).contains("link-escape"),
        "{}",
        text(&validated.stdout)
    );

    // A link planted where a copy will land is not written through, with
    // or without --force; nor is a linked folder on the way.
    let victim = env.home.path().join("victim");
    std::fs::write(&victim, "precious").unwrap();
    std::fs::create_dir_all(ai.join("knowledge/rye/core")).unwrap();
    symlink(&victim, ai.join("knowledge/rye/core/spaces.md")).unwrap();
    for force in [false, true] {
        let mut args = vec![
            "load",
            "knowledge",
            "rye/core/spaces",
            "--source",
            "system",
            "--to",
            "project",
        ];
        if force {
            args.push("--force");
        }
        let out = env.rye(&args);
        assert_eq!(out.status.code(), Some(1), "{}", text(&out.stdout));
        assert!(text(&out.stderr).contains("link"), "{}", text(&out.stderr));
    }
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
    let outside = env.home.path().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    symlink(&outside, ai.join("directives")).unwrap();
    let out = env.rye(&[
        "load",
        "directive",
        "rye/core/create_knowledge",
        "--to",
        "project",
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        std::fs::read_dir(&outside).unwrap().count(),
        0,
        "written through a linked folder"
    );

    // The same over MCP, and the server goes on.
    let mut server = Stdio_::start(&env);
    let loaded = server.tool(
        1,
        "load",
        json!({"item_type": "knowledge", "item_id": "demo/passwd", "project_path": env.project()}),
    );
    assert_eq!(loaded["result"]["isError"], true, "{loaded}");
    assert!(!loaded.to_string().contains("SECRET"));
    let copied = server.tool(
        2,
        "load",
        json!({"item_type": "knowledge", "item_id": "rye/core/spaces", "source": "system",
               "destination": "project", "force": true, "project_path": env.project()}),
    );
    assert_eq!(copied["result"]["isError"], true, "{copied}");
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
    server.serves(&env);
}

/// `rye serve --http 127.0.0.1:0 ARGS`, optionally under a descriptor
/// limit, killed when dropped.
struct Http {
    child: Child,
    authority: String,
}

impl Http {
    fn start(env: &Env, args: &[&str], fd_limit: Option<u32>) -> Self {
        let mut command = match fd_limit {
            Some(limit) => {
                let mut sh = Command::new("sh");
                sh.arg("-c")
                    .arg(format!("ulimit -n {limit}; exec \"$0\" \"$@\""))
                    .arg(env!("CARGO_BIN_EXE_rye"));
                env.configure(&mut sh);
                sh
            }
            None => env.command(),
        };
        let mut child = command
            .args(["serve", "--http", "127.0.0.1:0"])
            .args(args)
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
        let first = lines.next().expect("the server says where").unwrap();
        let authority = first
            .strip_prefix("serving MCP at http://")
            .unwrap_or_else(|| panic!("{first}"))
            .trim_end_matches("/mcp")
            .to_owned();
        std::thread::spawn(move || lines.for_each(drop));
        Self { child, authority }
    }

    /// One request on a connection of its own: status, headers, body.
    fn request(&self, method: &str, headers: &[(&str, &str)], body: &str) -> (u16, String, String) {
        let mut stream = TcpStream::connect(&self.authority).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(60)))
            .unwrap();
        let mut request = format!(
            "{method} /mcp HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: {}\r\nConnection: close\r\n",
            self.authority,
            body.len()
        );
        for (name, value) in headers {
            request.push_str(&format!("{name}: {value}\r\n"));
        }
        request.push_str("\r\n");
        request.push_str(body);
        stream.write_all(request.as_bytes()).unwrap();
        let mut response = String::new();
        let _ = stream.read_to_string(&mut response);
        let (head, body) = response.split_once("\r\n\r\n").unwrap_or((&response, ""));
        let status = head
            .split_whitespace()
            .nth(1)
            .unwrap_or("0")
            .parse()
            .unwrap();
        (status, head.to_owned(), body.to_owned())
    }

    /// Starts a session; its id.
    fn initialize(&self) -> Result<String, (u16, String)> {
        let (status, head, body) = self.request("POST", &[], &json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "hostile", "version": "1"}}}).to_string());
        if status != 200 {
            return Err((status, head + &body));
        }
        let session = head
            .lines()
            .find_map(|l| {
                let (name, value) = l.split_once(':')?;
                name.eq_ignore_ascii_case("mcp-session-id")
                    .then(|| value.trim().to_owned())
            })
            .expect("a session id");
        let initialized = self.request(
            "POST",
            &[
                ("Mcp-Session-Id", &session),
                ("MCP-Protocol-Version", "2025-06-18"),
            ],
            r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
        );
        assert_eq!(initialized.0, 202, "{initialized:?}");
        Ok(session)
    }

    fn alive(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }
}

impl Drop for Http {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn http_survives_running_out_of_descriptors_and_closes_slow_clients() {
    let env = Env::new();
    let mut server = Http::start(&env, &["--header-timeout", "1"], Some(256));
    // More connections than descriptors, all held open.
    let held: Vec<TcpStream> = (0..300)
        .filter_map(|_| TcpStream::connect(&server.authority).ok())
        .collect();
    std::thread::sleep(Duration::from_millis(500));
    assert!(server.alive(), "the server exited when descriptors ran out");
    drop(held);
    // Slow clients: headers trickled a byte at a time, a single byte and
    // then nothing, or nothing at all; each is cut off.
    let mut slow: Vec<TcpStream> = (0..120)
        .map(|i| {
            let mut stream = TcpStream::connect(&server.authority).unwrap();
            match i % 3 {
                0 => stream.write_all(b"POST /mcp HTTP/1.1\r\n").unwrap(),
                1 => stream.write_all(b"P").unwrap(),
                _ => {}
            }
            stream
        })
        .collect();
    let started = Instant::now();
    for _ in 0..30 {
        for (i, stream) in slow.iter_mut().enumerate() {
            if i % 3 == 0 {
                let _ = stream.write_all(b"X");
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    // Closed: the server answered (408) or hung up; a connection still
    // held open only times out reading.
    let mut open = Vec::new();
    for (i, stream) in slow.iter_mut().enumerate() {
        stream
            .set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        let mut buf = [0u8; 256];
        if let Err(e) = stream.read(&mut buf)
            && matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            )
        {
            open.push(i % 3);
        }
    }
    assert!(
        open.is_empty(),
        "still open after {:?} (0 trickling, 1 one byte, 2 silent): {open:?}",
        started.elapsed()
    );
    assert!(server.alive());
    server
        .initialize()
        .expect("a normal client is served afterwards");
}

#[test]
fn http_sessions_are_capped_expire_and_bad_requests_get_clear_answers() {
    let env = Env::new();
    let server = Http::start(&env, &["--max-sessions", "3", "--session-idle", "1"], None);
    let sessions: Vec<String> = (0..3).map(|_| server.initialize().unwrap()).collect();
    let refused = server.initialize().unwrap_err();
    assert_eq!(refused.0, 503, "{refused:?}");
    assert!(
        refused.1.to_lowercase().contains("retry-after"),
        "{refused:?}"
    );

    // Malformed JSON: 400 with a JSON-RPC parse error.
    let (status, _, body) = server.request("POST", &[("Mcp-Session-Id", &sessions[0])], "{garbage");
    assert_eq!(status, 400);
    let error: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(error["error"]["code"], -32700, "{body}");

    // DELETE: an unknown session is 404; a live one is ended with 204.
    let unknown = server.request("DELETE", &[("Mcp-Session-Id", "no-such-session")], "");
    assert_eq!(unknown.0, 404, "{unknown:?}");
    let ended = server.request(
        "DELETE",
        &[
            ("Mcp-Session-Id", &sessions[0]),
            ("MCP-Protocol-Version", "2025-06-18"),
        ],
        "",
    );
    assert_eq!(ended.0, 204, "{ended:?}");
    let again = server.request("DELETE", &[("Mcp-Session-Id", &sessions[0])], "");
    assert_eq!(again.0, 404, "{again:?}");

    // Idle sessions expire, which makes room for new ones.
    std::thread::sleep(Duration::from_millis(2500));
    for _ in 0..3 {
        server
            .initialize()
            .expect("room after the idle sessions expired");
    }
}

/// How rye starts the tool's process.
#[derive(Clone, Copy, PartialEq)]
enum Start {
    /// As this kernel allows: cloned into its cgroup where it has one.
    Best,
    /// Cloned, then joining its cgroup itself, as where the kernel
    /// cannot clone into a cgroup.
    Joining,
    /// Forked, as on a kernel without pidfds.
    Forked,
}

#[test]
fn a_tool_and_what_it_detached_die_at_the_timeout() {
    detached_die_at_the_timeout(None, Start::Best);
}

#[test]
fn without_cgroups_what_a_tool_detached_dies_at_the_timeout() {
    detached_die_at_the_timeout(Some("process-group"), Start::Best);
}

/// As where a tool cannot be cloned into its cgroup and moves itself in.
#[test]
fn a_tool_joining_its_cgroup_itself_and_what_it_detached_die_at_the_timeout() {
    detached_die_at_the_timeout(None, Start::Joining);
}

/// As on a kernel without pidfds, where the host forks to start a tool.
#[test]
fn with_the_forking_spawn_what_a_tool_detached_dies_at_the_timeout() {
    detached_die_at_the_timeout(None, Start::Forked);
    detached_die_at_the_timeout(Some("process-group"), Start::Forked);
}

/// `forced`: the containment expected with cgroups turned off; `start`:
/// how rye is made to start the tool.
fn detached_die_at_the_timeout(forced: Option<&str>, start: Start) {
    let env = Env::new();
    env.slow_runtime(1);
    let pidfile = env.project.path().join("detached.pid");
    let params =
        json!({"command": format!("setsid sleep 60 & echo $! > {}; sleep 60", pidfile.display())});
    let started = Instant::now();
    let mut command = env.command();
    if forced.is_some() {
        command.env("RYE_NO_CGROUP", "1");
    }
    match start {
        Start::Best => {}
        Start::Joining => {
            command.env("RYE_NO_CLONE3", "1");
        }
        Start::Forked => {
            command.env("RYE_NO_PIDFD", "1");
        }
    }
    let out = command
        .args([
            "execute",
            "tool",
            "slow/tool",
            "--params",
            &params.to_string(),
            "--trace",
        ])
        .output()
        .unwrap();
    assert!(started.elapsed() < Duration::from_secs(30));
    let result: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        result["error"].as_str().unwrap().contains("timed out"),
        "{result:#}"
    );
    let containment = result["trace"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["step"] == "primitive")
        .map(|e| e["containment"].clone());
    let containment = containment.as_ref().and_then(Value::as_str);
    match forced {
        Some(expected) => assert_eq!(containment, Some(expected)),
        None => assert!(
            matches!(containment, Some("cgroup" | "process-group")),
            "{containment:?}"
        ),
    }
    let detached = wait_for_pid(&pidfile, Duration::from_secs(5));
    assert!(
        process_dies_soon(detached),
        "the setsid grandchild outlived the timeout"
    );
}

#[cfg(unix)]
#[test]
fn a_terminated_rye_takes_its_tools_with_it() {
    let env = Env::new();
    env.slow_runtime(600);
    for signal in [rustix_signal::TERM, rustix_signal::HUP] {
        let pidfile = env.project.path().join(format!("tool-{signal}.pid"));
        let params = json!({"command": format!("echo $$ > {}; setsid sleep 60 & sleep 60", pidfile.display())});
        let mut rye = env
            .command()
            .args([
                "execute",
                "tool",
                "slow/tool",
                "--params",
                &params.to_string(),
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let tool = wait_for_pid(&pidfile, Duration::from_secs(30));
        rustix_signal::send(rye.id(), signal);
        let status = rye.wait().unwrap();
        assert!(!status.success());
        assert!(
            process_dies_soon(tool),
            "the tool outlived rye (signal {signal})"
        );
    }
}

#[cfg(unix)]
#[test]
fn what_a_killed_server_left_running_is_stopped_by_the_next_rye() {
    killed_server_leftovers_are_stopped(false);
}

#[cfg(unix)]
#[test]
fn without_cgroups_what_a_killed_server_left_is_stopped_by_the_next_rye() {
    killed_server_leftovers_are_stopped(true);
}

fn killed_server_leftovers_are_stopped(no_cgroup: bool) {
    let mut env = Env::new();
    env.no_cgroup = no_cgroup;
    env.slow_runtime(600);
    let pidfile = env.project.path().join("detached.pid");
    let mut server = Stdio_::start(&env);
    let params = json!({"command": format!("setsid sleep 120 & echo $! > {}; sleep 120", pidfile.display())});
    server.send_raw(
        json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {"name": "execute",
            "arguments": {"item_type": "tool", "item_id": "slow/tool", "parameters": params, "project_path": env.project()}}})
        .to_string()
        .as_bytes(),
    );
    let detached = wait_for_pid(&pidfile, Duration::from_secs(30));
    rustix_signal::send(server.child.id(), rustix_signal::KILL);
    let _ = server.child.wait();
    // The next rye that runs tools stops what the dead one left.
    let out = env.rye(&[
        "execute",
        "tool",
        "rye/bash/bash",
        "--params",
        r#"{"command": "true"}"#,
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        process_dies_soon(detached),
        "a killed server's tool lived on: {}",
        text(&out.stderr)
    );
}

#[test]
fn a_client_that_disconnects_cancels_its_call() {
    let env = Env::new();
    env.slow_runtime(600);
    let server = Http::start(&env, &[], None);
    let session = server.initialize().unwrap();
    let pidfile = env.project.path().join("tool.pid");
    let params = json!({"command": format!("echo $$ > {}; sleep 120", pidfile.display())});
    let body = json!({"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": {"name": "execute",
        "arguments": {"item_type": "tool", "item_id": "slow/tool", "parameters": params, "project_path": env.project()}}})
    .to_string();
    let mut stream = TcpStream::connect(&server.authority).unwrap();
    write!(
        stream,
        "POST /mcp HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nMcp-Session-Id: {session}\r\nMCP-Protocol-Version: 2025-06-18\r\nContent-Length: {}\r\n\r\n{body}",
        server.authority,
        body.len()
    )
    .unwrap();
    let tool = wait_for_pid(&pidfile, Duration::from_secs(30));
    drop(stream);
    assert!(
        process_dies_soon(tool),
        "the call ran on after its client left"
    );
    server.initialize().expect("the server serves on");
}

#[test]
fn files_left_by_writers_killed_midway_are_cleaned_up() {
    let cache = tempfile::tempdir().unwrap();
    let env = Env::with_cache(cache.path().join("rye"));
    // A system-space unpack killed midway (by a process that is gone).
    let abandoned = cache.path().join("rye/system/.tmp-999999999-1/.ai");
    std::fs::create_dir_all(&abandoned).unwrap();
    // A signature write killed midway.
    env.write(".ai/tools/demo/tool.py", "__version__ = '1.0.0'\n");
    let half = env.write(".ai/tools/demo/.tool.py.999999999.tmp", "half");
    let out = env.rye(&["keys", "generate"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let out = env.rye(&["sign", "tool", "demo/tool"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        !half.exists(),
        "the abandoned signature write is still there"
    );
    assert!(!abandoned.exists(), "the abandoned unpack is still there");
}

#[test]
fn untrusted_text_is_echoed_cut_and_replies_stay_bounded() {
    let env = Env::new();
    // A 100 KB invalid id.
    let id = format!("{}/..", "x".repeat(100_000));
    let out = env.rye(&["execute", "tool", &id]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        out.stdout.len() + out.stderr.len() < 4_000,
        "{} bytes echoed",
        out.stdout.len() + out.stderr.len()
    );
    let out = env.rye(&["load", "tool", &id]);
    assert!(
        out.stdout.len() + out.stderr.len() < 4_000,
        "{} bytes echoed",
        out.stdout.len() + out.stderr.len()
    );

    // A 20 MB malformed trusted-key file is not written out on every command.
    env.write(
        ".ai/config/keys/trusted/0123456789abcdef.toml",
        &format!("fingerprint = \"{}", "z".repeat(20 << 20)),
    );
    let out = env
        .command()
        .env("RYE_LOG", "warn")
        .args(["search", "tool", "bash"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        out.stderr.len() < 4_000,
        "{} bytes on stderr",
        out.stderr.len()
    );

    // A 5 MB knowledge item: its text once in the reply, cut to 1 MiB.
    let body = "word ".repeat(1 << 20);
    env.write(
        ".ai/knowledge/big.md",
        &format!("---\nname: big\n---\n{body}"),
    );
    let out = env.rye(&["--json", "load", "knowledge", "big"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        out.stdout.len() < 3 << 20,
        "a {} byte reply",
        out.stdout.len()
    );
    let reply: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        reply["truncated"]["bytes_cut"].as_u64().unwrap() > 4 << 20,
        "{}",
        reply["truncated"]
    );

    let mut server = Stdio_::start(&env);
    let answer = server.tool(
        1,
        "load",
        json!({"item_type": "knowledge", "item_id": "big", "project_path": env.project()}),
    );
    assert!(
        answer.to_string().len() < 5 << 20,
        "a {} byte reply",
        answer.to_string().len()
    );
    let answer = server.tool(
        2,
        "load",
        json!({"item_type": "tool", "item_id": id, "project_path": env.project()}),
    );
    assert!(
        answer.to_string().len() < 8_000,
        "{} bytes echoed",
        answer.to_string().len()
    );
    server.serves(&env);
}

/// Signals sent to a child by pid.
mod rustix_signal {
    pub const TERM: i32 = 15;
    pub const HUP: i32 = 1;
    pub const KILL: i32 = 9;

    pub fn send(pid: u32, signal: i32) {
        let status = std::process::Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(pid.to_string())
            .status()
            .unwrap();
        assert!(status.success());
    }
}
