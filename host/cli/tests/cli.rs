//! The real `rye` binary, run as a subprocess in throwaway folders.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use rye_test_artifacts as artifacts;
use serde_json::{Value, json};

struct Env {
    project: tempfile::TempDir,
    home: tempfile::TempDir,
    cache: PathBuf,
}

impl Env {
    /// A project and a home folder of their own, and a component cache
    /// shared by the tests of this run (it is keyed by content).
    fn new() -> Self {
        Self::with_cache(common::shared_cache())
    }

    fn with_cache(cache: PathBuf) -> Self {
        Self {
            project: tempfile::tempdir().unwrap(),
            home: tempfile::tempdir().unwrap(),
            cache,
        }
    }

    fn rye(&self, args: &[&str]) -> Output {
        self.command(Command::new(env!("CARGO_BIN_EXE_rye")).args(args))
    }

    /// Runs `rye` with its address space limited to `kib` KiB.
    #[cfg(target_os = "linux")]
    fn rye_limited(&self, kib: u64, args: &str) -> Output {
        let script = format!("ulimit -v {kib}; exec \"$0\" {args}");
        self.command(
            Command::new("sh")
                .arg("-c")
                .arg(script)
                .arg(env!("CARGO_BIN_EXE_rye")),
        )
    }

    fn command(&self, command: &mut Command) -> Output {
        self.command_with(command, &[])
    }

    /// Runs `command` in the project with a clean environment plus `extra`.
    fn command_with(&self, command: &mut Command, extra: &[(&str, std::ffi::OsString)]) -> Output {
        common::clean_env(command, self.project.path(), self.home.path(), &self.cache)
            .envs(extra.iter().map(|(k, v)| (k, v)))
            .env("RYE_LOG", "rye_components=debug")
            .output()
            .unwrap()
    }

    fn ok(&self, args: &[&str]) -> String {
        let out = self.rye(args);
        assert!(
            out.status.success(),
            "rye {args:?} failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    fn json(&self, args: &[&str]) -> Value {
        let mut all = vec!["--json"];
        all.extend_from_slice(args);
        serde_json::from_str(&self.ok(&all)).unwrap()
    }

    fn fail(&self, args: &[&str]) -> String {
        let out = self.rye(args);
        assert_eq!(out.status.code(), Some(1), "rye {args:?} should fail");
        String::from_utf8(out.stderr).unwrap()
    }

    fn write(&self, relative: &str, content: &str) -> PathBuf {
        let path = self.project.path().join(relative);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, content).unwrap();
        path
    }
}

#[test]
fn search_lists_the_bundled_system_space_from_any_folder() {
    let env = Env::new();
    let text = env.ok(&["search", "tool", "python"]);
    assert!(
        text.contains("rye/core/runtimes/python/script  [system]"),
        "{text}"
    );
    let json = env.json(&["search", "all", "", "--limit", "100"]);
    let ids: Vec<&str> = json["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_str().unwrap())
        .collect();
    for expected in [
        "rye/core/runtimes/python/script",
        "rye/core/spaces",
        "rye/core/create_knowledge",
    ] {
        assert!(ids.contains(&expected), "{expected} missing from {ids:?}");
    }
    assert_eq!(json["total"].as_u64().unwrap() as usize, ids.len());
}

#[test]
fn search_finds_project_items_and_reports_shadowing() {
    let env = Env::new();
    env.write(
        ".ai/tools/rye/core/runtimes/python/script.yaml",
        "version: '2.0.0'\ndescription: My own python runtime\n",
    );
    env.write(
        ".ai/tools/demo/count.py",
        "__version__ = '1.0.0'\n__tool_description__ = 'Count words'\n",
    );
    let json = env.json(&["search", "tool", "python runtime"]);
    let first = &json["results"][0];
    assert_eq!(first["id"], "rye/core/runtimes/python/script");
    assert_eq!(first["source"], "project");
    assert_eq!(first["shadows"][0]["source"], "system");
    let count = env.json(&["search", "tool", "count", "--source", "project"]);
    assert_eq!(
        count["results"][0]["metadata"]["description"],
        "Count words"
    );
}

#[test]
fn load_shows_content_and_copies_with_force_only_over_existing_files() {
    let env = Env::new();
    let shown = env.ok(&["load", "knowledge", "rye/core/spaces"]);
    assert!(
        shown.starts_with("knowledge rye/core/spaces  [system]"),
        "{shown}"
    );
    assert!(shown.contains("Every item lives in a `.ai/` folder"));

    let copied = env.json(&["load", "knowledge", "rye/core/spaces", "--to", "project"]);
    let target = env.project.path().join(".ai/knowledge/rye/core/spaces.md");
    assert_eq!(
        Path::new(copied["destination_path"].as_str().unwrap()),
        target
    );
    assert_eq!(
        std::fs::read_to_string(&target).unwrap(),
        copied["content"].as_str().unwrap()
    );

    let refused = env.fail(&[
        "load",
        "knowledge",
        "rye/core/spaces",
        "--source",
        "system",
        "--to",
        "project",
    ]);
    assert!(refused.contains("already exists"), "{refused}");
    env.ok(&[
        "load",
        "knowledge",
        "rye/core/spaces",
        "--source",
        "system",
        "--to",
        "project",
        "--force",
    ]);

    let user_copy = env.json(&[
        "load",
        "directive",
        "rye/core/create_knowledge",
        "--to",
        "user",
    ]);
    assert!(
        Path::new(user_copy["destination_path"].as_str().unwrap()).starts_with(env.home.path())
    );
}

#[test]
fn load_returns_the_parsed_structure() {
    let env = Env::new();
    let json = env.json(&["load", "directive", "rye/core/create_knowledge"]);
    assert_eq!(json["parsed"]["name"], "create_knowledge");
    assert_eq!(json["parsed"]["inputs"][0]["name"], "id");
    assert_eq!(json["parsed"]["process"][0]["name"], "check");
}

#[test]
fn errors_name_what_is_wrong_and_exit_nonzero() {
    let env = Env::new();
    let missing = env.fail(&["load", "tool", "no/such/tool"]);
    assert!(
        missing.contains("tool \"no/such/tool\" not found"),
        "{missing}"
    );
    let escape = env.fail(&["load", "tool", "../../etc/passwd"]);
    assert!(
        escape.contains("'.' and '..' segments are not allowed"),
        "{escape}"
    );
    let scope = env.fail(&["search", "gadget"]);
    assert!(scope.contains("scope \"gadget\""), "{scope}");

    let parser = env.write(".ai/parsers/markdown/xml.wasm", "garbage");
    let shown = env.ok(&["load", "directive", "rye/core/create_knowledge"]);
    assert!(
        shown.contains("parse error") && shown.contains(&parser.display().to_string()),
        "{shown}"
    );
}

#[cfg(target_os = "linux")]
#[test]
fn without_address_space_for_the_pool_it_allocates_on_demand() {
    let env = Env::new();
    // 8 GB: plenty for the host, far too little for the pool's slots.
    let out = env.rye_limited(8_000_000, "--json search all rye");
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{log}");
    assert!(log.contains("pooling allocator unavailable"), "{log}");
    let json: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(json["total"].as_u64().unwrap() > 0);
}

#[test]
fn a_second_process_deserializes_instead_of_compiling() {
    let cache = tempfile::tempdir().unwrap();
    let env = Env::with_cache(cache.path().to_owned());
    // A component of the project's own: the binary holds none compiled.
    install_validator(&env, artifacts::POLICY_VALIDATOR, "policy");
    let args = ["--allow-unsigned-project", "validate", "--quiet"];
    let first = env.rye(&args);
    let log = String::from_utf8_lossy(&first.stderr);
    assert!(
        log.contains("compiled component") && log.contains("policy.wasm"),
        "the first run compiles:\n{log}"
    );

    let second = env.rye(&args);
    let log = String::from_utf8_lossy(&second.stderr);
    assert!(
        !log.contains("compiled component"),
        "the second run compiled again:\n{log}"
    );
    assert_eq!(first.stdout, second.stdout);
}

#[test]
fn execute_runs_a_tool_and_exits_by_its_status() {
    let env = Env::new();
    let result = env.json(&[
        "execute",
        "tool",
        "rye/bash/bash",
        "--params",
        r#"{"command": "echo '{\"n\": 42}'"}"#,
    ]);
    assert_eq!(result["status"], "success");
    assert_eq!(result["data"]["n"], 42);
    assert_eq!(result["chain"].as_array().unwrap().len(), 3);

    let out = env.rye(&[
        "execute",
        "tool",
        "rye/bash/bash",
        "--params",
        r#"{"command": "echo bad >&2; exit 2"}"#,
    ]);
    assert_eq!(out.status.code(), Some(1));
    let failed: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(failed["error"], "bad");

    let dry = env.json(&["execute", "tool", "rye/bash/bash", "--dry-run"]);
    assert_eq!(dry["status"], "validation_passed");

    let bad_params = env.fail(&["execute", "tool", "rye/bash/bash", "--params", "{not json"]);
    assert!(
        bad_params.contains("the parameters are not JSON"),
        "{bad_params}"
    );
}

/// The first event of `step` in a result's trace.
fn trace_step<'a>(result: &'a Value, step: &str) -> Option<&'a Value> {
    result["trace"]
        .as_array()?
        .iter()
        .find(|e| e["step"] == step)
}

#[test]
fn withheld_variables_reach_neither_the_adapter_nor_the_tool() {
    let env = Env::new();
    let show = |extra: &[(&str, &str)]| {
        let extra: Vec<(&str, std::ffi::OsString)> =
            extra.iter().map(|(k, v)| (*k, v.into())).collect();
        env.command_with(
            Command::new(env!("CARGO_BIN_EXE_rye")).args([
                "execute",
                "tool",
                "rye/bash/bash",
                "--trace",
                "--params",
                r#"{"command": "echo \"{\\\"token\\\": \\\"${CI_TOKEN:-absent}\\\", \\\"key\\\": \\\"${AWS_KEY:-absent}\\\"}\""}"#,
            ]),
            &extra,
        )
    };
    let secrets = [("CI_TOKEN", "t0ken"), ("AWS_KEY", "k3y")];

    // By default a tool runs with the host's environment (the chain spec).
    let out = show(&secrets);
    let result: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        result["data"],
        json!({"token": "t0ken", "key": "k3y"}),
        "{result:#}"
    );
    assert!(trace_step(&result, "environment").is_none(), "{result:#}");

    // Withheld by name and by prefix: gone, and the trace names (only) them.
    let mut withheld = secrets.to_vec();
    withheld.push(("RYE_WITHHOLD_ENV", "CI_TOKEN, AWS_*"));
    let out = show(&withheld);
    let result: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        result["data"],
        json!({"token": "absent", "key": "absent"}),
        "{result:#}"
    );
    let event = trace_step(&result, "environment").unwrap();
    assert_eq!(event["withheld"], json!(["AWS_KEY", "CI_TOKEN"]));
    assert!(!result.to_string().contains("t0ken") && !result.to_string().contains("k3y"));

    // A setting that cannot be read stops the run and says why.
    let mut bad = secrets.to_vec();
    bad.push(("RYE_WITHHOLD_ENV", "CI_*_TOKEN"));
    let out = show(&bad);
    assert_eq!(out.status.code(), Some(1));
    let result: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(result["error_type"], "policy", "{result:#}");
    let error = result["error"].as_str().unwrap();
    assert!(
        error.contains("RYE_WITHHOLD_ENV") && error.contains("CI_*_TOKEN"),
        "{error}"
    );
}

