//! Finds the lines of a project's files that contain `query`.
//!
//! A `wasi:cli` command: the parameters come as JSON on stdin
//! (`{"query": "...", "path": "sub/folder", "max_results": 50}`) and the
//! answer goes out as JSON on stdout. Its second argument is the project's
//! path, the one folder its item grants (read-only), at the same path
//! inside the tool as outside.

use std::io::Read as _;
use std::path::{Path, PathBuf};

/// Files larger than this are not read.
const MAX_FILE: u64 = 1 << 20;

struct Search<'a> {
    query: &'a str,
    root: &'a Path,
    max: usize,
    matches: Vec<serde_json::Value>,
    files: usize,
}

impl Search<'_> {
    fn folder(&mut self, dir: &Path) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        let mut entries: Vec<_> = entries.filter_map(Result::ok).collect();
        entries.sort_by_key(|e| e.file_name());
        for entry in entries {
            if self.matches.len() >= self.max {
                return;
            }
            let name = entry.file_name();
            if name.to_string_lossy().starts_with('.') && name != ".ai" {
                continue;
            }
            let Ok(kind) = entry.file_type() else {
                continue;
            };
            let path = entry.path();
            if kind.is_dir() {
                self.folder(&path);
            } else if kind.is_file() {
                self.file(&path);
            }
        }
    }

    fn file(&mut self, path: &Path) {
        if std::fs::metadata(path).map_or(true, |m| m.len() > MAX_FILE) {
            return;
        }
        let Ok(text) = std::fs::read_to_string(path) else {
            return;
        };
        self.files += 1;
        let relative = path.strip_prefix(self.root).unwrap_or(path);
        for (n, line) in text.lines().enumerate() {
            if self.matches.len() >= self.max {
                return;
            }
            if line.contains(self.query) {
                self.matches.push(serde_json::json!({
                    "path": relative.to_string_lossy(),
                    "line": n + 1,
                    "text": line.trim_end(),
                }));
            }
        }
    }
}

fn answer() -> Result<serde_json::Value, String> {
    let mut input = String::new();
    std::io::stdin()
        .read_to_string(&mut input)
        .map_err(|e| format!("reading the parameters: {e}"))?;
    let asked: serde_json::Value =
        serde_json::from_str(&input).map_err(|e| format!("the parameters are not JSON: {e}"))?;
    let query = asked["query"]
        .as_str()
        .filter(|q| !q.is_empty())
        .ok_or("query: a word to look for")?;
    let project = std::env::args()
        .nth(2)
        .filter(|p| !p.is_empty())
        .map(PathBuf::from)
        .ok_or("no project to search")?;
    let under = asked["path"].as_str().unwrap_or("");
    if under.starts_with('/') || under.split('/').any(|p| p == "..") {
        return Err(format!("path {under:?} is not a folder of the project"));
    }
    let max = asked["max_results"].as_u64().unwrap_or(50).clamp(1, 1000) as usize;
    let mut search = Search {
        query,
        root: &project,
        max,
        matches: Vec::new(),
        files: 0,
    };
    search.folder(&project.join(under));
    Ok(serde_json::json!({
        "matches": search.matches,
        "files_read": search.files,
        "truncated": search.matches.len() >= max,
    }))
}

fn main() {
    match answer() {
        Ok(found) => println!("{found}"),
        Err(error) => {
            eprintln!("{error}");
            std::process::exit(1);
        }
    }
}
