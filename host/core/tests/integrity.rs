//! Integrity through the whole host: signed items and components run,
//! anything unsigned, modified, untrusted or stale is refused with its own
//! error, before it runs.

mod common;

use std::path::Path;
use std::sync::Arc;

use common::{sign_file, test_key, write, write_unsigned};
use rye_host::rye_integrity::{self, Keypair};
use rye_host::{ExecuteRequest, IntegrityPolicy, ItemKind, LoadRequest, Rye, RyeConfig, Space};
use rye_test_artifacts as artifacts;
use serde_json::{Value, json};

const SCRIPT: &str = "__version__ = '1.0.0'\n__executor_id__ = 'rye/core/runtimes/python/script'\nimport json\nif __name__ == '__main__':\n    print(json.dumps({'ok': 1}))\n";

fn host(config: RyeConfig) -> Arc<Rye> {
    Arc::new(Rye::new(config).unwrap())
}

fn run(rye: &Arc<Rye>, project: &Path, kind: ItemKind, id: &str, trace: bool) -> Value {
    let request = ExecuteRequest {
        project: Some(project.to_owned()),
        trace,
        ..ExecuteRequest::new(kind, id)
    };
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(rye.execute(&request))
}

fn tool(rye: &Arc<Rye>, project: &Path, id: &str) -> Value {
    run(rye, project, ItemKind::Tool, id, false)
}

fn refused(result: &Value, needle: &str) -> String {
    assert_eq!(result["status"], "error", "{result:#}");
    assert_eq!(result["error_type"], "integrity", "{result:#}");
    let error = result["error"].as_str().unwrap().to_owned();
    assert!(error.contains(needle), "{needle:?} not in: {error}");
    error
}

fn flip_byte(path: &Path, needle: &str, replacement: &str) {
    let text = std::fs::read_to_string(path).unwrap();
    assert_eq!(needle.len(), replacement.len());
    let at = text.rfind(needle).expect("the text to change");
    let mut bytes = text.into_bytes();
    bytes[at..at + needle.len()].copy_from_slice(replacement.as_bytes());
    std::fs::write(path, bytes).unwrap();
}

#[test]
fn signed_files_of_every_type_load_verified_and_still_parse() {
    let (project, user) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let p = project.path();
    let files = [
        (ItemKind::Tool, "demo/script", ".ai/tools/demo/script.py", format!("#!/usr/bin/env python3\n{SCRIPT}")),
        (ItemKind::Tool, "demo/runtime", ".ai/tools/demo/runtime.yaml", "version: '1.0.0'\nexecutor_id: rye/core/primitives/execute\n".into()),
        (ItemKind::Tool, "demo/data", ".ai/tools/demo/data.json", "{\"version\": \"1.0.0\", \"executor_id\": null}\n".into()),
        (ItemKind::Tool, "demo/page", ".ai/tools/demo/page.js", "export const __version__ = '1.0.0';\nexport const __executor_id__ = 'rye/core/runtimes/node/node';\n".into()),
        (ItemKind::Tool, "demo/job", ".ai/tools/demo/job.sh", "#!/bin/bash\n# __version__ = \"1.0.0\"\n# __executor_id__ = \"rye/core/runtimes/bash/bash\"\necho hi\n".into()),
        (ItemKind::Directive, "demo/greet", ".ai/directives/demo/greet.md", "# Greet\n\n```xml\n<directive name=\"greet\" version=\"1.0.0\">\n  <metadata><description>Greet</description></metadata>\n</directive>\n```\n\nBody.\n".into()),
        (ItemKind::Knowledge, "demo/note", ".ai/knowledge/demo/note.md", "```yaml\nname: note\nversion: 1.0.0\ntitle: A note\n```\n\nThe body.\n".into()),
        (ItemKind::Knowledge, "demo/facts", ".ai/knowledge/demo/facts.yaml", "name: facts\nversion: 1.0.0\ntitle: Facts\n".into()),
    ];
    for (_, _, path, content) in &files {
        write(p, path, content);
    }
    let rye = host(common::config(user.path(), None));
    for (kind, id, path, _) in &files {
        let loaded = rye
            .load(&LoadRequest {
                project: Some(p.to_owned()),
                ..LoadRequest::new(*kind, *id)
            })
            .unwrap();
        assert_eq!(loaded.parse_error, None, "{path}");
        assert_eq!(
            loaded.metadata["version"], "1.0.0",
            "{path}: {:#?}",
            loaded.metadata
        );
        assert_eq!(
            loaded.signature["status"], "verified",
            "{path}: {}",
            loaded.signature
        );
        assert_eq!(loaded.signature["rule"], "whole", "{path}");
        assert_eq!(loaded.signature["fingerprint"], test_key().fingerprint());
        let first = loaded.content.lines().next().unwrap();
        let second = loaded.content.lines().nth(1).unwrap();
        assert!(
            first.contains("rye:signed:v2:")
                || (first.starts_with("#!/") && second.starts_with("# rye:signed:v2:")),
            "{path}: {}",
            loaded.content
        );
    }
    assert_eq!(tool(&rye, p, "demo/script")["data"], json!({"ok": 1}));
    let checks = rye.verify_paths(Some(p), &[p.join(".ai")]);
    assert_eq!(checks.len(), files.len(), "{checks:#?}");
    assert!(checks.iter().all(|c| c.status == "verified"), "{checks:#?}");
}