/// A project's own virtualenv runs its Python tools: the venv's `python`
/// is a link out of the project (which the sandboxed adapter cannot
/// follow), and a package only the venv has imports.
#[test]
fn a_projects_virtualenv_runs_its_python_tools() {
    let env = Env::new();
    let venv = env.project.path().join(".venv");
    let made = Command::new("python3")
        .args(["-m", "venv", "--without-pip"])
        .arg(&venv)
        .status();
    if !made.is_ok_and(|s| s.success()) {
        rye_test_artifacts::skip("the virtualenv check", "no python3 with venv here");
        return;
    }
    assert!(
        venv.join("bin/python")
            .symlink_metadata()
            .unwrap()
            .is_symlink(),
        "venv made no link"
    );
    let site = std::fs::read_dir(venv.join("lib"))
        .unwrap()
        .map(|e| e.unwrap().path().join("site-packages"))
        .find(|p| p.is_dir())
        .unwrap();
    std::fs::write(site.join("rye_venv_probe.py"), "WHERE = 'venv'\n").unwrap();
    env.write(
        ".ai/tools/demo/probe.py",
        "__version__ = '1.0.0'\n__executor_id__ = 'rye/core/runtimes/python/script'\nimport json\nimport rye_venv_probe\nprint(json.dumps({'where': rye_venv_probe.WHERE}))\n",
    );
    let result = env.json(&[
        "--allow-unsigned-project",
        "execute",
        "tool",
        "demo/probe",
        "--trace",
    ]);
    assert_eq!(result["data"]["where"], "venv", "{result:#}");
    let interpreter = trace_step(&result, "interpreter").unwrap();
    assert_eq!(interpreter["source"], "found", "{interpreter:#}");
    assert_eq!(
        interpreter["value"],
        json!(venv.join("bin/python")),
        "{interpreter:#}"
    );
}

