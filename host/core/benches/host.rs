//! `cargo bench -p rye-host --bench host`: the speed targets of the host.
//!
//! 1. A typical Python tool parsed by the `python/ast` component, warm
//!    (pre-instantiated; a fresh store per call, no parse cache).
//! 2. Engine start to first parse with a warm on-disk component cache, per
//!    system parser (what a new process pays).
//! 3. Search over 10,000 generated items, warm (index built), and the cold
//!    first search that builds it.
//!
//! Prints medians and 90th percentiles; results are kept in BENCHMARKS.md.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rye_components::{ComponentHost, HostConfig, ParseRequest, PluginKind, World};
use rye_host::{IntegrityPolicy, Rye, RyeConfig, SearchRequest};

const TOOL: &str = r#"#!/usr/bin/env python3
# rye:signed:2026-01-02T03:04:05Z:0000000000000000000000000000000000000000000000000000000000000000:AAAA:0123456789abcdef
"""Count words in a text, optionally ignoring short ones."""

import json
import sys

__version__ = "1.2.0"
__tool_type__ = "python"
__executor_id__ = "rye/core/runtimes/python/script"
__category__ = "demo/text"
__tool_description__ = "Count words in a text"

CONFIG_SCHEMA = {
    "type": "object",
    "properties": {
        "text": {"type": "string", "description": "The text to count"},
        "min_length": {"type": "integer", "default": 1},
    },
    "required": ["text"],
}


def main():
    params = json.load(sys.stdin)
    words = [w for w in params["text"].split() if len(w) >= params.get("min_length", 1)]
    print(json.dumps({"count": len(words)}))


if __name__ == "__main__":
    main()
"#;

struct Stats {
    median: Duration,
    p90: Duration,
    min: Duration,
}

fn measure(runs: usize, mut f: impl FnMut()) -> Stats {
    let mut times: Vec<Duration> = (0..runs)
        .map(|_| {
            let started = Instant::now();
            f();
            started.elapsed()
        })
        .collect();
    times.sort();
    Stats {
        median: times[runs / 2],
        p90: times[runs * 9 / 10],
        min: times[0],
    }
}

fn report(name: &str, s: &Stats) {
    println!(
        "{name:<58} median {:>10.1?}  p90 {:>10.1?}  min {:>10.1?}",
        s.median, s.p90, s.min
    );
}

fn config(cache: &Path) -> RyeConfig {
    RyeConfig {
        cache_dir: cache.to_owned(),
        user_base: None,
        system_base: None,
        components: HostConfig {
            cache_dir: Some(cache.join("components")),
            cache_key_file: Some(cache.join("cache.key")),
            pooling: std::env::var("RYE_POOLING").map_or(true, |v| v != "0"),
            ..HostConfig::default()
        },
        watch: true,
        snapshot: false,
        integrity: IntegrityPolicy::default(),
        trusted_keys: Vec::new(),
        signing_key_dir: None,
        executable: None,
        record_threads: true,
    }
}

