//! Golden tests: every item under `tests/fixtures/golden/.ai/` is loaded
//! through the real parser components, and its metadata, parsed document,
//! diagnostics and parse error are compared with
//! `tests/fixtures/golden/expected/<kind>/<id>.json`.
//!
//! After an intended change, regenerate the expected files with
//! `BLESS=1 cargo test -p rye-host --test golden` and review the diff.

mod common;

use rye_host::{ItemKind, LoadRequest, Space};
use serde_json::{Value, json};

#[test]
fn fixtures_parse_to_their_golden_json() {
    let fixtures = common::repo().join("tests/fixtures/golden");
    let user = tempfile::tempdir().unwrap();
    let rye = common::rye(user.path());
    let bless = std::env::var_os("BLESS").is_some();

    let mut checked = 0;
    let mut failures = Vec::new();
    for kind in [ItemKind::Directive, ItemKind::Tool, ItemKind::Knowledge] {
        let dir = fixtures.join(".ai").join(kind.folder());
        for entry in walk(&dir) {
            let relative = entry
                .strip_prefix(&dir)
                .unwrap()
                .to_str()
                .unwrap()
                .to_owned();
            let id = relative.rsplit_once('.').unwrap().0.to_owned();
            let loaded = rye
                .load(&LoadRequest {
                    source: Some(Space::Project),
                    project: Some(fixtures.clone()),
                    ..LoadRequest::new(kind, id.clone())
                })
                .unwrap_or_else(|e| panic!("{kind} {id}: {e}"));
            let mut metadata = loaded.metadata.clone();
            metadata.remove("path");
            let actual = json!({
                "metadata": metadata,
                "parsed": loaded.parsed,
                "diagnostics": loaded.diagnostics,
                "parse_error": loaded.parse_error,
            });
            let expected_path = fixtures
                .join("expected")
                .join(kind.as_str())
                .join(format!("{id}.json"));
            let rendered = serde_json::to_string_pretty(&actual).unwrap() + "\n";
            if bless {
                std::fs::create_dir_all(expected_path.parent().unwrap()).unwrap();
                std::fs::write(&expected_path, &rendered).unwrap();
            } else {
                match std::fs::read_to_string(&expected_path) {
                    Ok(expected) if serde_json::from_str::<Value>(&expected).unwrap() == actual => {}
                    Ok(expected) => failures.push(format!(
                        "{kind} {id} differs from {}:\n--- expected\n{expected}\n--- actual\n{rendered}",
                        expected_path.display()
                    )),
                    Err(_) => failures.push(format!("{} is missing; run with BLESS=1", expected_path.display())),
                }
            }
            checked += 1;
        }
    }
    assert!(checked >= 10, "only {checked} fixtures found");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(walk(&path));
        } else {
            out.push(path);
        }
    }
    out.sort();
    out
}
