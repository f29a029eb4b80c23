//! `cargo bench -p rye --bench http`: the HTTP server under hostile load,
//! side by side in one run.
//!
//! 1. Memory (VmRSS) of `rye serve --http` after 30,000 `initialize`
//!    calls, with the session cap and idle expiry as shipped and with both
//!    lifted (as the server was before they existed).
//! 2. The round trip of a normal call (`ping` in a live session) while
//!    1,000 connections trickle their headers a byte at a time: p50 and
//!    p99, and how long until every slow connection was closed (the
//!    header timeout is 5 s here).
//!
//! Every request goes to this machine's loopback address; the loops are
//! bounded in count and time.

#[path = "../tests/common/mod.rs"]
mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

struct Server {
    child: Child,
    authority: String,
}

impl Server {
    fn start(home: &std::path::Path, cache: &std::path::Path, args: &[&str]) -> Self {
        let mut command = Command::new(env!("CARGO_BIN_EXE_rye"));
        command.args(["serve", "--http", "127.0.0.1:0"]).args(args);
        let mut child = common::clean_env(&mut command, home, home, cache)
            .env("RYE_LOG", "error")
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
        let first = lines.next().unwrap().unwrap();
        let authority = first
            .trim_start_matches("serving MCP at http://")
            .trim_end_matches("/mcp")
            .to_owned();
        std::thread::spawn(move || lines.for_each(drop));
        Self { child, authority }
    }

    fn post(&self, headers: &str, body: &str) -> (u16, String) {
        let mut stream = TcpStream::connect(&self.authority).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        write!(
            stream,
            "POST /mcp HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: {}\r\nConnection: close\r\n{headers}\r\n{body}",
            self.authority,
            body.len()
        )
        .unwrap();
        let mut response = String::new();
        let _ = stream.read_to_string(&mut response);
        let status = response
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        (status, response)
    }

    fn initialize(&self) -> (u16, Option<String>) {
        let (status, response) = self.post(
            "",
            r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"bench","version":"1"}}}"#,
        );
        let session = response.lines().find_map(|l| {
            let (name, value) = l.split_once(':')?;
            name.eq_ignore_ascii_case("mcp-session-id")
                .then(|| value.trim().to_owned())
        });
        (status, session)
    }

    fn rss_mib(&self) -> f64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap();
        let kib: f64 = status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0.0);
        kib / 1024.0
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn percentile(sorted: &[Duration], p: usize) -> Duration {
    sorted[(sorted.len() * p / 100).min(sorted.len() - 1)]
}

fn main() {
    let home = tempfile::tempdir().unwrap();
    let cache = tempfile::tempdir().unwrap();
    let (home, cache) = (home.path(), cache.path());

    // 1. Memory after 30,000 initialize calls, four clients at a time.
    for (name, args) in [
        (
            "no cap, no expiry",
            &["--max-sessions", "1000000", "--session-idle", "86400"][..],
        ),
        ("as shipped (cap 1,000, idle 300 s)", &[][..]),
        (
            "cap 1,000, idle 5 s",
            &["--max-sessions", "1000", "--session-idle", "5"][..],
        ),
    ] {
        let server = Server::start(home, cache, args);
        let started = Instant::now();
        let accepted = std::sync::atomic::AtomicUsize::new(0);
        let refused = std::sync::atomic::AtomicUsize::new(0);
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for _ in 0..7_500 {
                        match server.initialize().0 {
                            200 => accepted.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
                            _ => refused.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
                        };
                    }
                });
            }
        });
        let took = started.elapsed();
        let right_after = server.rss_mib();
        std::thread::sleep(Duration::from_secs(8));
        // A new client 8 s later: served once idle sessions expired.
        let later = server.initialize().0;
        println!(
            "30,000 initialize, {name:<36} {:>6} sessions, {:>6} refused (503), {took:>8.1?}; RSS {right_after:>7.1} MiB, 8 s later {:>7.1} MiB and a new session gets {later}",
            accepted.into_inner(),
            refused.into_inner(),
            server.rss_mib()
        );
    }

    // 2. Normal calls while 1,000 connections trickle their headers.
    let server = Server::start(home, cache, &["--header-timeout", "5"]);
    let (_, session) = server.initialize();
    let session = session.expect("a session");
    let headers = format!("Mcp-Session-Id: {session}\r\nMCP-Protocol-Version: 2025-06-18\r\n");
    server.post(
        &headers,
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
    );
    let ping = r#"{"jsonrpc":"2.0","id":2,"method":"ping"}"#;
    let mut quiet: Vec<Duration> = (0..300)
        .map(|_| {
            let t = Instant::now();
            assert_eq!(server.post(&headers, ping).0, 200);
            t.elapsed()
        })
        .collect();
    quiet.sort();
    // Each slow client sends a request line, then a byte every round;
    // when each is closed is noted against when it was opened.
    let mut slow: Vec<(TcpStream, Instant, Option<Duration>)> = (0..1_000)
        .map(|_| {
            let mut stream = TcpStream::connect(&server.authority).unwrap();
            stream.write_all(b"POST /mcp HTTP/1.1\r\n").unwrap();
            stream.set_nonblocking(true).unwrap();
            (stream, Instant::now(), None)
        })
        .collect();
    let started = Instant::now();
    let mut loaded = Vec::new();
    while started.elapsed() < Duration::from_secs(12) {
        for (stream, opened, closed) in &mut slow {
            if closed.is_some() {
                continue;
            }
            let mut buf = [0u8; 64];
            let gone = stream.write_all(b"X").is_err()
                || !matches!(stream.read(&mut buf), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock);
            if gone {
                *closed = Some(opened.elapsed());
            }
        }
        for _ in 0..20 {
            let t = Instant::now();
            assert_eq!(server.post(&headers, ping).0, 200);
            loaded.push(t.elapsed());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let mut lifetimes: Vec<Duration> = slow.iter().filter_map(|(_, _, c)| *c).collect();
    lifetimes.sort();
    let open = slow.len() - lifetimes.len();
    loaded.sort();
    println!(
        "ping round trip, quiet:                         p50 {:>8.2?}  p99 {:>8.2?}  ({} calls)",
        percentile(&quiet, 50),
        percentile(&quiet, 99),
        quiet.len()
    );
    println!(
        "ping round trip, 1,000 slow connections held:   p50 {:>8.2?}  p99 {:>8.2?}  ({} calls)",
        percentile(&loaded, 50),
        percentile(&loaded, 99),
        loaded.len()
    );
    if lifetimes.is_empty() {
        println!("none of 1,000 slow connections was closed within 12 s");
    } else {
        println!(
            "1,000 slow connections (header timeout 5 s): {} closed, {open} still open after 12 s; each lived min {:.2?}, median {:.2?}, max {:.2?}",
            lifetimes.len(),
            lifetimes[0],
            percentile(&lifetimes, 50),
            lifetimes[lifetimes.len() - 1]
        );
    }
}
