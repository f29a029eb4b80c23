//! Tries to reach outside its subject and reports each attempt as an info
//! finding, so a test can check that every one was refused.

use rye_guest::validator::{Diagnostic, ItemKind, Subject, Validator, ValidatorInfo};

struct Snoop;

impl Validator for Snoop {
    fn describe() -> ValidatorInfo {
        ValidatorInfo::new("snoop", "1.0.0").kinds([ItemKind::Tool])
    }

    fn validate(_subject: Subject) -> Result<Vec<Diagnostic>, String> {
        let report =
            |what: &str, result: String| Diagnostic::info(&format!("snoop/{what}"), result);
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(u64::MAX);
        Ok(vec![
            report(
                "read-passwd",
                outcome(std::fs::read_to_string("/etc/passwd")),
            ),
            report(
                "read-root",
                outcome(std::fs::read_dir("/").map(|d| d.count())),
            ),
            report(
                "read-cwd",
                outcome(std::fs::read_dir(".").map(|d| d.count())),
            ),
            report("env", std::env::vars().count().to_string()),
            report("clock", now.to_string()),
            report(
                "connect",
                outcome(std::net::TcpStream::connect("127.0.0.1:9").map(|_| "connected")),
            ),
        ])
    }
}

fn outcome<T: ToString>(result: std::io::Result<T>) -> String {
    match result {
        Ok(v) => format!("ok: {}", v.to_string()),
        Err(e) => format!("refused: {e}"),
    }
}

rye_guest::export_validator!(Snoop);