#[test]
fn a_one_byte_change_is_refused_naming_both_hashes() {
    let (project, user) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let p = project.path();
    let path = write(p, ".ai/tools/demo/script.py", SCRIPT);
    let directive = write(
        p,
        ".ai/directives/demo/d.md",
        "```xml\n<directive name=\"d\" version=\"1.0.0\"><metadata><description>D</description></metadata></directive>\n```\n\nDo the thing.\n",
    );
    let rye = host(common::config(user.path(), None));
    assert_eq!(tool(&rye, p, "demo/script")["status"], "success");
    assert_eq!(
        run(&rye, p, ItemKind::Directive, "demo/d", false)["status"],
        "success"
    );

    let signed_hash = std::fs::read_to_string(&path)
        .unwrap()
        .split(':')
        .nth(6)
        .unwrap()[..16]
        .to_owned();
    flip_byte(&path, "'ok': 1", "'ok': 2");
    let error = refused(
        &tool(&rye, p, "demo/script"),
        "content modified since signing",
    );
    assert!(error.contains(&signed_hash), "{error}");
    assert!(error.contains("demo/script.py"), "{error}");
    assert_eq!(error.matches('…').count(), 2, "both hash prefixes: {error}");

    // Unlike the original rule, the text after the <directive> block is
    // covered too.
    flip_byte(&directive, "thing", "THING");
    refused(
        &run(&rye, p, ItemKind::Directive, "demo/d", false),
        "content modified since signing",
    );
}

#[test]
fn unsigned_and_untrusted_files_are_refused_each_with_its_error() {
    let (project, user) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let p = project.path();
    write_unsigned(p, ".ai/tools/demo/unsigned.py", SCRIPT);
    let stranger = Keypair::generate().unwrap();
    let format = rye_integrity::format_for(ItemKind::Tool, "x.py", &[]).unwrap();
    let foreign =
        rye_integrity::sign_text(SCRIPT, &format, &stranger, std::time::SystemTime::now()).unwrap();
    write_unsigned(p, ".ai/tools/demo/foreign.py", foreign);
    let rye = host(common::config(user.path(), None));

    refused(
        &tool(&rye, p, "demo/unsigned"),
        "unsigned: the file has no signature line",
    );
    let error = refused(&tool(&rye, p, "demo/foreign"), "untrusted key");
    assert!(error.contains(stranger.fingerprint()), "{error}");

    // A runtime in the chain is verified like the tool.
    write_unsigned(
        p,
        ".ai/tools/demo/rt.yaml",
        "executor_id: rye/core/primitives/execute\n",
    );
    write(p, ".ai/tools/demo/via.py", "__executor_id__ = 'demo/rt'\n");
    let error = refused(&tool(&rye, p, "demo/via"), "unsigned");
    assert!(error.contains("demo/rt.yaml"), "{error}");
}