fn main() {
    // As the `rye` binary does: no stack traces for library errors (see
    // quiet_library_backtraces in host/cli/src/main.rs).
    if std::env::var_os("RUST_LIB_BACKTRACE").is_none() {
        // SAFETY: first thing in main, before any other thread exists.
        unsafe { std::env::set_var("RUST_LIB_BACKTRACE", "0") };
    }
    if std::env::args().any(|a| a == "profile-start") {
        let started = Instant::now();
        while started.elapsed() < Duration::from_secs(5) {
            ComponentHost::new(HostConfig::default()).unwrap();
        }
        return;
    }
    let cache = tempfile::tempdir().unwrap();
    let rye = Rye::new(config(cache.path())).unwrap();
    println!("pooling allocator: {}", rye.components().pooling());
    let system = rye.system_base().join(".ai/parsers");

    // 1. Warm parse through the component.
    let python = rye
        .components()
        .load(&system.join("python/ast.wasm"), World::Parser)
        .unwrap();
    let request = ParseRequest {
        kind: PluginKind::Tool,
        item_id: "demo/text/count",
        file_name: "count.py",
        content: TOOL,
    };
    for _ in 0..200 {
        rye.components().parse(&python, &request).unwrap().unwrap();
    }
    if std::env::args().any(|a| a == "profile-parse") {
        let started = Instant::now();
        while started.elapsed() < Duration::from_secs(5) {
            rye.components().parse(&python, &request).unwrap().unwrap();
        }
        return;
    }
    report(
        "parse typical Python tool (warm, fresh store per call)",
        &measure(5000, || {
            rye.components().parse(&python, &request).unwrap().unwrap();
        }),
    );

    // The floor: the same call into a component that does almost nothing
    // (the markdown/frontmatter parser on a one-line entry).
    let trivial = rye
        .components()
        .load(&system.join("markdown/frontmatter.wasm"), World::Parser)
        .unwrap();
    let tiny = ParseRequest {
        kind: PluginKind::Knowledge,
        item_id: "k",
        file_name: "k.md",
        content: "body only\n",
    };
    report(
        "call overhead: tiny input to a parser (fresh store per call)",
        &measure(5000, || {
            rye.components().parse(&trivial, &tiny).unwrap().unwrap();
        }),
    );

    report(
        "engine start alone (linker, epoch thread, allocator)",
        &measure(30, || {
            ComponentHost::new(HostConfig::default()).unwrap();
        }),
    );

    // 2. Engine start to first parse, warm on-disk cache, per parser.
    let parsers: Vec<(PathBuf, &str, &str)> = vec![
        (system.join("python/ast.wasm"), "count.py", TOOL),
        (
            system.join("yaml/yaml.wasm"),
            "r.yaml",
            "version: '1.0.0'\nexecutor_id: x\n",
        ),
        (
            system.join("javascript/javascript.wasm"),
            "t.js",
            "export const __version__ = '1';\n",
        ),
        (
            system.join("shell/shell.wasm"),
            "t.sh",
            "#!/bin/sh\n# __version__ = \"1\"\n",
        ),
        (
            system.join("markdown/xml.wasm"),
            "d.md",
            "```xml\n<directive name=\"d\" version=\"1\"/>\n```\n",
        ),
        (
            system.join("markdown/frontmatter.wasm"),
            "k.md",
            "```yaml\nname: k\n```\nbody\n",
        ),
    ];
    let components_cache = cache.path().join("components");
    for (path, file_name, content) in &parsers {
        let name = path.strip_prefix(&system).unwrap().display().to_string();
        let stats = measure(30, || {
            let host = ComponentHost::new(HostConfig {
                cache_dir: Some(components_cache.clone()),
                cache_key_file: Some(cache.path().join("cache.key")),
                ..HostConfig::default()
            })
            .unwrap();
            let component = host.load(path, World::Parser).unwrap();
            let request = ParseRequest {
                kind: PluginKind::Tool,
                item_id: "x",
                file_name,
                content,
            };
            host.parse(&component, &request).unwrap().unwrap();
        });
        report(
            &format!("engine start to first parse, warm disk cache: {name}"),
            &stats,
        );
    }

    // 3. Search over 10,000 items.
    let project = tempfile::tempdir().unwrap();
    generate(project.path(), 10_000);
    let search = |query: &str| {
        rye.search(&SearchRequest::new("all", query).project(project.path()))
            .unwrap()
    };
    if std::env::args().any(|a| a == "profile-search") {
        search("alpha");
        let started = Instant::now();
        while started.elapsed() < Duration::from_secs(8) {
            search("alpha");
        }
        return;
    }
    let started = Instant::now();
    let first = search("alpha");
    println!(
        "{:<58} {:>17.1?}  ({} of {} items match)",
        "search 10,000 items, cold (parses every item)",
        started.elapsed(),
        first.total,
        10_000
    );
    // What a warm search would cost without the watch cache: listing the
    // files (a walk and a stat per file). The CLI, a new process each
    // time, pays this.
    let spaces = rye.spaces(Some(project.path()));
    let extensions: Vec<(rye_host::ItemKind, Vec<String>)> = [
        (rye_host::ItemKind::Tool, vec![".py".into(), ".yaml".into()]),
        (rye_host::ItemKind::Knowledge, vec![".md".into()]),
        (rye_host::ItemKind::Directive, vec![".md".into()]),
    ]
    .into();
    report(
        "list 10,000 item files, no watch cache (walk and stat)",
        &measure(20, || {
            for (kind, exts) in &extensions {
                spaces.list(*kind, rye_host::Space::Project, exts).unwrap();
            }
        }),
    );
    for query in ["alpha", "retry OR budget", "zzz-no-match", ""] {
        let stats = measure(20, || {
            search(query);
        });
        report(&format!("search 10,000 items, warm: {query:?}"), &stats);
    }
}

/// `count` items across tools (.py, .yaml), knowledge and directives, in
/// nested folders.
fn generate(project: &Path, count: usize) {
    let words = [
        "alpha", "retry", "budget", "deploy", "parse", "index", "cache", "spaces",
    ];
    for i in 0..count {
        let word = words[i % words.len()];
        let folder = format!("gen/group{:02}/sub{}", i % 50, i % 7);
        let (relative, content) = match i % 4 {
            0 => (
                format!(".ai/tools/{folder}/tool{i}.py"),
                format!(
                    "\"\"\"Tool {i} about {word}.\"\"\"\n__version__ = \"1.0.{i}\"\n__executor_id__ = \"rye/core/runtimes/python/script\"\nCONFIG_SCHEMA = {{\"type\": \"object\", \"properties\": {{\"n\": {{\"type\": \"integer\"}}}}}}\n"
                ),
            ),
            1 => (
                format!(".ai/tools/{folder}/tool{i}.yaml"),
                format!(
                    "version: \"1.0.{i}\"\ntool_type: runtime\nexecutor_id: rye/core/primitives/execute\ndescription: Runtime {i} for {word}\nconfig:\n  command: echo\n  args: [\"{i}\"]\n"
                ),
            ),
            2 => (
                format!(".ai/knowledge/{folder}/entry{i}.md"),
                format!(
                    "```yaml\nname: entry{i}\ntitle: Entry {i} on {word}\nentry_type: note\nversion: \"1.0.0\"\ntags: [{word}, generated]\n```\n\nNotes about {word} number {i}.\n"
                ),
            ),
            _ => (
                format!(".ai/directives/{folder}/directive{i}.md"),
                format!(
                    "# Directive {i}\n\n```xml\n<directive name=\"directive{i}\" version=\"1.0.0\">\n  <metadata><description>Do {word} things</description><category>{folder}</category></metadata>\n  <inputs><input name=\"x\" type=\"string\">X</input></inputs>\n</directive>\n```\n\nFollow the {word} steps.\n"
                ),
            ),
        };
        let path = project.join(relative);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, content).unwrap();
    }
}
