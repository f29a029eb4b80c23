//! `cargo bench -p rye --bench validate`: `rye validate` over generated
//! trees, as CI runs it: the real binary, `--require-signed`, a warm
//! component cache, three validators (the system's `rye/standard`, the
//! policy example, and a naming validator), every item signed.
//!
//! Trees of 500 to 5,000 items: 60% Python tools (each with its chain of
//! three elements), 20% directives, 20% knowledge entries. Each size is
//! run five times after one warm-up run; the median is reported.

#[path = "../tests/common/mod.rs"]
mod common;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

const SIZES: [usize; 4] = [500, 1_000, 2_000, 5_000];
const RUNS: usize = 5;

fn rye(home: &Path, cache: &Path, project: &Path, args: &[&str]) -> std::process::Output {
    let out = common::clean_env(
        Command::new(env!("CARGO_BIN_EXE_rye")).args(args),
        project,
        home,
        cache,
    )
    .env("RYE_LOG", "error")
    .output()
    .unwrap();
    assert!(
        out.status.code().is_some_and(|c| c <= 1),
        "rye {args:?} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn write(root: &Path, relative: &str, text: &str) {
    let path = root.join(relative);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

/// A tree of `n` items in `root`, spread over folders of 50.
fn generate(root: &Path, n: usize) {
    for i in 0..n {
        let folder = format!("gen/f{}", i / 50);
        match i % 5 {
            0..=2 => write(
                root,
                &format!(".ai/tools/{folder}/tool_{i}.py"),
                &format!(
                    "\"\"\"Generated tool {i}.\"\"\"\n__version__ = \"1.0.{i}\"\n__tool_type__ = \"python\"\n\
                     __executor_id__ = \"rye/core/runtimes/python/script\"\n__category__ = \"{folder}\"\n\
                     CONFIG_SCHEMA = {{\"type\": \"object\", \"properties\": {{\"n\": {{\"type\": \"integer\", \"minimum\": 0}}}}, \"required\": [\"n\"]}}\n\
                     import json, sys\nif __name__ == \"__main__\":\n    print(json.dumps({{\"i\": {i}}}))\n"
                ),
            ),
            3 => write(
                root,
                &format!(".ai/directives/{folder}/directive_{i}.md"),
                &format!(
                    "# Directive {i}\n\n```xml\n<directive name=\"directive_{i}\" version=\"1.0.0\">\n  <metadata>\n\
                     <description>Generated directive {i}.</description>\n    <category>{folder}</category>\n\
                     <author>bench</author>\n    <permissions>\n      <search>*</search>\n    </permissions>\n\
                     </metadata>\n  <inputs>\n    <input name=\"topic\" type=\"string\" required=\"true\">What to look at</input>\n\
                     </inputs>\n</directive>\n```\n\nLook at {{topic}} and report.\n"
                ),
            ),
            _ => write(
                root,
                &format!(".ai/knowledge/{folder}/entry_{i}.md"),
                &format!(
                    "```yaml\nname: entry_{i}\ntitle: Entry {i}\nentry_type: fact\nversion: \"1.0.0\"\n\
                     category: {folder}\ntags: [generated, bench]\n```\n\nFact number {i}.\n"
                ),
            ),
        }
    }
}

fn main() {
    let home = tempfile::tempdir().unwrap();
    let cache = tempfile::tempdir().unwrap();
    let (h, c) = (home.path(), cache.path());
    println!("rye validate --require-signed, 3 validators, warm component cache, median of {RUNS}");
    println!(
        "{:>6} {:>10} {:>12} {:>8}",
        "items", "median", "items/s", "chains"
    );
    for n in SIZES {
        let project = tempfile::tempdir().unwrap();
        let p = project.path();
        generate(p, n);
        let validators = p.join(".ai/validators");
        std::fs::create_dir_all(&validators).unwrap();
        std::fs::copy(
            rye_test_artifacts::POLICY_VALIDATOR,
            validators.join("policy.wasm"),
        )
        .unwrap();
        std::fs::copy(
            rye_test_artifacts::VALIDATOR_NAMING,
            validators.join("naming.wasm"),
        )
        .unwrap();
        if n == SIZES[0] {
            rye(h, c, p, &["keys", "generate"]);
            rye(h, c, p, &["keys", "trust"]);
        }
        rye(h, c, p, &["sign", "--all"]);
        let path = p.to_str().unwrap();
        let args = [
            "--json",
            "validate",
            path,
            "--require-signed",
            "--quiet",
            "--format",
            "json",
        ];
        // Warm-up, and a check that the tree is what it claims to be.
        let report: serde_json::Value =
            serde_json::from_slice(&rye(h, c, p, &args).stdout).unwrap();
        assert_eq!(report["items"], n, "{report}");
        assert_eq!(report["validators"].as_array().unwrap().len(), 3);
        let errors: Vec<_> = report["findings"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|f| f["severity"] == "error")
            .collect();
        assert!(
            errors.is_empty(),
            "a generated tree should be clean: {errors:#?}"
        );
        let mut times: Vec<Duration> = (0..RUNS)
            .map(|_| {
                let started = Instant::now();
                rye(h, c, p, &args);
                started.elapsed()
            })
            .collect();
        times.sort();
        let median = times[RUNS / 2];
        println!(
            "{n:>6} {:>8.0}ms {:>12.0} {:>8}",
            median.as_secs_f64() * 1e3,
            n as f64 / median.as_secs_f64(),
            report["chains"]
        );
    }
}
