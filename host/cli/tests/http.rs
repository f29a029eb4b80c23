//! HTTP tools through the real binary: signed tools and runtimes of a
//! project, the bundled `rye/http/fetch`, and a real server on a local
//! socket.

use std::process::{Command, Output};
use std::time::Duration;

use rye_test_artifacts::http_server::{Server, answer};
use serde_json::Value;

mod common;

struct Env {
    project: tempfile::TempDir,
    home: tempfile::TempDir,
}

impl Env {
    fn new() -> Self {
        Self {
            project: tempfile::tempdir().unwrap(),
            home: tempfile::tempdir().unwrap(),
        }
    }

    fn rye(&self, args: &[&str]) -> Output {
        common::clean_env(
            Command::new(env!("CARGO_BIN_EXE_rye")).args(args),
            self.project.path(),
            self.home.path(),
            &common::shared_cache(),
        )
        .output()
        .unwrap()
    }

    fn write(&self, relative: &str, content: &str) {
        let path = self.project.path().join(relative);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, content).unwrap();
    }

    /// Signs every item of the project with a key made and trusted here.
    fn sign_all(&self) {
        for args in [
            &["keys", "generate"][..],
            &["keys", "trust"],
            &["sign", "--all"],
        ] {
            let out = self.rye(args);
            assert!(
                out.status.success(),
                "rye {args:?}: {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }

    /// The result of executing `tool` with `params`, and its exit status.
    fn execute(&self, tool: &str, params: &str, extra: &[&str]) -> (Value, bool) {
        let mut args = vec!["execute", "tool", tool, "--params", params];
        args.extend_from_slice(extra);
        let out = self.rye(&args);
        let result: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!(
                "rye {args:?} printed no JSON ({e}):\n{}\n{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            )
        });
        (result, out.status.success())
    }
}

fn tool(executor: &str, config: &str) -> String {
    format!(
        "version: '1.0.0'\ntool_type: http\nexecutor_id: {executor}\ncategory: api\ndescription: A request.\nconfig:\n{config}"
    )
}

/// A project whose runtime may reach 127.0.0.1 only, with one tool per
/// case, all signed.
fn project(server: &Server) -> Env {
    let env = Env::new();
    let base = format!("http://127.0.0.1:{}", server.port);
    env.write(
        ".ai/tools/local/http.yaml",
        "version: '1.0.0'\ntool_type: runtime\nexecutor_id: rye/core/primitives/http_client\ncategory: local\n\
         description: Requests to this machine's services.\nconfig:\n  timeout: 10\n  allow_private_addresses: ['127.0.0.1']\n",
    );
    let local = "local/http";
    env.write(
        ".ai/tools/api/item.yaml",
        &tool(
            local,
            &format!(
                "  url: '{base}/items/{{id}}?q={{q}}'\n  headers:\n    Accept: application/json\n    X-Trace: '{{trace}}'\n"
            ),
        ),
    );
    env.write(
        ".ai/tools/api/text.yaml",
        &tool(local, &format!("  url: '{base}/text'\n")),
    );
    env.write(
        ".ai/tools/api/create.yaml",
        &tool(
            local,
            &format!(
                "  method: POST\n  url: '{base}/create'\n  auth: {{type: bearer, token: '${{API_TOKEN}}'}}\n  body:\n    title: '{{title}}'\n    tags: '{{tags}}'\n    note: '{{note}}'\n"
            ),
        ),
    );
    env.write(
        ".ai/tools/api/slow.yaml",
        &tool(local, &format!("  url: '{base}/slow'\n  timeout: 0.5\n")),
    );
    env.write(
        ".ai/tools/api/big.yaml",
        &tool(
            local,
            &format!("  url: '{base}/big'\n  max_response_bytes: 1000\n"),
        ),
    );
    env.write(
        ".ai/tools/api/missing.yaml",
        &tool(local, &format!("  url: '{base}/missing'\n")),
    );
    env.write(
        ".ai/tools/api/metadata.yaml",
        &tool(local, &format!("  url: '{base}/to-metadata'\n")),
    );
    // The tool cannot widen what the runtime allows.
    env.write(
        ".ai/tools/api/sneaky.yaml",
        &tool(
            "rye/core/runtimes/http/http",
            &format!("  url: '{base}/text'\n  allow_private_addresses: true\n"),
        ),
    );
    env.write(".env", "API_TOKEN=t0k3n-from-dotenv\n");
    env.sign_all();
    env
}

fn server() -> Server {
    Server::start(
        |seen, _| match seen.path.split('?').next().unwrap_or_default() {
            "/text" => answer("200 OK", &[("Content-Type", "text/plain")], b"plain words"),
            "/create" => {
                let body = format!(
                    "{{\"auth\":{:?},\"type\":{:?},\"got\":{}}}",
                    seen.header("authorization").unwrap_or_default(),
                    seen.header("content-type").unwrap_or_default(),
                    String::from_utf8_lossy(&seen.body)
                );
                answer(
                    "201 Created",
                    &[("Content-Type", "application/json")],
                    body.as_bytes(),
                )
            }
            "/slow" => {
                std::thread::sleep(Duration::from_secs(5));
                answer("200 OK", &[], b"late")
            }
            "/big" => answer("200 OK", &[], &[b'x'; 4000]),
            "/to-metadata" => answer(
                "302 Found",
                &[("Location", "http://169.254.169.254/latest/meta-data/")],
                b"",
            ),
            path if path.starts_with("/items/") => answer(
                "200 OK",
                &[
                    ("Content-Type", "application/json; charset=utf-8"),
                    ("X-Served", "1"),
                ],
                format!("{{\"path\":{:?}}}", seen.path).as_bytes(),
            ),
            _ => answer("404 Not Found", &[], b"nope"),
        },
    )
}

#[test]
fn http_tools_answer_json_and_text_with_parameters_as_data() {
    let server = server();
    let env = project(&server);

    let (item, ok) = env.execute("api/item", r#"{"id": "a/../b", "q": "x&y=z"}"#, &[]);
    assert!(ok, "{item:#}");
    assert_eq!(item["data"]["status_code"], 200);
    assert_eq!(
        item["data"]["body"]["path"],
        "/items/a%2F..%2Fb?q=x%26y%3Dz"
    );
    assert_eq!(item["data"]["headers"]["x-served"], "1");
    assert_eq!(item["metadata"]["status_code"], 200);
    let seen = server.seen();
    assert_eq!(seen[0].header("accept"), Some("application/json"));
    assert_eq!(
        seen[0].header("x-trace"),
        None,
        "a header naming a missing parameter is left out"
    );

    let (text, ok) = env.execute("api/text", "{}", &[]);
    assert!(ok, "{text:#}");
    assert_eq!(text["data"]["body"], "plain words");

    let (created, ok) = env.execute(
        "api/create",
        r#"{"title": "Hi ${API_TOKEN}", "tags": ["a", 2]}"#,
        &["--trace"],
    );
    assert!(ok, "{created:#}");
    let body = &created["data"]["body"];
    assert_eq!(body["auth"], "Bearer t0k3n-from-dotenv");
    assert_eq!(body["type"], "application/json");
    // Parameters are data: no `${VAR}` expansion; an absent one is left out.
    assert_eq!(
        body["got"],
        serde_json::json!({"title": "Hi ${API_TOKEN}", "tags": ["a", 2]})
    );
    let trace = created["trace"].as_array().unwrap();
    let request = trace.iter().find(|e| e["step"] == "request").unwrap();
    assert_eq!(request["method"], "POST");
    assert_eq!(request["private_addresses"], "127.0.0.1");
    let sent = trace.iter().find(|e| e["step"] == "http").unwrap();
    assert_eq!(sent["status_code"], 201);
    assert!(
        !created["trace"].to_string().contains("t0k3n"),
        "the trace shows header names, never their values"
    );
}

#[test]
fn http_tools_fail_on_time_size_status_and_private_addresses() {
    let server = server();
    let env = project(&server);
    let error_of = |tool: &str, params: &str| {
        let (result, ok) = env.execute(tool, params, &[]);
        assert!(!ok, "{tool} should fail: {result:#}");
        assert_eq!(result["status"], "error");
        result["error"].as_str().unwrap().to_owned()
    };

    let started = std::time::Instant::now();
    let slow = error_of("api/slow", "{}");
    assert!(slow.contains("no answer within 0.5 s"), "{slow}");
    assert!(started.elapsed() < Duration::from_secs(4));

    let big = error_of("api/big", "{}");
    assert!(big.contains("larger than the limit of 1000 bytes"), "{big}");

    let (missing, ok) = env.execute("api/missing", "{}", &[]);
    assert!(!ok);
    assert_eq!(missing["error"], "HTTP 404 Not Found: nope");
    assert_eq!(missing["data"]["status_code"], 404);

    let metadata = error_of("api/metadata", "{}");
    assert!(
        metadata.contains("169.254.169.254") && metadata.contains("link-local"),
        "{metadata}"
    );

    let before = server.seen().len();
    let url = format!(r#"{{"url": "http://127.0.0.1:{}/text"}}"#, server.port);
    let fetch = error_of("rye/http/fetch", &url);
    assert!(
        fetch.contains("loopback") && fetch.contains("allow_private_addresses"),
        "{fetch}"
    );
    let localhost = format!(r#"{{"url": "http://localhost:{}/text"}}"#, server.port);
    assert!(error_of("rye/http/fetch", &localhost).contains("loopback"));
    let sneaky = error_of("api/sneaky", "{}");
    assert!(sneaky.contains("loopback"), "{sneaky}");
    assert_eq!(
        server.seen().len(),
        before,
        "nothing refused reached the server"
    );

    for (params, expect) in [
        (r#"{"url": "file:///etc/passwd"}"#, "not an absolute http"),
        (
            r#"{"url": "http://h.test/", "headers": {"X": "a\r\nHost: evil"}}"#,
            "line break",
        ),
        (
            r#"{"url": "http://h.test/", "method": "GET /x HTTP/1.1"}"#,
            "not an HTTP method",
        ),
        (r#"{}"#, "did not give"),
    ] {
        let error = error_of("rye/http/fetch", params);
        assert!(error.contains(expect), "{params}: {error}");
    }
}

#[test]
fn an_http_tool_refuses_to_run_when_its_runtime_is_tampered_with() {
    let server = server();
    let env = project(&server);
    let runtime = env.project.path().join(".ai/tools/local/http.yaml");
    let text = std::fs::read_to_string(&runtime).unwrap();
    std::fs::write(&runtime, text.replace("['127.0.0.1']", "true")).unwrap();
    let (result, ok) = env.execute("api/text", "{}", &[]);
    assert!(!ok, "{result:#}");
    assert!(
        result["error"].as_str().unwrap().contains("local/http"),
        "{result:#}"
    );
    assert!(server.seen().is_empty());
}