#[test]
fn unsigned_project_items_run_only_where_the_policy_allows_and_say_so() {
    let (project, user) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let p = project.path();
    write_unsigned(p, ".ai/tools/demo/draft.py", SCRIPT);
    write_unsigned(user.path(), ".ai/tools/mine/draft.py", SCRIPT);
    let mut config = common::config(user.path(), None);
    config.integrity = IntegrityPolicy {
        allow_unsigned_project: true,
        ..IntegrityPolicy::default()
    };
    let rye = host(config);
    let result = tool(&rye, p, "demo/draft");
    assert_eq!(result["status"], "success", "{result:#}");
    let warnings = result["warnings"].to_string();
    assert!(
        warnings.contains("unsigned") && warnings.contains("demo/draft"),
        "{warnings}"
    );
    // Only the project space: a user item still needs its signature.
    refused(&tool(&rye, p, "mine/draft"), "unsigned");
    // And a signed project file that was modified is still refused.
    let signed = write(p, ".ai/tools/demo/signed.py", SCRIPT);
    flip_byte(&signed, "'ok': 1", "'ok': 3");
    refused(&tool(&rye, p, "demo/signed"), "content modified");
}

#[test]
fn trusted_key_files_vouch_only_when_they_hold() {
    let (project, user) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let p = project.path();
    let keys = tempfile::tempdir().unwrap();
    let mine = Keypair::generate().unwrap();
    mine.save(keys.path()).unwrap();
    let mut config = common::config(user.path(), None);
    config.trusted_keys.clear();
    config.signing_key_dir = Some(keys.path().to_owned());
    let rye = host(config);
    let now = std::time::SystemTime::now();
    let format = rye_integrity::format_for(ItemKind::Tool, "x.py", &[]).unwrap();
    let sign_as = |key: &Keypair, id: &str| {
        let text = rye_integrity::sign_text(SCRIPT, &format, key, now).unwrap();
        write_unsigned(p, &format!(".ai/tools/{id}.py"), text);
    };

    // My key, trusted in the user space by a self-signed file.
    sign_as(&mine, "demo/mine");
    refused(&tool(&rye, p, "demo/mine"), "untrusted key");
    rye.trust_key(Some(p), mine.public(), "local", Space::User)
        .unwrap();
    assert_eq!(tool(&rye, p, "demo/mine")["status"], "success");

    // A file whose PEM is not the key of its fingerprint is ignored.
    let liar = Keypair::generate().unwrap();
    let text = rye_integrity::trusted_key_toml(liar.public(), "liar", &mine, now)
        .unwrap()
        .replace(
            liar.public().pem(),
            Keypair::generate().unwrap().public().pem(),
        );
    write_unsigned(
        user.path(),
        &format!(".ai/config/keys/trusted/{}.toml", liar.fingerprint()),
        text,
    );
    sign_as(&liar, "demo/liar");
    refused(&tool(&rye, p, "demo/liar"), "untrusted key");
    let spaces = rye.spaces(Some(p));
    let ignored = rye.trust_store(&spaces).ignored().to_vec();
    assert!(
        ignored.iter().any(
            |(path, why)| path.ends_with(format!("{}.toml", liar.fingerprint()))
                && why.contains("not the declared")
        ),
        "{ignored:?}"
    );

    // A project cannot vouch for its own key...
    let team = Keypair::generate().unwrap();
    let self_signed = rye_integrity::trusted_key_toml(team.public(), "team", &team, now).unwrap();
    write_unsigned(
        p,
        &format!(".ai/config/keys/trusted/{}.toml", team.fingerprint()),
        self_signed,
    );
    sign_as(&team, "demo/team");
    refused(&tool(&rye, p, "demo/team"), "untrusted key");
    // ...but a project entry signed by a key the user trusts counts.
    rye.trust_key(Some(p), team.public(), "team", Space::Project)
        .unwrap();
    assert_eq!(tool(&rye, p, "demo/team")["status"], "success");
}

