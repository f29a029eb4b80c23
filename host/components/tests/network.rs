//! Outgoing HTTP from command tools, proven with the `http-fetch` example
//! against real servers on loopback: a listed host is reached, any other
//! is denied before a connection opens (and the run says which), and a
//! server that stalls cannot keep a run past its deadline.

use std::io::{Read as _, Write as _};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use rye_components::{
    CommandGrants, CommandOutput, CommandStop, ComponentHost, HostConfig, Limits, LoadedCommand,
};
use rye_test_artifacts as artifacts;
use serde_json::{Value, json};

/// How a test server answers each connection.
#[derive(Clone, Copy)]
enum Answer {
    /// `200 OK` with the request's path in the body.
    Echo,
    /// Reads the request and never answers.
    Stall,
    /// Sends headers promising a body, then a byte now and then.
    Trickle,
}

/// A server on loopback and how many connections it took.
struct Server {
    port: u16,
    connections: Arc<AtomicUsize>,
}

fn serve(answer: Answer) -> Server {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let connections = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&connections);
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { return };
            counted.fetch_add(1, Ordering::SeqCst);
            std::thread::spawn(move || respond(stream, answer));
        }
    });
    Server { port, connections }
}

fn respond(mut stream: TcpStream, answer: Answer) {
    let mut request = Vec::new();
    let mut byte = [0u8; 1];
    while !request.ends_with(b"\r\n\r\n") {
        match stream.read(&mut byte) {
            Ok(1) => request.push(byte[0]),
            _ => return,
        }
    }
    let request = String::from_utf8_lossy(&request).into_owned();
    let path = request.split(' ').nth(1).unwrap_or_default().to_owned();
    match answer {
        Answer::Echo => {
            let body = format!("you asked for {path}");
            let _ = write!(
                stream,
                "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: {}\r\n\
                 connection: close\r\n\r\n{body}",
                body.len()
            );
        }
        Answer::Stall => std::thread::sleep(Duration::from_secs(60)),
        Answer::Trickle => {
            let _ = write!(stream, "HTTP/1.1 200 OK\r\ncontent-length: 100000\r\n\r\n");
            for _ in 0..600 {
                if stream.write_all(b".").is_err() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }
}

fn fetcher(host: &ComponentHost) -> Arc<LoadedCommand> {
    host.load_command(Path::new(artifacts::HTTP_FETCH), |_| {
        Ok::<(), std::convert::Infallible>(())
    })
    .unwrap()
    .unwrap()
}

fn grants(hosts: &[String]) -> CommandGrants {
    CommandGrants {
        limits: Limits {
            deadline: Duration::from_secs(10),
            memory: 64 << 20,
        },
        output_cap: 1 << 20,
        hosts: hosts.iter().map(|h| h.parse().unwrap()).collect(),
        ..CommandGrants::default()
    }
}

fn fetch(
    host: &ComponentHost,
    grants: &CommandGrants,
    url: &str,
) -> Result<CommandOutput, CommandStop> {
    let fetcher = fetcher(host);
    host.run_command(
        &fetcher,
        grants,
        json!({"url": url}).to_string().into_bytes(),
    )
    .unwrap()
}

fn answer(output: &CommandOutput) -> Value {
    assert_eq!(output.exit_code, 0, "{}", output.stderr);
    serde_json::from_slice(&output.stdout).unwrap()
}

#[test]
fn a_listed_host_is_reached() {
    let server = serve(Answer::Echo);
    let host = ComponentHost::new(HostConfig::default()).unwrap();
    let listed = grants(&[format!("127.0.0.1:{}", server.port)]);
    let url = format!("http://127.0.0.1:{}/items?page=2", server.port);
    let output = fetch(&host, &listed, &url).unwrap();
    let got = answer(&output);
    assert_eq!(got["status"], 200, "{got}");
    assert_eq!(got["text"], "you asked for /items?page=2", "{got}");
    assert_eq!(got["content_type"], "text/plain");
    assert!(output.denied.is_empty());
}

#[test]
fn a_host_not_listed_is_denied_before_a_connection_opens() {
    let listed = serve(Answer::Echo);
    let other = serve(Answer::Echo);
    let host = ComponentHost::new(HostConfig::default()).unwrap();
    let granted = grants(&[format!("127.0.0.1:{}", listed.port)]);
    for (grants, url, denied) in [
        // Another port of a listed address.
        (
            &granted,
            format!("http://127.0.0.1:{}/", other.port),
            format!("http://127.0.0.1:{}", other.port),
        ),
        // The same server by another name.
        (
            &granted,
            format!("http://localhost:{}/", listed.port),
            format!("http://localhost:{}", listed.port),
        ),
        // No network granted at all.
        (
            &grants(&[]),
            format!("http://127.0.0.1:{}/", listed.port),
            format!("http://127.0.0.1:{}", listed.port),
        ),
    ] {
        let output = fetch(&host, grants, &url).unwrap();
        assert_eq!(output.exit_code, 1, "{url}");
        assert_eq!(output.denied, vec![denied], "{url}");
        assert!(
            output
                .stderr
                .contains("not among those this tool's item lets it reach"),
            "{url}: {}",
            output.stderr
        );
    }
    assert_eq!(other.connections.load(Ordering::SeqCst), 0);
    assert_eq!(listed.connections.load(Ordering::SeqCst), 0);
    // And the host serves on: the listed one is reached.
    let url = format!("http://127.0.0.1:{}/", listed.port);
    assert_eq!(
        answer(&fetch(&host, &granted, &url).unwrap())["status"],
        200
    );
}

#[test]
fn a_server_that_stalls_cannot_hold_a_run_past_its_deadline() {
    let host = ComponentHost::new(HostConfig::default()).unwrap();
    for answer in [Answer::Stall, Answer::Trickle] {
        let server = serve(answer);
        let mut granted = grants(&[format!("127.0.0.1:{}", server.port)]);
        granted.limits.deadline = Duration::from_millis(700);
        let url = format!("http://127.0.0.1:{}/", server.port);
        let stop = fetch(&host, &granted, &url).unwrap_err();
        assert_eq!(stop, CommandStop::Deadline(Duration::from_millis(700)));
        assert_eq!(server.connections.load(Ordering::SeqCst), 1);
    }
    let echo = serve(Answer::Echo);
    let granted = grants(&[format!("127.0.0.1:{}", echo.port)]);
    let url = format!("http://127.0.0.1:{}/", echo.port);
    assert_eq!(
        answer(&fetch(&host, &granted, &url).unwrap())["status"],
        200
    );
}

#[test]
fn a_cancel_cuts_a_wait_on_the_network() {
    let host = ComponentHost::new(HostConfig::default()).unwrap();
    for answer in [Answer::Stall, Answer::Trickle] {
        let server = serve(answer);
        let mut granted = grants(&[format!("127.0.0.1:{}", server.port)]);
        granted.limits.deadline = Duration::from_secs(60);
        let cancel = Arc::new(std::sync::atomic::AtomicBool::new(false));
        granted.cancel = Some(Arc::clone(&cancel));
        let stopper = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(400));
            cancel.store(true, Ordering::Relaxed);
        });
        let started = std::time::Instant::now();
        let url = format!("http://127.0.0.1:{}/", server.port);
        let stop = fetch(&host, &granted, &url).unwrap_err();
        stopper.join().unwrap();
        assert_eq!(stop, CommandStop::Cancelled);
        // Cut by the cancel, far short of the minute's deadline.
        assert!(started.elapsed() < Duration::from_secs(30));
    }
}