/// An interpreter the user sets (`RYE_PYTHON`) outside every folder the
/// adapter is shown is kept, as the original keeps one that exists; one
/// that does not exist is not, and the search goes on.
#[test]
fn an_interpreter_the_user_sets_outside_the_project_is_kept() {
    let env = Env::new();
    let elsewhere = tempfile::tempdir().unwrap();
    let python = elsewhere.path().join("my-python");
    std::fs::write(
        &python,
        "#!/bin/sh\ncat > /dev/null\necho '{\"where\": \"the user'\"'\"'s python\"}'\n",
    )
    .unwrap();
    std::fs::set_permissions(&python, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    env.write(
        ".ai/tools/demo/probe.py",
        "__version__ = '1.0.0'\n__executor_id__ = 'rye/core/runtimes/python/script'\nprint('{}')\n",
    );
    let args = [
        "--json",
        "--allow-unsigned-project",
        "execute",
        "tool",
        "demo/probe",
        "--trace",
    ];
    let run = |value: &std::path::Path| {
        let out = env.command_with(
            Command::new(env!("CARGO_BIN_EXE_rye")).args(args),
            &[("RYE_PYTHON", value.as_os_str().to_owned())],
        );
        serde_json::from_slice::<Value>(&out.stdout).unwrap()
    };
    let kept = run(&python);
    assert_eq!(kept["data"]["where"], "the user's python", "{kept:#}");
    let interpreter = trace_step(&kept, "interpreter").unwrap();
    assert_eq!(interpreter["source"], "already set", "{interpreter:#}");

    let gone = run(&elsewhere.path().join("no-such-python"));
    let interpreter = trace_step(&gone, "interpreter").unwrap();
    assert_ne!(interpreter["source"], "already set", "{interpreter:#}");
}

/// A first run on a fresh machine compiles nothing: every bundled
/// component it needs was compiled when the binary was built.
#[test]
fn a_first_run_compiles_no_bundled_component() {
    let cache = tempfile::tempdir().unwrap();
    let env = Env::with_cache(cache.path().to_owned());
    let out = env.rye(&[
        "--json",
        "execute",
        "tool",
        "rye/bash/bash",
        "--params",
        r#"{"command": "echo first"}"#,
    ]);
    let result: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(result["status"], "success", "{result:#}");
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(log.contains("bundled component"), "{log}");
    assert!(!log.contains("compiled component"), "{log}");
    let compiled = walkdir_count(cache.path(), "cwasm");
    assert_eq!(
        compiled,
        0,
        "artifacts were written to {}",
        cache.path().display()
    );
}

/// Files under `dir` (recursively) whose name ends in `.ext`.
fn walkdir_count(dir: &Path, ext: &str) -> usize {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .map(|e| e.unwrap().path())
        .map(|p| {
            if p.is_dir() {
                walkdir_count(&p, ext)
            } else {
                usize::from(p.extension().is_some_and(|x| x == ext))
            }
        })
        .sum()
}

/// `rye init` in an empty folder gives a signed tree that validates with
/// signatures required and whose sample tool runs; run again it changes
/// nothing, and it never replaces a file or follows a link.
#[test]
fn init_starts_a_project_that_validates_and_runs() {
    let env = Env::new();
    let first = env.json(&["init", "--mcp-config"]);
    assert_eq!(
        first["init"]["created"].as_array().unwrap().len(),
        3,
        "{first:#}"
    );
    assert_eq!(first["init"]["key"]["made"], true, "{first:#}");
    assert!(first["init"]["key"]["trusted_in"].is_string(), "{first:#}");
    assert_eq!(first["mcp_config"]["written"], true, "{first:#}");
    let written: Value = serde_json::from_str(
        &std::fs::read_to_string(env.project.path().join(".mcp.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(written["mcpServers"]["rye"]["args"][0], "serve");
    assert_eq!(
        written["mcpServers"]["rye"]["args"][2],
        env.project.path().display().to_string()
    );

    let report = env.ok(&["validate", "--require-signed"]);
    assert!(report.contains("3 items, 1 chains"), "{report}");
    assert!(report.contains(": 0 errors, 0 warnings"), "{report}");
    let greeted = env.json(&[
        "execute",
        "tool",
        "hello/greet",
        "--params",
        r#"{"name": "Ada"}"#,
    ]);
    assert_eq!(greeted["data"]["greeting"], "Hello, Ada!", "{greeted:#}");
    let directive = env.json(&["execute", "directive", "hello/welcome"]);
    assert_eq!(directive["status"], "success", "{directive:#}");

    // Again, after an edit: nothing replaced, no second key.
    let tool = env.project.path().join(".ai/tools/hello/greet.py");
    let edited = std::fs::read_to_string(&tool).unwrap() + "# mine\n";
    std::fs::write(&tool, &edited).unwrap();
    let mcp_before = std::fs::read(env.project.path().join(".mcp.json")).unwrap();
    let again = env.json(&["init", "--mcp-config"]);
    assert_eq!(again["init"]["created"], json!([]), "{again:#}");
    assert_eq!(again["init"]["kept"].as_array().unwrap().len(), 3);
    assert_eq!(again["init"]["key"]["made"], false);
    assert!(
        again["init"]["key"].get("trusted_in").is_none(),
        "{again:#}"
    );
    assert_eq!(again["mcp_config"]["written"], false);
    assert_eq!(std::fs::read_to_string(&tool).unwrap(), edited);
    assert_eq!(
        std::fs::read(env.project.path().join(".mcp.json")).unwrap(),
        mcp_before
    );

    // A .ai/ that is a link out of the folder is not followed.
    let linked = tempfile::tempdir().unwrap();
    let elsewhere = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(elsewhere.path(), linked.path().join(".ai")).unwrap();
    let refused = env.rye(&["init", linked.path().to_str().unwrap()]);
    assert_eq!(refused.status.code(), Some(1));
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(said.contains(".ai") && said.contains("link"), "{said}");
    assert_eq!(std::fs::read_dir(elsewhere.path()).unwrap().count(), 0);
}

/// Three knowledge entries to search with every option.
fn search_fixture(env: &Env) {
    for (name, version, tags, date, body) in [
        (
            "alpha",
            "1.0.0",
            "[web, http]",
            Some("2026-01-10"),
            "alpha one two three four five six seven beta",
        ),
        (
            "beta",
            "2.3.0",
            "[cli]",
            Some("2026-03-01"),
            "beta is next to alpha here",
        ),
        ("gamma", "0.9.0", "[web]", None, "nothing of the others"),
    ] {
        let date = date.map_or(String::new(), |d| format!("created_at: \"{d}\"\n"));
        env.write(
            &format!(".ai/knowledge/demo/{name}.md"),
            &format!(
                "```yaml\nname: {name}\ntitle: The {name} note\nentry_type: reference\nversion: \"{version}\"\ncategory: demo\ntags: {tags}\n{date}```\n\n{body}\n"
            ),
        );
    }
}

fn found_ids(result: &Value) -> Vec<String> {
    result["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            r["id"]
                .as_str()
                .unwrap()
                .trim_start_matches("demo/")
                .to_owned()
        })
        .collect()
}

/// Every search option of the original, through the CLI: field terms and
/// `--field`, filters (lists, `!x`, versions, dates), sorting, fuzzy terms
/// and proximity; and every result says whether it is signed.
#[test]
fn search_offers_fields_filters_sorting_fuzzy_and_proximity() {
    let env = Env::new();
    search_fixture(&env);
    let search = |args: &[&str]| {
        let mut all = vec!["search", "knowledge.demo.*"];
        all.extend_from_slice(args);
        found_ids(&env.json(&all))
    };
    assert_eq!(search(&["name:alpha"]), ["alpha"]);
    assert_eq!(search(&["title:\"the beta\""]), ["beta"]);
    assert_eq!(
        search(&["--field", "tags=web", "--sort-by", "name"]),
        ["alpha", "gamma"]
    );
    assert_eq!(
        search(&["entry_type:reference", "--sort-by", "name"]),
        ["alpha", "beta", "gamma"]
    );
    assert_eq!(search(&["--filter", r#"tags=["cli"]"#]), ["beta"]);
    assert_eq!(
        search(&["--filter", "version=>=1.0", "--sort-by", "name"]),
        ["alpha", "beta"]
    );
    assert_eq!(
        search(&["--filter", "version=!2.3.0", "--sort-by", "name"]),
        ["alpha", "gamma"]
    );
    // An entry without a date passes a date filter.
    assert_eq!(
        search(&["--filter", "date_from=2026-02-01", "--sort-by", "name"]),
        ["beta", "gamma"]
    );
    assert_eq!(
        search(&["--filter", "date_to=2026-01-31"]),
        ["alpha", "gamma"]
    );
    assert_eq!(search(&["--sort-by", "date"]), ["beta", "alpha", "gamma"]);
    assert_eq!(search(&["--sort-by", "name"]), ["alpha", "beta", "gamma"]);
    assert_eq!(search(&["alpah"]), Vec::<String>::new());
    assert_eq!(search(&["alpah", "--fuzzy"]), ["alpha", "beta"]);
    assert_eq!(search(&["alpah", "--fuzzy", "0"]), Vec::<String>::new());
    assert_eq!(
        search(&["alpha", "beta", "--sort-by", "name"]),
        ["alpha", "beta"]
    );
    assert_eq!(search(&["alpha", "beta", "--proximity"]), ["beta"]);
    assert_eq!(
        search(&["alpha", "beta", "--proximity", "10", "--sort-by", "name"]),
        ["alpha", "beta"]
    );

    for (args, needle) in [
        (vec!["--sort-by", "size"], "score, date or name"),
        (vec!["--field", "tags"], "KEY=VALUE"),
        (vec!["--field", "Bad-Name=x"], "not a field name"),
        (vec!["--fuzzy", "lots"], "number of edits"),
    ] {
        let mut all = vec!["search", "knowledge"];
        all.extend(args);
        let said = env.fail(&all);
        assert!(said.contains(needle), "{said}");
    }

    // Signed and verified: signed, with the file's hash; the others not.
    env.ok(&["keys", "generate"]);
    env.ok(&["keys", "trust"]);
    env.ok(&["sign", "knowledge", "demo/alpha"]);
    let result = env.json(&["search", "knowledge.demo.*", "--sort-by", "name"]);
    let alpha = &result["results"][0];
    let bytes = std::fs::read(env.project.path().join(".ai/knowledge/demo/alpha.md")).unwrap();
    use sha2::Digest;
    assert_eq!(alpha["signed"], true, "{alpha:#}");
    assert_eq!(
        alpha["integrity"],
        hex::encode(sha2::Sha256::digest(&bytes))
    );
    assert_eq!(alpha["category"], "demo");
    assert_eq!(result["results"][1]["signed"], false);
    assert_eq!(result["results"][1]["integrity"], Value::Null);
}

/// Directives written for the original fill `{input:…}` placeholders in
/// every form: required (kept as written when missing), optional (`?`),
/// and with a default after `:` or `|`.
#[test]
fn a_directive_fills_every_input_placeholder_form() {
    let env = Env::new();
    env.write(
        ".ai/directives/demo/forms.md",
        "```xml\n<directive name=\"forms\" version=\"1.0.0\">\n  <metadata><description>Forms</description></metadata>\n\
         <inputs>\n    <input name=\"who\" type=\"string\" required=\"true\">Who</input>\n    <input name=\"place\" type=\"string\">Where</input>\n    <input name=\"count\" type=\"integer\">How many</input>\n  </inputs>\n\
         <process><step name=\"say\"><description>Greet {input:who} at {input:place:home}, {input:count|1} times{input:suffix?}</description></step></process>\n</directive>\n```\n\n\
         Greet {input:who} at {input:place|home} ({input:mood?}) {input:missing} {who} {input:bad name}.\n",
    );
    let run = |params: Value| {
        env.json(&[
            "--allow-unsigned-project",
            "execute",
            "directive",
            "demo/forms",
            "--params",
            &params.to_string(),
        ])
    };
    let given = run(json!({"who": "Ada", "place": "the lab", "count": 3}));
    assert_eq!(
        given["data"]["process"][0]["description"], "Greet Ada at the lab, 3 times",
        "{given:#}"
    );
    let directions = given["your_directions"].as_str().unwrap();
    assert!(
        directions.ends_with("Greet Ada at the lab () {input:missing} Ada {input:bad name}."),
        "{directions}"
    );
    let defaults = run(json!({"who": "Bo"}));
    assert_eq!(
        defaults["data"]["process"][0]["description"], "Greet Bo at home, 1 times",
        "{defaults:#}"
    );
    assert!(
        defaults["your_directions"]
            .as_str()
            .unwrap()
            .ends_with("Greet Bo at home () {input:missing} Bo {input:bad name}."),
        "{defaults:#}"
    );
}

#[test]
fn execute_reads_parameters_from_stdin() {
    use std::io::Write as _;
    let env = Env::new();
    let mut child = Command::new(env!("CARGO_BIN_EXE_rye"))
        .args(["execute", "tool", "rye/bash/bash", "--params-file", "-"])
        .current_dir(env.project.path())
        .env("HOME", env.home.path())
        .env("RYE_CACHE_DIR", &env.cache)
        .env("RYE_CACHE_KEY", env.cache.with_extension("key"))
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(br#"{"command": "echo from-stdin"}"#)
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let result: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(result["data"]["stdout"], "from-stdin\n");
}

/// A tool with every field the system's validator looks for.
const COMPLETE: &str = "\"\"\"Says hi.\"\"\"\n__version__ = '1.0.0'\n__tool_type__ = 'python'\n__executor_id__ = 'rye/core/runtimes/python/script'\n__category__ = 'demo'\nimport json\nif __name__ == '__main__':\n    print(json.dumps({'hi': 1}))\n";

const SCRIPT: &str = "__version__ = '1.0.0'\n__executor_id__ = 'rye/core/runtimes/python/script'\nimport json\nif __name__ == '__main__':\n    print(json.dumps({'hi': 1}))\n";

#[test]
fn keys_sign_execute_and_verify_from_the_command_line() {
    let env = Env::new();
    let made = env.ok(&["keys", "generate"]);
    let keys = env.home.path().join(".ai/config/keys/signing");
    assert!(made.contains(&keys.display().to_string()), "{made}");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(keys.join("private_key.pem"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }
    let again = env.fail(&["keys", "generate"]);
    assert!(again.contains("already exists"), "{again}");
    env.ok(&["keys", "trust"]);

    let tool = env.write(".ai/tools/demo/hi.py", SCRIPT);
    let out = env.rye(&["execute", "tool", "demo/hi"]);
    assert_eq!(out.status.code(), Some(1));
    let result: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(result["error_type"], "integrity", "{result:#}");
    assert!(result["error"].as_str().unwrap().contains("unsigned"));

    let signed = env.ok(&["sign", "tool", "demo/hi"]);
    assert!(signed.starts_with("signed"), "{signed}");
    let ran: Value = serde_json::from_str(&env.ok(&["execute", "tool", "demo/hi"])).unwrap();
    assert_eq!(ran["data"], serde_json::json!({"hi": 1}), "{ran:#}");
    assert!(env.ok(&["sign", "--all"]).contains("unchanged"));
    // As JSON: each file signed, or the file and why not.
    let broken = env.write(".ai/tools/demo/broken.py", "CONFIG = (\n");
    let out = env.rye(&["--json", "sign", "--all"]);
    assert_eq!(out.status.code(), Some(1));
    let entries: Value = serde_json::from_slice(&out.stdout).unwrap();
    let entries = entries.as_array().unwrap();
    let hi = entries.iter().find(|e| e["path"] == json!(tool)).unwrap();
    assert_eq!(hi["changed"], false, "{hi:#}");
    assert!(hi["fingerprint"].is_string(), "{hi:#}");
    let failed = entries.iter().find(|e| e["path"] == json!(broken)).unwrap();
    assert!(
        failed["error"]
            .as_str()
            .unwrap()
            .contains("not signed, its parser"),
        "{failed:#}"
    );
    std::fs::remove_file(&broken).unwrap();
    let show = env.json(&["keys", "show"]);
    let mine = show["signing_key"]["fingerprint"].as_str().unwrap();
    assert!(
        show["trusted"]
            .as_array()
            .unwrap()
            .iter()
            .any(|k| k["fingerprint"] == mine),
        "{show:#}"
    );

    let verified = env.ok(&["verify", ".ai"]);
    assert!(verified.contains("1 verified, 0 failed"), "{verified}");
    let text = std::fs::read_to_string(&tool)
        .unwrap()
        .replace("'hi': 1", "'hi': 2");
    std::fs::write(&tool, text).unwrap();
    let out = env.rye(&["verify", ".ai"]);
    assert_eq!(out.status.code(), Some(1));
    let report = String::from_utf8(out.stdout).unwrap();
    assert!(
        report.contains("FAIL") && report.contains("demo/hi.py") && report.contains("modified"),
        "{report}"
    );
}

/// What a command that must exit 1 printed, on either stream.
fn failed_output(env: &Env, args: &[&str]) -> String {
    let out = env.rye(args);
    assert_eq!(out.status.code(), Some(1), "rye {args:?} should fail");
    String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr)
}

/// `<name>.config-schema`: the schema of config items named `<name>`.
const REMOTE_SCHEMA: &str = "version: \"1.0.0\"\ntool_type: config-schema\nexecutor_id: null\ncategory: demo\ndescription: Settings of the remote tool\nschema:\n  type: object\n  required: [url]\n  additionalProperties: false\n  properties:\n    url: {type: string, pattern: \"^https://\"}\n    retries: {type: integer, minimum: 0, maximum: 5}\n";

const REMOTE_CONFIG: &str =
    "name: remote\ncategory: demo\nversion: \"1.0.0\"\nurl: https://example.org\nretries: 3\n";

#[test]
fn config_items_are_signed_checked_by_their_schema_and_refused_when_tampered() {
    let env = Env::new();
    env.ok(&["keys", "generate"]);
    env.ok(&["keys", "trust"]);
    env.write(".ai/tools/demo/remote.config-schema.yaml", REMOTE_SCHEMA);
    env.write(
        ".ai/tools/demo/reader.py",
        "__version__ = '1.0.0'\n__tool_type__ = 'python'\n__executor_id__ = 'rye/core/runtimes/python/script'\n\
         __category__ = 'demo'\n__tool_description__ = 'Prints its resolved config'\n\
         CONFIG_RESOLVE = {'path': 'demo/remote.yaml', 'mode': 'first_match'}\nimport json, sys\n\
         if __name__ == '__main__':\n    print(json.dumps(json.load(sys.stdin)['resolved_config']))\n",
    );
    let config = env.write(".ai/config/demo/remote.yaml", REMOTE_CONFIG);
    env.ok(&["sign", "tool", "demo/remote.config-schema"]);
    env.ok(&["sign", "tool", "demo/reader"]);

    // Content that breaks the schema is not signed, and each breach is
    // named with its place and line.
    let bad = REMOTE_CONFIG
        .replace("https://example.org", "http://example.org")
        .replace("retries: 3", "retries: 9\ncolour: red");
    std::fs::write(&config, &bad).unwrap();
    let refused = failed_output(&env, &["sign", "config", "demo/remote"]);
    for needle in [
        "remote.yaml",
        "/url \"http://example.org\" does not match the pattern \"^https://\" (schema demo/remote.config-schema)",
        "/retries 9 is more than 5",
        "/colour is not a known property",
    ] {
        assert!(refused.contains(needle), "{needle:?} not in {refused}");
    }
    assert_eq!(
        std::fs::read_to_string(&config).unwrap(),
        bad,
        "a refused file is left as it was"
    );
    let report = env.rye(&["validate", "--format", "json"]);
    assert_eq!(report.status.code(), Some(1));
    let report: Value = serde_json::from_slice(&report.stdout).unwrap();
    let breach = report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| {
            f["rule"] == "rye/config/schema"
                && f["message"].as_str().unwrap().starts_with("/retries")
        })
        .unwrap_or_else(|| panic!("{report:#}"));
    assert_eq!(breach["line"], 5, "{breach:#}");
    assert!(
        breach["path"]
            .as_str()
            .unwrap()
            .ends_with(".ai/config/demo/remote.yaml")
    );

    // Good content signs; verify, validate and the tool reading it agree.
    // Unsigned, it only warns: config files may stay unsigned.
    std::fs::write(&config, REMOTE_CONFIG).unwrap();
    let unsigned = env.ok(&["validate", "--require-signed"]);
    assert!(unsigned.contains(": 0 errors, 1 warnings"), "{unsigned}");
    let signed = env.json(&["sign", "config", "demo/remote"]);
    assert_eq!(signed[0]["changed"], true, "{signed:#}");
    assert!(
        std::fs::read_to_string(&config)
            .unwrap()
            .starts_with("# rye:signed:")
    );
    assert!(env.ok(&["verify", ".ai"]).contains("3 verified, 0 failed"));
    let clean = env.ok(&["validate", "--require-signed"]);
    assert!(clean.contains("3 items, 1 chains"), "{clean}");
    assert!(clean.contains(": 0 errors, 0 warnings"), "{clean}");
    let read = env.json(&["execute", "tool", "demo/reader"]);
    assert_eq!(read["data"]["url"], "https://example.org", "{read:#}");

    // Tampered after signing: refused everywhere it is read.
    let tampered = std::fs::read_to_string(&config)
        .unwrap()
        .replace("retries: 3", "retries: 4");
    std::fs::write(&config, tampered).unwrap();
    let out = env.rye(&["verify", ".ai/config"]);
    assert_eq!(out.status.code(), Some(1));
    let verdict = String::from_utf8(out.stdout).unwrap();
    assert!(
        verdict.contains("remote.yaml") && verdict.contains("modified"),
        "{verdict}"
    );
    let out = env.rye(&["validate"]);
    assert_eq!(out.status.code(), Some(1));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("remote.yaml") && text.contains("modified"),
        "{text}"
    );
    let out = env.rye(&["execute", "tool", "demo/reader"]);
    assert_eq!(out.status.code(), Some(1));
    let result: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        result["error"].as_str().unwrap().contains("remote.yaml"),
        "{result:#}"
    );

    // Hostile files: a link out of the space, nesting past the parser's
    // bound. Each is refused naming the file; nothing is written.
    let outside = env.home.path().join("outside.yaml");
    std::fs::write(&outside, "secret: 1\n").unwrap();
    let link = env.project.path().join(".ai/config/demo/leak.yaml");
    std::os::unix::fs::symlink(&outside, &link).unwrap();
    let escape = failed_output(&env, &["sign", "config", "demo/leak"]);
    assert!(
        escape.contains("leak.yaml") && escape.contains("out of its space"),
        "{escape}"
    );
    assert_eq!(std::fs::read_to_string(&outside).unwrap(), "secret: 1\n");
    let text = String::from_utf8(env.rye(&["validate"]).stdout).unwrap();
    assert!(
        text.contains("leak.yaml") && text.contains("link-escape"),
        "{text}"
    );
    std::fs::remove_file(&link).unwrap();
    let deep = format!(
        "{REMOTE_CONFIG}nested: {}{}\n",
        "[".repeat(5000),
        "]".repeat(5000)
    );
    let deep_file = env.write(".ai/config/demo/deep.yaml", &deep);
    let refused = failed_output(&env, &["sign", "config", "demo/deep"]);
    assert!(
        refused.contains("deep.yaml") && refused.contains("recursion limit"),
        "{refused}"
    );
    assert_eq!(std::fs::read_to_string(&deep_file).unwrap(), deep);
    std::fs::remove_file(&deep_file).unwrap();

    // The key store is not made of config items; a broken schema does
    // not leave a config unchecked.
    let store = failed_output(&env, &["sign", "config", "keys/trusted/x"]);
    assert!(store.contains("key store"), "{store}");
    std::fs::write(&config, REMOTE_CONFIG).unwrap();
    env.write(
        ".ai/tools/demo/remote.config-schema.yaml",
        &REMOTE_SCHEMA.replace("schema:\n", "layout:\n"),
    );
    let broken = failed_output(&env, &["sign", "config", "demo/remote"]);
    assert!(broken.contains("remote.config-schema.yaml"), "{broken}");
    // A schema that is a link out of its space is refused, not passed over.
    let schema = env
        .project
        .path()
        .join(".ai/tools/demo/remote.config-schema.yaml");
    std::fs::remove_file(&schema).unwrap();
    let elsewhere = env.home.path().join("schema.yaml");
    std::fs::write(&elsewhere, REMOTE_SCHEMA).unwrap();
    std::os::unix::fs::symlink(&elsewhere, &schema).unwrap();
    let linked = failed_output(&env, &["sign", "config", "demo/remote"]);
    assert!(
        linked.contains("remote.config-schema.yaml") && linked.contains("out of its space"),
        "{linked}"
    );
}

#[test]
fn verify_checks_files_signed_by_the_original_system() {
    let env = Env::new();
    let fixture = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/signing/original")
        .canonicalize()
        .unwrap();
    let toml = std::fs::read_dir(fixture.join("trusted"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let ai = fixture.join(".ai");
    let report = env.ok(&[
        "verify",
        "--trusted-key",
        toml.to_str().unwrap(),
        ai.to_str().unwrap(),
    ]);
    assert!(report.contains("5 verified, 0 failed"), "{report}");
    assert!(report.contains("github-ci"), "{report}");
    let out = env.rye(&["verify", ai.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stdout).contains("untrusted key"));
}

#[test]
fn validate_reports_each_problem_with_file_and_line_and_exits_by_severity() {
    let env = Env::new();
    env.write(".ai/tools/demo/good.py", SCRIPT);
    env.write(".ai/tools/demo/broken.py", "x = 1\ny = $$$\n");
    env.write(
        ".ai/tools/demo/orphan.py",
        "__executor_id__ = 'nowhere/runtime'\n",
    );
    env.write(".ai/tools/demo/a.yaml", "executor_id: demo/b\n");
    env.write(".ai/tools/demo/b.yaml", "executor_id: demo/a\n");
    env.write(
        ".ai/directives/demo/d.md",
        "```xml\n<directive name=\"d\"><<<</directive>\n```\n",
    );
    let out = env.rye(&["validate"]);
    assert_eq!(out.status.code(), Some(1));
    let report = String::from_utf8(out.stdout).unwrap();
    for needle in [
        "2:5: error[parse]",
        "circular dependency: demo/a -> demo/b -> demo/a",
        "executor \"nowhere/runtime\" not found",
        "2:22: error[parse]",
        "warning[signature]: unsigned",
        "6 items",
    ] {
        assert!(report.contains(needle), "{needle:?} not in:\n{report}");
    }

    let json = env.rye(&["validate", "--format", "json", "--require-signed"]);
    assert_eq!(json.status.code(), Some(1));
    let json: Value = serde_json::from_slice(&json.stdout).unwrap();
    let findings = json["findings"].as_array().unwrap();
    let unsigned = findings
        .iter()
        .filter(|f| f["rule"] == "signature" && f["severity"] == "error")
        .count();
    assert_eq!(unsigned, 6, "{json:#}");
    assert!(findings.iter().any(|f| f["line"] == 2 && f["column"] == 5));

    let missing = env.rye(&["validate", "/no/such/folder"]);
    assert_eq!(missing.status.code(), Some(2));

    // Signed and sound: clean, even when signatures are required.
    let clean = Env::new();
    clean.ok(&["keys", "generate"]);
    clean.ok(&["keys", "trust"]);
    clean.write(".ai/tools/demo/good.py", COMPLETE);
    // A project's own copy of an extractor is data, not a chain root.
    let extractor = ".ai/tools/rye/core/extractors/tool/tool_extractor.yaml";
    let system = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(extractor);
    clean.write(extractor, &std::fs::read_to_string(system).unwrap());
    clean.ok(&["sign", "--all"]);
    let report = clean.ok(&["validate", "--require-signed"]);
    assert!(
        report.contains("2 items, 1 chains, 1 validators: 0 errors, 0 warnings"),
        "{report}"
    );
}

/// The system space's tools and runtimes, copied into a project and
/// signed, validate clean (a runtime is checked as far as it goes, its
/// tools giving the rest); MCP server and tool items are held to their
/// rules.
#[test]
fn validate_passes_the_system_tools_and_holds_mcp_items_to_their_rules() {
    let env = Env::new();
    env.ok(&["keys", "generate"]);
    env.ok(&["keys", "trust"]);
    let system = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.ai/tools");
    let mut stack = vec![system.clone()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else {
                let relative = path.strip_prefix(&system).unwrap().display();
                env.write(
                    &format!(".ai/tools/{relative}"),
                    &std::fs::read_to_string(&path).unwrap(),
                );
            }
        }
    }
    env.ok(&["sign", "--all"]);
    let report = env.ok(&["validate", "--require-signed"]);
    assert!(report.contains(": 0 errors, 0 warnings"), "{report}");

    env.write(
        ".ai/tools/mcp/servers/pigeon.yaml",
        "tool_type: mcp_server\nversion: \"1.0.0\"\nconfig:\n  transport: carrier-pigeon\n",
    );
    env.write(
        ".ai/tools/mcp/servers/leaky.yaml",
        "tool_type: mcp_server\nversion: \"1.0.0\"\nconfig:\n  transport: http\n  url: https://mcp.test/mcp\n  headers: {Authorization: Bearer sk-live-123}\n",
    );
    env.write(
        ".ai/tools/mcp/pigeon/coo.yaml",
        "tool_type: mcp\nversion: \"1.0.0\"\nexecutor_id: rye/core/runtimes/mcp/stdio\nconfig:\n  server: ../../etc/passwd\n  tool_name: coo\ndefinition_hash: abc\n",
    );
    // Signing refuses them; validation says why.
    let refused = env.rye(&["sign", "tool", "mcp/servers/pigeon"]);
    assert!(!refused.status.success());
    let out = env.rye(&["validate", "--format", "json"]);
    assert_eq!(out.status.code(), Some(1));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let said = |rule: &str, severity: &str, needle: &str| {
        report["findings"].as_array().unwrap().iter().any(|f| {
            f["rule"] == rule
                && f["severity"] == severity
                && f["message"].as_str().unwrap().contains(needle)
        })
    };
    assert!(
        said("rye/mcp/server", "error", "carrier-pigeon"),
        "{report:#}"
    );
    assert!(
        said("rye/mcp/server", "warning", "credential"),
        "{report:#}"
    );
    assert!(
        said("rye/mcp/tool", "warning", "not under mcp/servers/"),
        "{report:#}"
    );
    assert!(
        said("rye/mcp/tool", "error", "definition_hash"),
        "{report:#}"
    );
}

/// A signed anchored package validates clean: the helper modules its
/// runtime's `verify_deps` checks are dependencies, verified by signature,
/// not tools whose chain is broken; the same helper outside any anchor is
/// still a chain error, and a tampered helper still a signature error.
#[test]
fn validate_treats_anchored_helpers_as_dependencies() {
    let env = Env::new();
    env.ok(&["keys", "generate"]);
    env.ok(&["keys", "trust"]);
    env.write(
        ".ai/tools/demo/pkg/main.py",
        "__version__ = '1.0.0'\n__executor_id__ = 'rye/core/runtimes/python/script'\n__category__ = 'demo/pkg'\n__tool_type__ = 'python'\n\
         __tool_description__ = 'Greets through a helper module'\n\
         import json\nfrom lib.helper import greet\nprint(json.dumps({'said': greet()}))\n",
    );
    env.write(".ai/tools/demo/pkg/__init__.py", "");
    env.write(
        ".ai/tools/demo/pkg/lib/helper.py",
        "def greet():\n    return 'hello from the helper'\n",
    );
    env.ok(&["sign", "--all"]);
    let report = env.ok(&["validate", "--require-signed"]);
    assert!(report.contains(": 0 errors, 0 warnings"), "{report}");
    let ran = env.json(&["execute", "tool", "demo/pkg/main"]);
    assert_eq!(ran["data"]["said"], "hello from the helper", "{ran:#}");

    // Tampered, the helper is refused by both.
    let helper = env.project.path().join(".ai/tools/demo/pkg/lib/helper.py");
    let signed = std::fs::read_to_string(&helper).unwrap();
    std::fs::write(&helper, signed.replace("hello", "HELLO")).unwrap();
    let tampered = env.rye(&["validate"]);
    assert_eq!(tampered.status.code(), Some(1));
    let text = String::from_utf8_lossy(&tampered.stdout);
    assert!(
        text.contains("helper.py") && text.contains("signature"),
        "{text}"
    );
    std::fs::write(&helper, &signed).unwrap();

    // Without the anchor's marker it is no dependency: a broken chain root.
    std::fs::remove_file(env.project.path().join(".ai/tools/demo/pkg/__init__.py")).unwrap();
    let unanchored = env.rye(&["validate"]);
    assert_eq!(unanchored.status.code(), Some(1));
    let text = String::from_utf8_lossy(&unanchored.stdout);
    assert!(
        text.contains("error[chain]") && text.contains("demo/pkg/lib/helper"),
        "{text}"
    );
}

mod common;

/// Installs the component at `built` as `.ai/validators/<name>.wasm`.
fn install_validator(env: &Env, built: &str, name: &str) {
    let target = env
        .project
        .path()
        .join(format!(".ai/validators/{name}.wasm"));
    std::fs::create_dir_all(target.parent().unwrap()).unwrap();
    std::fs::copy(built, target).unwrap();
}

#[test]
fn validate_reports_one_error_of_each_kind_in_every_format_despite_hostile_validators() {
    let env = Env::new();
    env.ok(&["keys", "generate"]);
    env.ok(&["keys", "trust"]);
    // Signed, then changed: the signature no longer matches.
    env.write(".ai/tools/demo/tampered.py", COMPLETE);
    env.ok(&["sign", "tool", "demo/tampered"]);
    let tampered = env.project.path().join(".ai/tools/demo/tampered.py");
    let text = std::fs::read_to_string(&tampered).unwrap();
    std::fs::write(&tampered, text.replace("'hi': 1", "'hi': 2")).unwrap();

    env.write(".ai/tools/demo/good.py", COMPLETE);
    // Syntax: the parser stops at line 2, column 5.
    env.write(".ai/tools/demo/broken.py", "x = 1\ny = $$$\n");
    // Chain: an executor that does not exist.
    env.write(
        ".ai/tools/demo/orphan.py",
        "\"\"\"Lost.\"\"\"\n__version__ = '1.0.0'\n__tool_type__ = 'python'\n__executor_id__ = 'nowhere/runtime'\n",
    );
    // Conflict: two files for one id.
    env.write(".ai/tools/demo/twin.py", COMPLETE);
    env.write(
        ".ai/tools/demo/twin.yaml",
        "executor_id: rye/core/primitives/execute\n",
    );
    // Structure: a version that is not MAJOR.MINOR.PATCH, on line 3.
    env.write(
        ".ai/tools/demo/version.py",
        "\"\"\"Versioned badly.\"\"\"\n__tool_type__ = 'python'\n__version__ = '1.0'\n__executor_id__ = 'rye/core/runtimes/python/script'\n",
    );
    // config_schema that is not a JSON Schema: its `type` on line 7.
    env.write(
        ".ai/tools/demo/schema.py",
        "\"\"\"Bad schema.\"\"\"\n__version__ = '1.0.0'\n__tool_type__ = 'python'\n__executor_id__ = 'rye/core/runtimes/python/script'\nCONFIG_SCHEMA = {\n    'properties': {'type': {'type': 'string'}},\n    'type': 'text',\n}\n",
    );
    // Runtime YAML against rye/runtime@1: config.timeout of the wrong kind.
    env.write(
        ".ai/tools/demo/runtime.yaml",
        "version: '1.0.0'\ntool_type: runtime\nexecutor_id: rye/core/primitives/execute\ndescription: A runtime.\nconfig:\n  command: /bin/sh\n  timeout: soon\n",
    );
    // Chain rule: the element in the runtime's place says it is a tool.
    env.write(
        ".ai/tools/demo/middle.yaml",
        "version: '1.0.0'\ntool_type: python\nexecutor_id: rye/core/primitives/execute\ndescription: Not a runtime.\nconfig:\n  command: /bin/true\n",
    );
    env.write(
        ".ai/tools/demo/uses_middle.yaml",
        "version: '1.0.0'\ntool_type: script\nexecutor_id: demo/middle\ndescription: Runs through a tool.\n",
    );
    // Policy (the project's own validator): no bash runtime.
    env.write(
        ".ai/tools/demo/shell.yaml",
        "version: '1.0.0'\ntool_type: script\nexecutor_id: rye/core/runtimes/bash/bash\ndescription: A shell line.\n",
    );
    // Directive structure: its name is not its file's; and no permissions
    // (the policy), both on line 2.
    env.write(
        ".ai/directives/demo/greet.md",
        "```xml\n<directive name=\"hello\" version=\"1.0.0\">\n  <metadata>\n    <description>Greets.</description>\n    <author>me</author>\n  </metadata>\n</directive>\n```\nSay hello.\n",
    );
    // Knowledge: tags that are not a list, on line 6.
    env.write(
        ".ai/knowledge/demo/note.md",
        "```yaml\nname: note\ntitle: A note\nentry_type: fact\nversion: '1.0.0'\ntags: 7\n```\nBody.\n",
    );
    install_validator(&env, artifacts::POLICY_VALIDATOR, "policy");
    for (name, built) in [
        ("hostile/loop", artifacts::VALIDATOR_LOOP),
        ("hostile/bomb", artifacts::VALIDATOR_BOMB),
        ("hostile/flood", artifacts::VALIDATOR_FLOOD),
        ("hostile/panic", artifacts::VALIDATOR_PANIC),
        ("hostile/snoop", artifacts::VALIDATOR_SNOOP),
        ("hostile/asks-host", artifacts::VALIDATOR_ASKS_HOST),
    ] {
        install_validator(&env, built, name);
    }

    let out = env.rye(&["validate", "--format", "json"]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let json: Value = serde_json::from_slice(&out.stdout).unwrap();
    let findings = json["findings"].as_array().unwrap();
    let find = |file: &str, rule: &str| -> &Value {
        findings
            .iter()
            .find(|f| f["path"].as_str().unwrap().ends_with(file) && f["rule"] == rule)
            .unwrap_or_else(|| panic!("no {rule} finding for {file} in {json:#}"))
    };
    let at = |f: &Value| {
        (
            f["line"].as_u64(),
            f["severity"].as_str().unwrap().to_owned(),
        )
    };
    assert_eq!(
        at(find("demo/broken.py", "parse")),
        (Some(2), "error".into())
    );
    assert_eq!(find("demo/broken.py", "parse")["column"], 5);
    assert!(
        find("demo/tampered.py", "signature")["message"]
            .as_str()
            .unwrap()
            .contains("modified")
    );
    assert!(
        find("demo/orphan.py", "chain")["message"]
            .as_str()
            .unwrap()
            .contains("nowhere/runtime")
    );
    find("demo/twin.py", "conflict");
    assert_eq!(
        at(find("demo/version.py", "rye/tool/version")),
        (Some(3), "error".into())
    );
    assert_eq!(
        at(find("demo/schema.py", "rye/tool/config-schema")),
        (Some(7), "error".into())
    );
    // The line and column of the bad keyword, not of CONFIG_SCHEMA.
    assert_eq!(
        find("demo/schema.py", "rye/tool/config-schema")["column"],
        5
    );
    assert_eq!(
        at(find("demo/runtime.yaml", "rye/runtime/schema")),
        (Some(7), "error".into())
    );
    assert_eq!(
        at(find("demo/uses_middle.yaml", "rye/chain/runtime")).1,
        "error"
    );
    assert_eq!(
        at(find("demo/greet.md", "rye/directive/name")),
        (Some(2), "error".into())
    );
    let policy = find("demo/greet.md", "policy/permissions");
    assert_eq!(
        (policy["line"].as_u64(), &policy["validator"]),
        (Some(2), &json!("policy"))
    );
    assert_eq!(
        find("demo/shell.yaml", "policy/no-bash")["validator"],
        "policy"
    );
    assert_eq!(
        at(find("demo/note.md", "rye/knowledge/tags")),
        (Some(6), "error".into())
    );

    // Each hostile validator is one finding against its own file, and is
    // not run again; the others' findings above are all there.
    let against = |name: &str, rule: &str| -> Vec<&Value> {
        findings
            .iter()
            .filter(|f| {
                f["path"]
                    .as_str()
                    .unwrap()
                    .ends_with(&format!("validators/hostile/{name}.wasm"))
                    && f["rule"] == rule
            })
            .collect()
    };
    let crashed = |name: &str, needle: &str| {
        let found = against(name, "validator/crashed");
        assert_eq!(found.len(), 1, "{name}: {found:#?}");
        let message = found[0]["message"].as_str().unwrap();
        assert!(message.contains(needle), "{name}: {message}");
        assert!(message.contains("not run again"), "{message}");
    };
    crashed("loop", "CPU deadline");
    crashed("bomb", "memory cap");
    crashed("panic", "validator crashed on");
    assert_eq!(against("flood", "validator/output").len(), 1);
    let kept = findings
        .iter()
        .filter(|f| f["rule"] == "flood/noise")
        .count();
    assert!(kept <= 200, "flood kept {kept} findings");
    assert!(
        findings
            .iter()
            .filter(|f| f["rule"] == "flood/noise")
            .all(|f| f["message"].as_str().unwrap().len() <= 2_004)
    );

    // One that imports the host interface (granted to adapters only) is
    // refused before it runs.
    let refused = against("asks-host", "validator/load");
    assert_eq!(refused.len(), 1, "{json:#}");
    assert!(
        refused[0]["message"]
            .as_str()
            .unwrap()
            .contains("granted only to runtime adapters")
    );
    assert!(!findings.iter().any(|f| f["rule"] == "asks-host/env"));

    // The snooping validator saw nothing outside its subject.
    let snooped = |what: &str| -> String {
        find("demo/good.py", &format!("snoop/{what}"))["message"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    for what in ["read-passwd", "read-root", "read-cwd", "connect"] {
        assert!(
            snooped(what).starts_with("refused"),
            "{what}: {}",
            snooped(what)
        );
    }
    assert_eq!(snooped("env"), "0");
    assert_eq!(snooped("clock"), "0");

    // The same findings, in the other formats.
    let human = env.rye(&["validate"]);
    assert_eq!(human.status.code(), Some(1));
    let human = String::from_utf8(human.stdout).unwrap();
    for needle in [
        "2:5: error[parse]",
        "3:1: error[rye/tool/version]",
        "2:1: error[policy/permissions]",
        "error[validator/crashed]: validator hostile/loop",
        "7 validators",
    ] {
        assert!(human.contains(needle), "{needle:?} not in:\n{human}");
    }
    let sarif = env.rye(&["validate", "--format", "sarif"]);
    assert_eq!(sarif.status.code(), Some(1));
    let junit = env.rye(&["validate", "--format", "junit"]);
    assert_eq!(junit.status.code(), Some(1));
    let sarif_path = env.project.path().join("report.sarif");
    let junit_path = env.project.path().join("report.xml");
    std::fs::write(&sarif_path, &sarif.stdout).unwrap();
    std::fs::write(&junit_path, &junit.stdout).unwrap();
    let log: Value = serde_json::from_slice(&sarif.stdout).unwrap();
    let results = log["runs"][0]["results"].as_array().unwrap();
    assert_eq!(results.len(), findings.len());
    let version = results
        .iter()
        .find(|r| r["ruleId"] == "rye/tool/version")
        .unwrap();
    assert_eq!(version["level"], "error");
    let location = &version["locations"][0]["physicalLocation"];
    assert_eq!(
        location["artifactLocation"]["uri"],
        ".ai/tools/demo/version.py"
    );
    assert_eq!(location["region"]["startLine"], 3);

    // GitHub Actions annotations, with paths from the working folder.
    let github = env.rye(&["validate", "--format", "github"]);
    assert_eq!(github.status.code(), Some(1));
    let github = String::from_utf8(github.stdout).unwrap();
    let annotations = github.lines().filter(|l| l.starts_with("::")).count();
    assert_eq!(annotations, findings.len(), "{github}");
    assert!(
        github.contains(
            "::error file=.ai/tools/demo/version.py,line=3,col=1,title=rye/tool/version::"
        ),
        "{github}"
    );
    assert!(
        github.lines().last().unwrap().ends_with("warnings"),
        "{github}"
    );

    match common::test_python() {
        Some(python) => {
            let checker =
                Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/reports/check_reports.py");
            let checked = Command::new(python)
                .arg(checker)
                .arg(&sarif_path)
                .arg(&junit_path)
                .output()
                .unwrap();
            assert!(
                checked.status.success(),
                "the SARIF log breaks the OASIS schema:\n{}",
                String::from_utf8_lossy(&checked.stderr)
            );
            let summary: Value = serde_json::from_slice(&checked.stdout).unwrap();
            assert_eq!(summary["sarif_errors"], 0);
            assert!(
                summary["sarif_schema"]
                    .as_str()
                    .unwrap()
                    .contains("sarif-schema-2.1.0")
            );
            let cases = summary["junit"]["cases"].as_array().unwrap();
            let case = |name: &str| {
                cases
                    .iter()
                    .find(|c| c["name"] == name)
                    .unwrap_or_else(|| panic!("no test case {name} in {summary:#}"))
            };
            assert_eq!(case(".ai/tools/demo/good.py")["failed"], false);
            assert_eq!(case(".ai/tools/demo/version.py")["failed"], true);
            assert!(
                case(".ai/tools/demo/version.py")["failure"]
                    .as_str()
                    .unwrap()
                    .contains("3:1: error[rye/tool/version]")
            );
            assert_eq!(case(".ai/validators/hostile/loop.wasm")["failed"], true);
            assert!(summary["junit"]["failures"].as_u64().unwrap() >= 12);
        }
        None => rye_test_artifacts::skip("the SARIF schema check", "no python3 on this machine"),
    }
}

/// `rye` with what cargo needs to build a component: the real cargo and
/// rustup homes (the test's HOME is a throwaway), the toolchain in use,
/// and a target folder shared by the tests of this run.
fn rye_with_cargo(env: &Env, args: &[&str]) -> Output {
    let real_home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_default();
    let mut command = Command::new(env!("CARGO_BIN_EXE_rye"));
    command.args(args);
    let cargo_home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| real_home.join(".cargo"));
    let rustup_home = std::env::var_os("RUSTUP_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| real_home.join(".rustup"));
    env.command_with(
        &mut command,
        &[
            ("CARGO_HOME", cargo_home.into_os_string()),
            ("RUSTUP_HOME", rustup_home.into_os_string()),
            (
                "CARGO_TARGET_DIR",
                PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
                    .join("scaffolds")
                    .into_os_string(),
            ),
            (
                "RUSTUP_TOOLCHAIN",
                std::env::var_os("RUSTUP_TOOLCHAIN").unwrap_or("1.95.0".into()),
            ),
        ],
    )
}

#[test]
fn component_new_build_and_inspect_make_working_components_of_every_world() {
    let env = Env::new();
    env.ok(&["keys", "generate"]);
    env.ok(&["keys", "trust"]);
    let work = tempfile::tempdir().unwrap();
    for (world, name) in [
        ("validator", "needs-description"),
        ("parser", "key-value"),
        ("runtime-adapter", "run-with"),
        ("graph-walker", "echo-inputs"),
        ("tool", "word-count"),
    ] {
        let dir = work.path().join(name);
        let made = env.ok(&[
            "component",
            "new",
            world,
            name,
            "--dir",
            dir.to_str().unwrap(),
        ]);
        assert!(made.contains("rye component build"), "{made}");
        let built = rye_with_cargo(&env, &["component", "build", dir.to_str().unwrap()]);
        assert!(
            built.status.success(),
            "building the {world} scaffold failed:\n{}",
            String::from_utf8_lossy(&built.stderr)
        );
        let built = String::from_utf8(built.stdout).unwrap();
        assert!(built.contains("signed:"), "{built}");
    }
    let installed = env
        .project
        .path()
        .join(".ai/validators/needs-description.wasm");
    let inspected = env.json(&["component", "inspect", installed.to_str().unwrap()]);
    assert_eq!(inspected["world"], "validator", "{inspected:#}");
    assert_eq!(inspected["contract_version"], "0.1.0");
    assert_eq!(inspected["loads"], true);
    assert!(
        inspected["exports"]
            .as_array()
            .unwrap()
            .contains(&json!("rye:plugin/validation@0.1.0"))
    );
    assert!(inspected["imports"].as_array().unwrap().iter().all(|i| {
        let i = i.as_str().unwrap();
        i.starts_with("wasi:") || i == "rye:plugin/types@0.1.0"
    }));
    assert!(inspected["size"].as_u64().unwrap() > 1000);
    let human = env.ok(&[
        "component",
        "inspect",
        env.project
            .path()
            .join(".ai/adapters/run-with.wasm")
            .to_str()
            .unwrap(),
    ]);
    assert!(
        human.contains("runtime-adapter (rye:plugin@0.1.0)"),
        "{human}"
    );
    assert!(human.contains("loads     yes"), "{human}");

    // The new validator takes part at once: in validate, and on sign.
    env.write(".ai/tools/demo/bare.py", SCRIPT);
    let report = env.rye(&["validate"]);
    assert_eq!(report.status.code(), Some(1));
    let report = String::from_utf8(report.stdout).unwrap();
    assert!(
        report.contains("error[needs-description/description]: tool demo/bare has no description"),
        "{report}"
    );
    let refused = env.rye(&["sign", "tool", "demo/bare"]);
    assert_eq!(refused.status.code(), Some(1));
    let refused = String::from_utf8(refused.stdout).unwrap();
    assert!(
        refused.contains("needs-description/description"),
        "{refused}"
    );

    // A core module, or a file that is no component, is named as such.
    let not_wasm = env.write("junk.wasm", "not wasm");
    let out = env.rye(&["component", "inspect", not_wasm.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a WebAssembly file"));
    let taken = env.rye(&[
        "component",
        "new",
        "parser",
        "again",
        "--dir",
        work.path().join("key-value").to_str().unwrap(),
    ]);
    assert!(String::from_utf8_lossy(&taken.stderr).contains("not empty"));
    let unknown = env.rye(&["component", "new", "linker", "x"]);
    assert!(
        String::from_utf8_lossy(&unknown.stderr)
            .contains("parser, runtime-adapter, validator, graph-walker or tool")
    );

    // The tool scaffold is a signed tool at once, its item beside it:
    // typed parameters in, data out, a typed error named.
    let counted: Value = serde_json::from_str(&env.ok(&[
        "execute",
        "tool",
        "word-count",
        "--params",
        r#"{"text": "one two  three"}"#,
    ]))
    .unwrap();
    assert_eq!(
        counted["data"],
        json!({"words": 3, "characters": 14}),
        "{counted:#}"
    );
    let wrong = env.rye(&["execute", "tool", "word-count", "--params", "{}"]);
    assert_eq!(wrong.status.code(), Some(1));
    let wrong: Value = serde_json::from_slice(&wrong.stdout).unwrap();
    assert!(
        wrong["error"]
            .as_str()
            .unwrap()
            .contains("tool \"word-count\": invalid parameters: text is required"),
        "{wrong:#}"
    );
    let inspected = env.json(&[
        "component",
        "inspect",
        env.project
            .path()
            .join(".ai/tools/word-count.wasm")
            .to_str()
            .unwrap(),
    ]);
    assert_eq!(inspected["world"], "tool", "{inspected:#}");
    assert_eq!(inspected["loads"], true, "{inspected:#}");
    // Built again, the item the author edited is kept.
    env.write(
        ".ai/tools/word-count.yaml",
        &std::fs::read_to_string(env.project.path().join(".ai/tools/word-count.yaml"))
            .unwrap()
            .replace("Counts the words of a text.", "Counts words, edited."),
    );
    let rebuilt = rye_with_cargo(
        &env,
        &[
            "component",
            "build",
            work.path().join("word-count").to_str().unwrap(),
        ],
    );
    assert!(
        rebuilt.status.success(),
        "{}",
        String::from_utf8_lossy(&rebuilt.stderr)
    );
    assert!(
        std::fs::read_to_string(env.project.path().join(".ai/tools/word-count.yaml"))
            .unwrap()
            .contains("Counts words, edited.")
    );
    env.ok(&[
        "execute",
        "tool",
        "word-count",
        "--params",
        r#"{"text": "a"}"#,
    ]);

    // The walker scaffold walks a graph that names it: it ends at once,
    // its result the run's inputs.
    env.write(
        ".ai/tools/demo/echoed.yaml",
        "version: \"1.0.0\"\ntool_type: graph\nexecutor_id: rye/core/runtimes/state-graph/runtime\ncategory: demo\ndescription: Echoes its inputs.\nwalker: echo-inputs\npermissions: []\nconfig: {start: a, nodes: {a: {type: return}}}\n",
    );
    env.ok(&["sign", "tool", "demo/echoed"]);
    let out = env.ok(&[
        "execute",
        "tool",
        "demo/echoed",
        "--params",
        "{\"say\": \"hi\"}",
    ]);
    let ran: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(ran["data"]["output"], json!({"say": "hi"}), "{ran:#}");
}

/// Copies the `.ai/` tree of `examples/<name>` into the project.
fn copy_example(env: &Env, name: &str) {
    let from = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples")
        .join(name)
        .join(".ai");
    let mut stack = vec![from.clone()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else {
                let relative = path.strip_prefix(&from).unwrap();
                let text = std::fs::read_to_string(&path).unwrap();
                env.write(&format!(".ai/{}", relative.display()), &text);
            }
        }
    }
}

#[test]
fn the_ruby_runtime_example_validates_and_runs_where_ruby_is_installed() {
    let env = Env::new();
    env.ok(&["keys", "generate"]);
    env.ok(&["keys", "trust"]);
    copy_example(&env, "ruby-runtime");
    env.ok(&["sign", "--all"]);
    let report = env.ok(&["validate", "--require-signed"]);
    assert!(report.contains("0 errors"), "{report}");

    let dry = env.json(&["execute", "tool", "examples/ruby/greet", "--dry-run"]);
    assert_eq!(dry["status"], "validation_passed", "{dry:#}");
    assert_eq!(dry["chain"][1]["item_id"], "rye/core/runtimes/ruby/ruby");

    let ruby = Command::new("ruby").arg("--version").output();
    if !ruby.is_ok_and(|o| o.status.success()) {
        rye_test_artifacts::skip("running the Ruby tool", "no ruby on this machine's PATH");
        return;
    }
    let result = env.json(&[
        "execute",
        "tool",
        "examples/ruby/greet",
        "--params",
        r#"{"name": "Ada"}"#,
    ]);
    assert_eq!(result["data"]["greeting"], "Hello, Ada!", "{result:#}");
}

#[test]
fn a_tool_written_in_python_runs_as_a_component_with_read_access_to_the_project() {
    let Some(python) = common::test_python() else {
        rye_test_artifacts::skip("the Python tool example", "no python3 on this machine");
        return;
    };
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/python-note-stats");
    let wit = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../wit/rye-plugin@0.1.0");
    let env = Env::new();
    env.ok(&["keys", "generate"]);
    env.ok(&["keys", "trust"]);
    let tools = env.project.path().join(".ai/tools/examples");
    std::fs::create_dir_all(&tools).unwrap();
    let status = Command::new(python.with_file_name("componentize-py"))
        .current_dir(&example)
        .arg("-d")
        .arg(&wit)
        .args(["-w", "tool", "componentize", "app", "-o"])
        .arg(tools.join("note-stats.wasm"))
        .status()
        .unwrap();
    assert!(status.success(), "componentize-py failed");
    std::fs::copy(
        example.join("note-stats.yaml"),
        tools.join("note-stats.yaml"),
    )
    .unwrap();
    env.write(
        "notes/plan.md",
        "# The plan\nship the parser\n\n## The parser\nfirst\n",
    );
    env.write("notes/done.md", "# Done\nthe walker\n");
    env.write("notes/skip.txt", "# not markdown\n");
    env.ok(&["sign", "tool", "examples/note-stats"]);
    let stats = env.json(&[
        "execute",
        "tool",
        "examples/note-stats",
        "--params",
        r#"{"folder": "notes", "top": 2}"#,
    ]);
    assert_eq!(
        stats["data"],
        json!({
            "files": 2, "lines": 7, "words": 14,
            "heading_words": [{"word": "the", "count": 2}, {"word": "done", "count": 1}],
            "largest": [{"path": "notes/plan.md", "bytes": 48}, {"path": "notes/done.md", "bytes": 18}],
        }),
        "{stats:#}"
    );
    for (params, says) in [
        (
            r#"{"folder": "../.."}"#,
            "invalid parameters: folder is '../..'",
        ),
        (
            r#"{"folder": "gone"}"#,
            "not found: gone is not a folder of the project",
        ),
        (
            r#"{"top": "all"}"#,
            "invalid parameters: top is a whole number",
        ),
    ] {
        let out = env.rye(&["execute", "tool", "examples/note-stats", "--params", params]);
        assert_eq!(out.status.code(), Some(1), "{params}");
        let refused: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert!(
            refused["error"].as_str().unwrap().contains(says),
            "{params}: {refused:#}"
        );
    }
}

#[test]
fn a_parser_written_in_python_reads_toml_tools_through_the_same_contract() {
    let Some(python) = common::test_python() else {
        rye_test_artifacts::skip("the Python parser example", "no python3 on this machine");
        return;
    };
    let componentize = python.with_file_name("componentize-py");
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/python-toml-parser");
    let wit = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../wit/rye-plugin@0.1.0");
    let built = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("python-toml-parser.wasm");
    let status = Command::new(&componentize)
        .current_dir(&example)
        .arg("-d")
        .arg(&wit)
        .args(["-w", "parser", "componentize", "app", "-o"])
        .arg(&built)
        .status()
        .unwrap();
    assert!(status.success(), "componentize-py failed");

    let env = Env::new();
    let inspected = env.json(&["component", "inspect", built.to_str().unwrap()]);
    assert_eq!(inspected["world"], "parser");
    assert_eq!(inspected["loads"], true, "{inspected:#}");
    let installed = env.project.path().join(".ai/parsers/toml/toml.wasm");
    std::fs::create_dir_all(installed.parent().unwrap()).unwrap();
    std::fs::copy(&built, &installed).unwrap();
    env.write(
        ".ai/tools/demo/hi.toml",
        "# Says hi.\nversion = \"1.0.0\"\ntool_type = \"script\"\nexecutor_id = \"rye/core/runtimes/bash/bash\"\ncategory = \"demo\"\ndescription = \"Says hi\"\n\n[config_schema]\ntype = \"object\"\n\n[config_schema.properties.command]\ntype = \"string\"\n",
    );
    env.write(
        ".ai/tools/demo/bad.toml",
        "version = \"1.0.0\"\nbad = = 3\n",
    );

    let loaded = env.json(&["--allow-unsigned-project", "load", "tool", "demo/hi"]);
    assert_eq!(
        loaded["metadata"]["executor_id"], "rye/core/runtimes/bash/bash",
        "{loaded:#}"
    );
    assert_eq!(
        loaded["metadata"]["config_schema"]["properties"]["command"]["type"],
        "string"
    );
    let ran = env.json(&[
        "--allow-unsigned-project",
        "execute",
        "tool",
        "demo/hi",
        "--params",
        r#"{"command": "echo hi"}"#,
    ]);
    assert_eq!(ran["data"]["stdout"], "hi\n", "{ran:#}");

    let out = env.rye(&["validate", "--format", "json"]);
    assert_eq!(out.status.code(), Some(1));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let syntax = report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["rule"] == "parse")
        .unwrap_or_else(|| panic!("{report:#}"));
    assert!(syntax["path"].as_str().unwrap().ends_with("bad.toml"));
    assert_eq!(
        (syntax["line"].as_u64(), syntax["column"].as_u64()),
        (Some(2), Some(7))
    );
    assert_eq!(report["chains"], 1);
}

#[test]
fn the_progress_bar_shows_on_a_terminal_and_nowhere_else() {
    if !Command::new("script")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
    {
        rye_test_artifacts::skip(
            "the progress bar check",
            "no `script` to give rye a terminal",
        );
        return;
    }
    let env = Env::new();
    env.write(".ai/tools/demo/one.py", COMPLETE);
    env.write(".ai/tools/demo/two.py", COMPLETE);
    // `script` runs the command on a pseudo-terminal and copies what it
    // printed there (stdout and stderr alike).
    let on_terminal = |args: &str, extra: &[(&str, std::ffi::OsString)]| -> String {
        let line = format!("{} validate {args}", env!("CARGO_BIN_EXE_rye"));
        let out = env.command_with(
            Command::new("script").args(["-qec", &line, "/dev/null"]),
            extra,
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let shown = on_terminal("", &[]);
    assert!(shown.contains("validating ["), "{shown}");
    assert!(shown.contains("2/2"), "{shown}");
    let quiet = on_terminal("--quiet", &[]);
    assert!(!quiet.contains("validating ["), "{quiet}");
    assert!(quiet.contains("2 items"), "{quiet}");
    let ci = on_terminal("", &[("CI", "true".into())]);
    assert!(!ci.contains("validating ["), "{ci}");
    // Off a terminal there is none either.
    let piped = env.rye(&["validate"]);
    assert!(!String::from_utf8_lossy(&piped.stderr).contains("validating ["));
}

/// Every keyword of both dialects' meta-schemas with values of every kind,
/// judged by `rye/standard` inside `rye validate` and by Python's
/// `jsonschema` (`check_schema`); the verdicts must agree. Patterns are
/// ones Python's `re` and ECMA-262 judge alike.
#[test]
fn config_schemas_are_judged_as_jsonschema_judges_them() {
    let Some(python) = common::test_python() else {
        rye_test_artifacts::skip("the config_schema comparison", "no python3 on this machine");
        return;
    };
    const KEYWORDS: &[&str] = &[
        "type",
        "enum",
        "const",
        "default",
        "multipleOf",
        "maximum",
        "exclusiveMaximum",
        "minimum",
        "exclusiveMinimum",
        "maxLength",
        "minLength",
        "pattern",
        "maxItems",
        "minItems",
        "uniqueItems",
        "maxContains",
        "minContains",
        "maxProperties",
        "minProperties",
        "required",
        "dependentRequired",
        "dependencies",
        "title",
        "description",
        "deprecated",
        "readOnly",
        "writeOnly",
        "examples",
        "format",
        "contentEncoding",
        "contentMediaType",
        "contentSchema",
        "items",
        "prefixItems",
        "additionalItems",
        "contains",
        "additionalProperties",
        "properties",
        "patternProperties",
        "dependentSchemas",
        "propertyNames",
        "if",
        "then",
        "else",
        "allOf",
        "anyOf",
        "oneOf",
        "not",
        "unevaluatedItems",
        "unevaluatedProperties",
        "definitions",
        "$defs",
        "$id",
        "$schema",
        "$ref",
        "$anchor",
        "$dynamicRef",
        "$dynamicAnchor",
        "$recursiveRef",
        "$recursiveAnchor",
        "$vocabulary",
        "$comment",
        "x-note",
    ];
    let values = json!([
        null, true, false, 0, 2, -1, 1.5, 2.0, "string", "object", "bad", "a_b", "#frag", "x#y",
        "x#", "1abc", "^[a-z]+$", "(", "[z-a]", "a**", [], ["string"], ["string", "string"],
        ["string", "integer"], ["a", 1], [{}], [{"type": "string"}], [{"type": 5}], [true], {},
        {"type": "string"}, {"type": 5}, {"a": {"type": "string"}}, {"a": {"type": 5}},
        {"a": ["b"]}, {"a": ["b", "b"]}, {"a": true}, {"a": 1}, {"^x(": {}}, {"^x\\d$": {}},
        {"https://example.com/v": true}, {"https://example.com/v": "yes"},
    ]);
    let mut cases = Vec::new();
    for dialect in [None, Some("draft-07")] {
        for keyword in KEYWORDS {
            for value in values.as_array().unwrap() {
                cases.push((dialect, json!({ *keyword: value })));
            }
        }
    }

    // Python's verdict on each, as the only property of a schema.
    let wrapped: Vec<Value> = cases
        .iter()
        .map(|(dialect, schema)| {
            json!({"dialect": dialect, "schema": with_dialect(*dialect, json!({"properties": {"p": schema}}))})
        })
        .collect();
    let checker =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/schemas/check_schemas.py");
    let mut child = Command::new(python)
        .arg(checker)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(&serde_json::to_vec(&wrapped).unwrap())
        .unwrap();
    let output = child.wait_with_output().unwrap();
    assert!(output.status.success(), "check_schemas.py failed");
    let python: Vec<Value> = serde_json::from_slice(&output.stdout).unwrap();

    // Rye's verdict: the cases as properties s0, s1, … of tools' config
    // schemas, a hundred to a tool; a finding's JSON pointer names its case.
    let env = Env::new();
    for (chunk, group) in cases.chunks(100).enumerate() {
        let dialect = group[0].0;
        let properties: serde_json::Map<String, Value> = group
            .iter()
            .enumerate()
            .map(|(i, (_, schema))| (format!("s{}", chunk * 100 + i), schema.clone()))
            .collect();
        let schema = with_dialect(dialect, json!({ "properties": properties }));
        env.write(
            &format!(".ai/tools/schemas/chunk{chunk}.yaml"),
            &format!(
                "version: \"1.0.0\"\ntool_type: script\nexecutor_id: rye/core/runtimes/bash/bash\ndescription: cases\nconfig_schema: {schema}\n"
            ),
        );
    }
    let out = env.rye(&["validate", "--format", "json", ".ai"]);
    let report: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|_| {
        panic!("{}", String::from_utf8_lossy(&out.stderr));
    });
    let mut rye = vec![None; cases.len()];
    for finding in report["findings"].as_array().unwrap() {
        if finding["rule"] != "rye/tool/config-schema" {
            continue;
        }
        let message = finding["message"].as_str().unwrap();
        let case: usize = message
            .split("at /properties/s")
            .nth(1)
            .and_then(|rest| rest.split(|c: char| !c.is_ascii_digit()).next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no case in {message:?}"));
        rye[case].get_or_insert(message.to_owned());
    }

    let disagreements: Vec<String> = cases
        .iter()
        .zip(python.iter().zip(&rye))
        .filter(|(_, (python, rye))| python.is_null() != rye.is_none())
        .map(|((dialect, schema), (python, rye))| {
            format!(
                "{} {schema}: jsonschema {python}, rye {rye:?}",
                dialect.unwrap_or("2020-12")
            )
        })
        .collect();
    let refused = rye.iter().filter(|r| r.is_some()).count();
    assert!(
        disagreements.is_empty(),
        "{} of {} cases disagree:\n{}",
        disagreements.len(),
        cases.len(),
        disagreements.join("\n")
    );
    assert!(
        refused > cases.len() / 4 && refused < cases.len() * 3 / 4,
        "{refused} of {} refused: the cases should mix valid and invalid",
        cases.len()
    );
}

fn with_dialect(dialect: Option<&str>, mut schema: Value) -> Value {
    if dialect == Some("draft-07") {
        schema["$schema"] = json!("http://json-schema.org/draft-07/schema#");
    }
    schema
}

#[test]
fn signing_a_component_tool_signs_its_wasm_and_it_runs_from_the_command_line() {
    let env = Env::new();
    env.ok(&["keys", "generate"]);
    env.ok(&["keys", "trust"]);
    let wasm = env.project.path().join(".ai/tools/demo/probe.wasm");
    std::fs::create_dir_all(wasm.parent().unwrap()).unwrap();
    std::fs::copy(artifacts::TOOL_PROBE, &wasm).unwrap();
    env.write(
        ".ai/tools/demo/probe.yaml",
        "version: \"1.0.0\"\ntool_type: wasm_component\n\
         executor_id: rye/core/runtimes/wasm/component\ncategory: demo\n\
         description: Echoes its parameters\nconfig:\n  component: probe.wasm\n",
    );
    let unsigned = env.rye(&["execute", "tool", "demo/probe"]);
    assert_eq!(unsigned.status.code(), Some(1));
    env.ok(&["sign", "tool", "demo/probe"]);
    assert!(wasm.with_extension("wasm.sig").is_file());
    let ran: Value = serde_json::from_str(&env.ok(&[
        "execute",
        "tool",
        "demo/probe",
        "--params",
        r#"{"do": "echo", "value": "hi"}"#,
    ]))
    .unwrap();
    assert_eq!(ran["data"], json!({"echo": "hi"}), "{ran:#}");
    // A component that is no command is not signed as a tool's.
    std::fs::copy(artifacts::PARSER_OVERRIDE, &wasm).unwrap();
    let refused = env.rye(&["sign", "tool", "demo/probe"]);
    assert_eq!(refused.status.code(), Some(1));
    let said = String::from_utf8_lossy(&refused.stdout).into_owned()
        + &String::from_utf8_lossy(&refused.stderr);
    assert!(said.contains("is not a wasi:cli command"), "{said}");
}

/// A server on loopback answering every request with `200` and the
/// path asked for; its port.
fn echo_server() -> u16 {
    use std::io::{Read as _, Write as _};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for mut stream in listener.incoming().map_while(Result::ok) {
            let mut request = Vec::new();
            let mut byte = [0u8; 1];
            while !request.ends_with(b"\r\n\r\n") && stream.read(&mut byte).unwrap_or(0) == 1 {
                request.push(byte[0]);
            }
            let request = String::from_utf8_lossy(&request).into_owned();
            let body = format!("asked for {}", request.split(' ').nth(1).unwrap_or(""));
            let _ = write!(
                stream,
                "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: {}\r\n\
                 connection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    port
}

#[test]
fn the_http_fetch_example_reaches_its_listed_host_and_is_denied_any_other() {
    let env = Env::new();
    env.ok(&["keys", "generate"]);
    env.ok(&["keys", "trust"]);
    let listed = echo_server();
    let other = echo_server();
    let item = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples/http-fetch/.ai/tools/examples/http-fetch.yaml");
    let item = std::fs::read_to_string(item).unwrap();
    assert!(item.contains("hosts: [example.com]"), "{item}");
    let tools = env.project.path().join(".ai/tools/examples");
    std::fs::create_dir_all(&tools).unwrap();
    std::fs::write(
        tools.join("http-fetch.yaml"),
        item.replace(
            "hosts: [example.com]",
            &format!("hosts: [\"127.0.0.1:{listed}\"]"),
        ),
    )
    .unwrap();
    std::fs::copy(artifacts::HTTP_FETCH, tools.join("http-fetch.wasm")).unwrap();
    env.ok(&["sign", "tool", "examples/http-fetch"]);
    let fetched: Value = serde_json::from_str(&env.ok(&[
        "execute",
        "tool",
        "examples/http-fetch",
        "--trace",
        "--params",
        &json!({"url": format!("http://127.0.0.1:{listed}/status")}).to_string(),
    ]))
    .unwrap();
    assert_eq!(fetched["data"]["status"], 200, "{fetched:#}");
    assert_eq!(fetched["data"]["text"], "asked for /status", "{fetched:#}");
    let granted = trace_step(&fetched, "component")
        .unwrap_or_else(|| panic!("no component step: {fetched:#}"));
    assert_eq!(granted["hosts"], json!([format!("127.0.0.1:{listed}")]));
    assert_eq!(granted["files"], json!([]), "no folder is granted");

    let refused = env.rye(&[
        "execute",
        "tool",
        "examples/http-fetch",
        "--params",
        &json!({"url": format!("http://127.0.0.1:{other}/")}).to_string(),
    ]);
    assert_eq!(refused.status.code(), Some(1));
    let refused: Value = serde_json::from_slice(&refused.stdout).unwrap();
    let error = refused["error"].as_str().unwrap();
    assert!(
        error.contains(&format!(
            "tool \"examples/http-fetch\" was denied HTTP to http://127.0.0.1:{other}: \
             not among the hosts its item grants (capabilities.network.hosts)"
        )),
        "{refused:#}"
    );
}

#[test]
fn the_file_search_example_finds_lines_with_only_read_access_to_the_project() {
    let env = Env::new();
    env.ok(&["keys", "generate"]);
    env.ok(&["keys", "trust"]);
    let item = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples/file-search/.ai/tools/examples/file-search.yaml");
    let tools = env.project.path().join(".ai/tools/examples");
    std::fs::create_dir_all(&tools).unwrap();
    std::fs::copy(&item, tools.join("file-search.yaml")).unwrap();
    std::fs::copy(artifacts::FILE_SEARCH, tools.join("file-search.wasm")).unwrap();
    env.write(
        "notes/plan.md",
        "# Plan\nship the parser\nthen the walker\n",
    );
    env.write("src/lib.rs", "// the parser lives here\n");
    env.ok(&["sign", "tool", "examples/file-search"]);
    let found: Value = serde_json::from_str(&env.ok(&[
        "execute",
        "tool",
        "examples/file-search",
        "--params",
        r#"{"query": "parser"}"#,
    ]))
    .unwrap();
    assert_eq!(
        found["data"]["matches"],
        json!([
            {"path": "notes/plan.md", "line": 2, "text": "ship the parser"},
            {"path": "src/lib.rs", "line": 1, "text": "// the parser lives here"},
        ]),
        "{found:#}"
    );
    // A folder outside the project is no parameter it takes.
    let refused = env.rye(&[
        "execute",
        "tool",
        "examples/file-search",
        "--params",
        r#"{"query": "root", "path": "../.."}"#,
    ]);
    assert_eq!(refused.status.code(), Some(1));
    let refused: Value = serde_json::from_slice(&refused.stdout).unwrap();
    assert!(
        refused["error"]
            .as_str()
            .unwrap()
            .contains("not a folder of the project"),
        "{refused:#}"
    );
}

/// `link-order.txt` lays out a release build's code (`build.rs`); a
/// regenerated file (`.ci/link-order`) must hold symbol names, each once,
/// and enough of them to be the functions of a call.
#[test]
fn the_link_order_is_symbol_names_each_once() {
    let order = include_str!("../link-order.txt");
    let mut seen = std::collections::HashSet::new();
    for (n, name) in order.lines().enumerate() {
        let symbol = name.starts_with(|c: char| c.is_ascii_alphabetic() || "_.$".contains(c))
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "_.$".contains(c));
        assert!(symbol, "line {}: {name:?} is no symbol name", n + 1);
        assert!(seen.insert(name), "line {}: {name} a second time", n + 1);
    }
    assert!(seen.len() >= 1000, "{} names", seen.len());
}
