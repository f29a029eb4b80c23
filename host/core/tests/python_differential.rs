//! The `python/ast` parser component against CPython's own `ast`.
//!
//! `tests/differential/python_literals.py` says, for each file, which
//! module-level assignments `ast.literal_eval` accepts and their JSON
//! values. The component must report exactly those names, in the same
//! order, with the same values, over the hand-made corpus in
//! `tests/fixtures/python-corpus/` and every module of the Python standard
//! library installed here. The one allowed difference is a value the
//! component leaves out with a warning naming why (a `\N{...}` escape, which
//! needs the Unicode name table the component does not carry).

mod common;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use rye_components::{ParseRequest, PluginKind};
use serde_json::{Map, Value};

fn python() -> Option<PathBuf> {
    ["python3", "python"]
        .into_iter()
        .map(PathBuf::from)
        .find(|p| {
            Command::new(p)
                .arg("--version")
                .output()
                .is_ok_and(|o| o.status.success())
        })
}

fn python_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name();
        if path.is_dir() && name != "site-packages" && name != "__pycache__" {
            python_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "py") {
            out.push(path);
        }
    }
}

/// Every array sorted by its JSON text, for values holding sets.
fn unordered(value: &Value) -> Value {
    match value {
        Value::Array(items) => {
            let mut items: Vec<Value> = items.iter().map(unordered).collect();
            items.sort_by_key(|v| v.to_string());
            Value::Array(items)
        }
        Value::Object(map) => {
            Value::Object(map.iter().map(|(k, v)| (k.clone(), unordered(v))).collect())
        }
        other => other.clone(),
    }
}

#[test]
fn python_parser_agrees_with_cpython_ast() {
    let Some(python) = python() else {
        rye_test_artifacts::skip(
            "the differential test of python/ast",
            "no python3 (CPython) on this machine",
        );
        return;
    };
    let repo = common::repo();
    let mut corpus = Vec::new();
    python_files(&repo.join("tests/fixtures/python-corpus"), &mut corpus);
    let handmade = corpus.len();
    let stdlib = Command::new(&python)
        .args([
            "-c",
            "import sysconfig; print(sysconfig.get_paths()['stdlib'])",
        ])
        .output()
        .unwrap();
    let stdlib = PathBuf::from(String::from_utf8(stdlib.stdout).unwrap().trim());
    python_files(&stdlib, &mut corpus);
    assert!(handmade >= 5, "the hand-made corpus is missing");

    let mut reference = Command::new(&python)
        .arg(repo.join("tests/differential/python_literals.py"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let list: String = corpus
        .iter()
        .map(|p| format!("{}\n", p.display()))
        .collect();
    let mut stdin = reference.stdin.take().unwrap();
    let writer = std::thread::spawn(move || stdin.write_all(list.as_bytes()));
    let output = reference.wait_with_output().unwrap();
    writer.join().unwrap().unwrap();
    assert!(output.status.success(), "the reference script failed");

    let user = tempfile::tempdir().unwrap();
    let rye = common::rye(user.path());
    let spaces = rye.spaces(None);
    let parser = rye
        .parser_component(&spaces, "python/ast")
        .unwrap()
        .unwrap();

    let (mut compared, mut skipped) = (0, 0);
    let mut failures = Vec::new();
    for line in String::from_utf8(output.stdout).unwrap().lines() {
        let reference: Value = serde_json::from_str(line).unwrap();
        let path = reference["path"].as_str().unwrap();
        if reference.get("error").is_some() {
            skipped += 1;
            continue;
        }
        let content = std::fs::read_to_string(path).unwrap();
        let request = ParseRequest {
            kind: PluginKind::Tool,
            item_id: "corpus",
            file_name: "corpus.py",
            content: &content,
        };
        let parsed = match rye.components().parse(&parser, &request).unwrap() {
            Ok(parsed) => parsed,
            Err(failure) => {
                failures.push(format!(
                    "{path}: CPython parses it, the component says {failure}"
                ));
                continue;
            }
        };
        compared += 1;
        let expected = reference["document"].as_object().unwrap();
        let sets: Vec<&str> = reference["unordered"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap())
            .collect();
        let warned = |name: &str| {
            parsed.diagnostics.iter().any(|d| {
                d.rule == "python/no-json-form"
                    && d.message.starts_with(&format!("`{name}`"))
                    && d.message.contains("\\N{")
            })
        };
        let kept: Map<String, Value> = expected
            .iter()
            .filter(|(k, _)| !warned(k))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let got = &parsed.document;
        if kept.keys().ne(got.keys()) {
            let want: Vec<_> = kept.keys().collect();
            let have: Vec<_> = got.keys().collect();
            failures.push(format!(
                "{path}: names differ\n  CPython:   {want:?}\n  component: {have:?}"
            ));
            continue;
        }
        for (name, want) in &kept {
            let have = &got[name];
            let same = if sets.contains(&name.as_str()) {
                unordered(want) == unordered(have)
            } else {
                want == have
            };
            if !same {
                failures.push(format!("{path}: {name}: CPython {want}, component {have}"));
            }
        }
    }
    eprintln!("compared {compared} files with CPython ({skipped} skipped: CPython rejects them)");
    assert!(
        failures.is_empty(),
        "{} differences:\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert!(
        compared >= handmade - 1,
        "too few files compared: {compared}"
    );
    if stdlib.is_dir() {
        assert!(
            compared > 500,
            "the standard library should give hundreds of files, compared {compared}"
        );
    }
}
