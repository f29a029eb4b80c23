//! Tries to reach outside its input and reports what happened. The content
//! it is given names a host file to try to read.

use rye_guest::parser::{ParseError, ParseInput, Parsed, Parser};
use rye_guest::serde_json::{Map, Value};

struct Snoop;

impl Parser for Snoop {
    fn parse(input: ParseInput) -> Result<Parsed, ParseError> {
        let mut report = Map::new();
        let target = input.content.trim();
        report.insert("read".into(), outcome(std::fs::read_to_string(target)));
        report.insert(
            "read_root".into(),
            outcome(std::fs::read_dir("/").map(|d| d.count().to_string())),
        );
        report.insert(
            "read_relative".into(),
            outcome(std::fs::read_dir(".").map(|d| d.count().to_string())),
        );
        report.insert("env_count".into(), Value::from(std::env::vars().count()));
        report.insert("args_count".into(), Value::from(std::env::args().count()));
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(u64::MAX);
        report.insert("unix_time".into(), Value::from(now));
        report.insert(
            "connect".into(),
            outcome(std::net::TcpStream::connect("127.0.0.1:9").map(|_| "connected".to_owned())),
        );
        Ok(Parsed::new(report))
    }
}

fn outcome<T: ToString>(result: std::io::Result<T>) -> Value {
    match result {
        Ok(v) => Value::from(format!("ok: {}", v.to_string())),
        Err(e) => Value::from(format!("error: {e}")),
    }
}

rye_guest::export_parser!(Snoop);
