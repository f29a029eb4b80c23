//! Reads `{"do": ..., ...}` from stdin and answers JSON on stdout, each
//! action reaching for one capability so a test can grant or withhold it.

use std::io::{Read, Write};

fn main() {
    let mut input = String::new();
    std::io::stdin().read_to_string(&mut input).expect("stdin");
    let asked: serde_json::Value = serde_json::from_str(&input).expect("JSON parameters");
    let text = |key: &str| asked[key].as_str().unwrap_or_default().to_owned();
    let answer = match text("do").as_str() {
        "echo" => serde_json::json!({"echo": asked["value"]}),
        "read" => match std::fs::read_to_string(text("path")) {
            Ok(content) => serde_json::json!({"content": content}),
            Err(e) => serde_json::json!({"error": e.to_string()}),
        },
        "write" => match std::fs::write(text("path"), text("content")) {
            Ok(()) => serde_json::json!({"written": true}),
            Err(e) => serde_json::json!({"error": e.to_string()}),
        },
        "env" => serde_json::json!({"value": std::env::var(text("name")).ok(),
                                    "names": std::env::vars().map(|(k, _)| k).collect::<Vec<_>>()}),
        // Writes a growing count to `path` for as long as it runs, each
        // whole (written aside, then renamed over it).
        "count" => {
            let (path, aside) = (text("path"), format!("{}.next", text("path")));
            let mut n: u64 = 0;
            loop {
                n += 1;
                if n.is_multiple_of(1000) && std::fs::write(&aside, n.to_string()).is_ok() {
                    let _ = std::fs::rename(&aside, &path);
                }
            }
        }
        "loop" => {
            let mut n: u64 = 0;
            loop {
                n = std::hint::black_box(n.wrapping_add(1));
            }
        }
        "allocate" => {
            let mut kept = Vec::new();
            loop {
                kept.push(vec![1u8; 1 << 20]);
                std::hint::black_box(&kept);
            }
        }
        "flood" => {
            let line = "x".repeat(1023) + "\n";
            let mut out = std::io::stdout().lock();
            loop {
                if out.write_all(line.as_bytes()).is_err() {
                    std::process::exit(3);
                }
            }
        }
        // What this instance kept from runs before (none, if each run
        // has an instance of its own), then this run's grants as seen.
        "remember" => {
            static RUNS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
            static LAST: std::sync::Mutex<Option<String>> = std::sync::Mutex::new(None);
            let before = RUNS.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let last = LAST.lock().unwrap().replace(text("secret"));
            serde_json::json!({
                "runs_before": before,
                "last_secret": last,
                "secret": text("secret"),
                "env": std::env::var("SECRET").ok(),
                "file": std::fs::read_to_string("/data/secret").ok(),
            })
        }
        "exit" => std::process::exit(asked["code"].as_i64().unwrap_or(1) as i32),
        other => serde_json::json!({"error": format!("no action {other:?}")}),
    };
    println!("{answer}");
}