#[test]
fn a_tampered_adapter_component_is_refused_before_it_is_compiled() {
    let (project, user) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let p = project.path();
    let adapter = p.join(".ai/adapters/examples/shebang.wasm");
    common::copy_signed(artifacts::SHEBANG_ADAPTER, &adapter);
    write(
        p,
        ".ai/tools/shebang/runtime.yaml",
        "executor_id: rye/core/primitives/execute\nadapter: examples/shebang\n",
    );
    write(
        p,
        ".ai/tools/demo/echo.sh",
        "#!/bin/sh\n# __executor_id__ = \"shebang/runtime\"\necho '{\"via\": \"shebang\"}'\n",
    );
    let rye = host(common::config(user.path(), None));
    assert_eq!(
        tool(&rye, p, "demo/echo")["data"],
        json!({"via": "shebang"})
    );

    // One byte changed in a custom section: still a valid component, but
    // not the one signed.
    let mut bytes = std::fs::read(&adapter).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 1;
    std::fs::write(&adapter, &bytes).unwrap();
    let error = refused(
        &tool(&rye, p, "demo/echo"),
        "content modified since signing",
    );
    assert!(error.contains("adapters/examples/shebang.wasm"), "{error}");

    std::fs::remove_file(rye_integrity::detached_path(&adapter)).unwrap();
    std::fs::copy(artifacts::SHEBANG_ADAPTER, &adapter).unwrap();
    refused(&tool(&rye, p, "demo/echo"), "no detached signature");
}

#[test]
fn a_tampered_file_in_an_anchored_lib_stops_the_run() {
    let (project, user) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let p = project.path();
    write(p, ".ai/tools/demo/anchored/__init__.py", "");
    write(
        p,
        ".ai/tools/demo/anchored/main.py",
        "__executor_id__ = 'rye/core/runtimes/python/script'\nimport json, os, sys\n\
         sys.path.insert(0, os.path.join(os.path.dirname(__file__), 'lib'))\nimport helper\n\
         if __name__ == '__main__':\n    print(json.dumps({'answer': helper.ANSWER}))\n",
    );
    let helper = write(p, ".ai/tools/demo/anchored/lib/helper.py", "ANSWER = 42\n");
    let rye = host(common::config(user.path(), None));
    let result = run(&rye, p, ItemKind::Tool, "demo/anchored/main", true);
    assert_eq!(result["data"], json!({"answer": 42}), "{result:#}");
    let deps: Vec<&Value> = result["trace"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["step"] == "verify_deps")
        .collect();
    assert_eq!(deps[0]["files"], 3, "{deps:?}");

    flip_byte(&helper, "42", "43");
    let error = refused(
        &tool(&rye, p, "demo/anchored/main"),
        "content modified since signing",
    );
    assert!(error.contains("lib/helper.py"), "{error}");

    // A link out of the anchor is refused even when what it points at is
    // signed.
    sign_file(&helper);
    let outside = write(p, ".ai/tools/elsewhere/secret.py", "X = 1\n");
    #[cfg(unix)]
    {
        std::os::unix::fs::symlink(&outside, p.join(".ai/tools/demo/anchored/lib/link.py"))
            .unwrap();
        refused(&tool(&rye, p, "demo/anchored/main"), "symlink escape");
    }
}

#[test]
fn a_stale_lockfile_stops_the_run_until_refreshed() {
    let (project, user) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let p = project.path();
    let path = write(p, ".ai/tools/demo/script.py", SCRIPT);
    let rye = host(common::config(user.path(), None));
    let first = tool(&rye, p, "demo/script");
    assert_eq!(first["metadata"]["lockfile_created"], true, "{first:#}");
    let lockfile = p.join(".ai/lockfiles/demo/script@1.0.0.lock.json");
    let lock: Value = serde_json::from_str(&std::fs::read_to_string(&lockfile).unwrap()).unwrap();
    assert_eq!(lock["lockfile_version"], 1);
    assert_eq!(lock["root"]["tool_id"], "demo/script");
    let chain: Vec<&str> = lock["resolved_chain"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["item_id"].as_str().unwrap())
        .collect();
    assert_eq!(
        chain,
        [
            "demo/script",
            "rye/core/runtimes/python/script",
            "rye/core/primitives/execute"
        ]
    );
    assert_eq!(lock["resolved_chain"][1]["provider_id"], "rye-system");
    assert_eq!(
        tool(&rye, p, "demo/script")["metadata"]["lockfile_used"],
        true
    );

    // Changed and re-signed, but the pin still holds the old content.
    flip_byte(&path, "'ok': 1", "'ok': 5");
    sign_file(&path);
    let error = refused(&tool(&rye, p, "demo/script"), "stale lockfile");
    assert!(error.contains("rye lock demo/script --refresh"), "{error}");

    rye.lock(Some(p), "demo/script").unwrap();
    assert_eq!(tool(&rye, p, "demo/script")["data"], json!({"ok": 5}));
    assert_eq!(rye.locked_tools(Some(p)).unwrap(), ["demo/script"]);
}

#[test]
fn the_trace_reports_verification_of_every_element_and_the_adapter() {
    let (project, user) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let p = project.path();
    write(p, ".ai/tools/demo/script.py", SCRIPT);
    let rye = host(common::config(user.path(), None));
    let result = run(&rye, p, ItemKind::Tool, "demo/script", true);
    let events: Vec<&Value> = result["trace"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["step"] == "verify_integrity")
        .collect();
    assert_eq!(
        events.len(),
        4,
        "three elements and the adapter: {events:#?}"
    );
    assert_eq!(events[0]["fingerprint"], test_key().fingerprint());
    let system = events[1]["fingerprint"].as_str().unwrap();
    assert!(
        events[1..].iter().all(|e| e["status"] == "verified"
            && e["fingerprint"] == system
            && e["owner"] == "rye-system"),
        "{events:#?}"
    );
    assert_eq!(result["chain"][0]["signed_by"], test_key().fingerprint());
}

#[test]
fn signatures_made_by_the_original_system_verify_by_its_rule() {
    let fixture = common::repo().join("tests/fixtures/signing/original");
    let toml = std::fs::read_dir(fixture.join("trusted"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let (key, owner) =
        rye_integrity::read_public_key(&std::fs::read_to_string(&toml).unwrap()).unwrap();
    assert_eq!(owner.as_deref(), Some("github-ci"));
    let user = tempfile::tempdir().unwrap();
    let mut config = common::config(user.path(), None);
    config.trusted_keys = vec![(key.clone(), "github-ci".into())];
    let rye = host(config);
    let checks = rye.verify_paths(None, &[fixture.join(".ai"), toml.clone()]);
    assert_eq!(checks.len(), 6, "{checks:#?}");
    for check in &checks {
        assert_eq!(check.status, "verified", "{check:#?}");
        assert_eq!(check.fingerprint.as_deref(), Some(key.fingerprint()));
    }
    let warned: Vec<&str> = checks.iter().filter_map(|c| c.warning.as_deref()).collect();
    assert!(
        warned
            .iter()
            .any(|w| w.contains("only the <directive> block")),
        "{warned:?}"
    );
    assert!(
        warned.iter().any(|w| w.contains("front matter")),
        "{warned:?}"
    );

    // The original rule leaves the directive's body open, but not its block.
    let copy = tempfile::tempdir().unwrap();
    let greet = copy.path().join(".ai/directives/demo/greet.md");
    std::fs::create_dir_all(greet.parent().unwrap()).unwrap();
    std::fs::copy(fixture.join(".ai/directives/demo/greet.md"), &greet).unwrap();
    flip_byte(&greet, "unsigned", "UNSIGNED");
    assert_eq!(
        rye.verify_paths(None, std::slice::from_ref(&greet))[0].status,
        "verified"
    );
    flip_byte(&greet, "Greet someone", "Greet SOMEONE");
    assert_eq!(rye.verify_paths(None, &[greet])[0].status, "modified");
}

#[test]
fn config_files_may_be_unsigned_but_not_tampered() {
    let (project, user) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let p = project.path();
    write(
        p,
        ".ai/tools/demo/configured.py",
        "__executor_id__ = 'rye/core/runtimes/python/script'\n\
         CONFIG_RESOLVE = {'path': 'demo/settings.yaml', 'mode': 'first_match'}\nimport json, sys\n\
         if __name__ == '__main__':\n    print(json.dumps(json.load(sys.stdin)['resolved_config']))\n",
    );
    let settings = write_unsigned(p, ".ai/config/demo/settings.yaml", "level: 1\n");
    let rye = host(common::config(user.path(), None));
    assert_eq!(
        tool(&rye, p, "demo/configured")["data"],
        json!({"level": 1})
    );

    let format = rye_integrity::format_for(ItemKind::Config, "settings.yaml", &[]).unwrap();
    let signed = rye_integrity::sign_text(
        "level: 1\n",
        &format,
        test_key(),
        std::time::SystemTime::now(),
    )
    .unwrap();
    std::fs::write(&settings, signed).unwrap();
    assert_eq!(
        tool(&rye, p, "demo/configured")["data"],
        json!({"level": 1})
    );
    flip_byte(&settings, "level: 1", "level: 9");
    let result = tool(&rye, p, "demo/configured");
    assert_eq!(result["status"], "error");
    let error = result["error"].as_str().unwrap();
    assert!(
        error.contains("settings.yaml") && error.contains("content modified since signing"),
        "{error}"
    );
}

#[test]
fn signing_a_whole_space_leaves_json_data_alone() {
    let (project, user) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let p = project.path();
    write_unsigned(
        p,
        ".ai/tools/web/page/page.js",
        "export const __executor_id__ = 'rye/core/runtimes/node/node';\n",
    );
    let package = write_unsigned(
        p,
        ".ai/tools/web/page/package.json",
        "{\"name\": \"page\"}\n",
    );
    write_unsigned(p, ".ai/tools/demo/script.py", SCRIPT);
    common::copy_signed(
        artifacts::TOML_PARSER,
        &p.join(".ai/parsers/toml/toml.wasm"),
    );
    std::fs::remove_file(rye_integrity::detached_path(
        &p.join(".ai/parsers/toml/toml.wasm"),
    ))
    .unwrap();
    let keys = tempfile::tempdir().unwrap();
    Keypair::generate().unwrap().save(keys.path()).unwrap();
    let mut config = common::config(user.path(), None);
    config.signing_key_dir = Some(keys.path().to_owned());
    let rye = host(config);

    let outcomes = rye.sign_all(Some(p), Space::Project).unwrap();
    let signed: Vec<String> = outcomes
        .iter()
        .map(|o| {
            o.as_ref()
                .unwrap()
                .path
                .strip_prefix(p)
                .unwrap()
                .display()
                .to_string()
        })
        .collect();
    assert_eq!(
        signed,
        [
            ".ai/parsers/toml/toml.wasm",
            ".ai/tools/demo/script.py",
            ".ai/tools/web/page/page.js"
        ],
        "{outcomes:#?}"
    );
    assert!(
        !outcomes[0].as_ref().unwrap().trusted,
        "the new key is not trusted yet"
    );
    assert_eq!(
        std::fs::read_to_string(&package).unwrap(),
        "{\"name\": \"page\"}\n"
    );
    assert!(p.join(".ai/parsers/toml/toml.wasm.sig").is_file());
    let again = rye.sign_all(Some(p), Space::Project).unwrap();
    assert!(
        again.iter().all(|o| !o.as_ref().unwrap().changed),
        "{again:#?}"
    );
}
