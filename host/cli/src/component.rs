//! `rye component new | build | inspect`: the author's workflow.
//!
//! `new` writes a crate that builds on its own: the guest SDK and the WIT
//! contract this binary was built with are copied into its `vendor/`
//! folder, so the component is built against exactly the contract the host
//! that made it implements. `build` runs cargo for `wasm32-wasip2`, checks
//! the result loads as its world, installs it under the space's `.ai/` and
//! signs it when a signing key exists. `inspect` reads any component file.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};
use rye_host::{ComponentHost, Rye, Signable, Space, World, component_folder};

/// The guest SDK and contract sources, as this binary was built with them.
const SDK_SOURCES: &[(&str, &str)] = &[
    (
        "rye-guest/src/lib.rs",
        include_str!("../../../guest-sdk/src/lib.rs"),
    ),
    (
        "rye-guest/src/parser.rs",
        include_str!("../../../guest-sdk/src/parser.rs"),
    ),
    (
        "rye-guest/src/adapter.rs",
        include_str!("../../../guest-sdk/src/adapter.rs"),
    ),
    (
        "rye-guest/src/validator.rs",
        include_str!("../../../guest-sdk/src/validator.rs"),
    ),
    (
        "rye-guest/src/walker.rs",
        include_str!("../../../guest-sdk/src/walker.rs"),
    ),
    (
        "rye-guest/src/tool.rs",
        include_str!("../../../guest-sdk/src/tool.rs"),
    ),
    (
        "rye-guest/src/diagnostics.rs",
        include_str!("../../../guest-sdk/src/diagnostics.rs"),
    ),
    (
        "wit/rye-plugin@0.1.0/types.wit",
        include_str!("../../../wit/rye-plugin@0.1.0/types.wit"),
    ),
    (
        "wit/rye-plugin@0.1.0/parsing.wit",
        include_str!("../../../wit/rye-plugin@0.1.0/parsing.wit"),
    ),
    (
        "wit/rye-plugin@0.1.0/planning.wit",
        include_str!("../../../wit/rye-plugin@0.1.0/planning.wit"),
    ),
    (
        "wit/rye-plugin@0.1.0/validation.wit",
        include_str!("../../../wit/rye-plugin@0.1.0/validation.wit"),
    ),
    (
        "wit/rye-plugin@0.1.0/walking.wit",
        include_str!("../../../wit/rye-plugin@0.1.0/walking.wit"),
    ),
    (
        "wit/rye-plugin@0.1.0/running.wit",
        include_str!("../../../wit/rye-plugin@0.1.0/running.wit"),
    ),
    (
        "wit/rye-plugin@0.1.0/worlds.wit",
        include_str!("../../../wit/rye-plugin@0.1.0/worlds.wit"),
    ),
];

/// The vendored SDK's manifest: the workspace's `guest-sdk/Cargo.toml`
/// with what it inherits from the workspace written out.
const SDK_MANIFEST: &str = r#"[package]
name = "rye-guest"
description = "Write Rye plugins (parsers, runtime adapters, validators, graph walkers, tools) as WebAssembly components"
version = "0.1.0"
edition = "2024"
rust-version = "1.95"
license = "Apache-2.0"
publish = false

[features]
parser = []
runtime-adapter = []
validator = []
graph-walker = []
tool = []

[dependencies]
wit-bindgen = "0.63"
serde_json = { version = "1", features = ["preserve_order", "float_roundtrip"] }
"#;

/// What a scaffold makes: a plugin of one of the host's worlds, or a
/// tool (the `tool` world), which installs beside its item.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scaffold {
    Plugin(World),
    Tool,
}

impl Scaffold {
    fn name(self) -> &'static str {
        match self {
            Self::Plugin(world) => world.name(),
            Self::Tool => "tool",
        }
    }
}

/// The world a scaffold implements, and where its components install.
pub fn world_named(name: &str) -> Result<Scaffold> {
    Ok(Scaffold::Plugin(match name {
        "parser" => World::Parser,
        "runtime-adapter" | "adapter" => World::RuntimeAdapter,
        "validator" => World::Validator,
        "graph-walker" | "walker" => World::GraphWalker,
        "tool" => return Ok(Scaffold::Tool),
        other => {
            bail!(
                "unknown world {other:?}: parser, runtime-adapter, validator, graph-walker or tool"
            )
        }
    }))
}

/// The item a tool scaffold starts with: the component beside it, no
/// capability granted.
fn tool_item(name: &str) -> String {
    format!(
        r#"version: "1.0.0"
tool_type: wasm_component
executor_id: rye/core/runtimes/wasm/component
category: ""
description: Counts the words of a text.
config:
  component: {name}.wasm
  # What the tool may reach; nothing is granted that is not listed here.
  capabilities:
    files: []            # e.g. {{path: "{{project_path}}", access: read}}
    env: []              # variable names
    network: {{hosts: []}} # e.g. api.example.com
    limits: {{deadline_ms: 5000}}
config_schema:
  type: object
  properties:
    text: {{type: string, description: The text to count}}
  required: [text]
"#
    )
}

/// Writes a new component crate `name` for `kind` in `dir`.
pub fn new(kind: Scaffold, name: &str, dir: &Path, out: &mut impl Write) -> Result<()> {
    let valid = !name.is_empty()
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_');
    if !valid {
        bail!(
            "{name:?} is not a crate name: lowercase letters, digits, - and _, starting with a letter"
        );
    }
    if dir.exists() && std::fs::read_dir(dir)?.next().is_some() {
        bail!("{}: already exists and is not empty", dir.display());
    }
    let install = match kind {
        Scaffold::Plugin(world) => format!("{}/{name}.wasm", component_folder(world)),
        Scaffold::Tool => format!("tools/{name}.wasm"),
    };
    let manifest = format!(
        r#"[package]
name = "{name}"
version = "0.1.0"
edition = "2024"
publish = false

[lib]
crate-type = ["cdylib"]

# `rye component build` installs the component here, under a space's .ai/.
[package.metadata.rye]
install = "{install}"

[dependencies]
rye-guest = {{ path = "vendor/rye-guest", features = ["{feature}"] }}

# A component of its own, not a member of an enclosing workspace.
[workspace]

[profile.release]
opt-level = "s"
debug = false
strip = "debuginfo"
"#,
        feature = kind.name(),
    );
    let mut files: Vec<(PathBuf, String)> = vec![
        (dir.join("Cargo.toml"), manifest),
        (dir.join("src/lib.rs"), template(kind, name)),
        (dir.join(".gitignore"), "/target\n".into()),
        (dir.join("vendor/rye-guest/Cargo.toml"), SDK_MANIFEST.into()),
    ];
    if kind == Scaffold::Tool {
        files.push((dir.join(format!("{name}.yaml")), tool_item(name)));
    }
    for (relative, text) in SDK_SOURCES {
        files.push((dir.join("vendor").join(relative), (*text).to_owned()));
    }
    for (path, text) in &files {
        std::fs::create_dir_all(path.parent().expect("a file in a folder"))
            .with_context(|| format!("creating {}", path.display()))?;
        std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))?;
    }
    writeln!(out, "created {} ({} component)", dir.display(), kind.name())?;
    writeln!(out, "  src/lib.rs       the component; edit it")?;
    if kind == Scaffold::Tool {
        writeln!(
            out,
            "  {name}.yaml  its tool item: description, capabilities, parameters"
        )?;
    }
    writeln!(
        out,
        "  vendor/          the guest SDK and rye:plugin@{} contract",
        rye_host::CONTRACT_VERSION
    )?;
    writeln!(
        out,
        "build and install it with: rye component build {}",
        dir.display()
    )?;
    Ok(())
}

fn template(kind: Scaffold, name: &str) -> String {
    let world = match kind {
        Scaffold::Plugin(world) => world,
        Scaffold::Tool => {
            return format!(
                r#"//! {name}: a tool component. Each execute of its item calls `run` with
//! the caller's parameters; the answer becomes the execute's data. It
//! reaches only the folders, variables and hosts its item grants.

use rye_guest::serde_json::{{Value, json}};
use rye_guest::tool::{{Call, Tool, ToolError}};

struct WordCount;

impl Tool for WordCount {{
    fn run(call: Call) -> Result<Value, ToolError> {{
        let text = call.parameters["text"]
            .as_str()
            .ok_or_else(|| ToolError::InvalidParameters("text is required: the text to count".into()))?;
        Ok(json!({{"words": text.split_whitespace().count(), "characters": text.chars().count()}}))
    }}
}}

rye_guest::export_tool!(WordCount);
"#
            );
        }
    };
    match world {
        World::Parser => format!(
            r#"//! {name}: a parser component. It reads `key = value` lines into
//! tool metadata; install it, then map an extension to it in a tool
//! extractor (`parsers: {{".kv": "{name}"}}`).

use rye_guest::parser::{{Diagnostic, ParseError, ParseInput, Parsed, Parser}};
use rye_guest::serde_json::{{Map, Value}};

struct KeyValue;

impl Parser for KeyValue {{
    fn parse(input: ParseInput) -> Result<Parsed, ParseError> {{
        let mut document = Map::new();
        let mut diagnostics = Vec::new();
        for (n, line) in input.content.lines().enumerate() {{
            let line_no = n as u32 + 1;
            let text = line.trim();
            if text.is_empty() || text.starts_with('#') {{
                continue;
            }}
            match text.split_once('=') {{
                Some((key, value)) => {{
                    document.insert(key.trim().to_owned(), Value::from(value.trim()));
                }}
                None => diagnostics.push(
                    Diagnostic::warning("{name}/not-key-value", format!("line {{line_no}} is not key = value"))
                        .at(line_no, 1),
                ),
            }}
        }}
        let mut parsed = Parsed::new(document);
        for d in diagnostics {{
            parsed = parsed.with_diagnostic(d);
        }}
        Ok(parsed)
    }}
}}

rye_guest::export_parser!(KeyValue);
"#
        ),
        World::RuntimeAdapter => format!(
            r#"//! {name}: a runtime adapter component. A runtime YAML names it with
//! `adapter: {name}`; for each tool of that runtime it plans the process
//! the host runs. This one runs the tool file with the interpreter the
//! runtime's `config.command` names, parameters as JSON on stdin.

use rye_guest::adapter::{{ElementError, PlanError, PlanInput, Planned, ProcessPlan, RuntimeAdapter}};
use rye_guest::serde_json::Value;

struct Adapter;

impl RuntimeAdapter for Adapter {{
    fn plan(input: PlanInput) -> Result<Planned, PlanError> {{
        let tool = input
            .chain
            .first()
            .ok_or_else(|| PlanError::Unsupported("an empty chain".into()))?;
        let runtime = input.chain.get(1).unwrap_or(tool);
        let metadata: Value = rye_guest::serde_json::from_str(&runtime.metadata)
            .map_err(|e| PlanError::Unsupported(format!("metadata is not JSON: {{e}}")))?;
        let command = metadata["config"]["command"].as_str().ok_or_else(|| {{
            PlanError::Config(ElementError {{
                item_id: runtime.item_id.clone(),
                message: "config.command names no interpreter".into(),
            }})
        }})?;
        Ok(ProcessPlan::new(command)
            .arg(&tool.path)
            .cwd(&input.project_path)
            .stdin(input.parameters.into_bytes())
            .into())
    }}
}}

rye_guest::export_adapter!(Adapter);
"#
        ),
        World::Validator => format!(
            r#"//! {name}: a validator component. `rye validate`, `rye sign` and
//! `rye execute` run it on every item of the kinds it asks for; its
//! errors stop signing and execution. This one asks every tool for a
//! description.

use rye_guest::serde_json::Value;
use rye_guest::validator::{{Diagnostic, ItemKind, Subject, Validator, ValidatorInfo}};

struct Policy;

impl Validator for Policy {{
    fn describe() -> ValidatorInfo {{
        ValidatorInfo::new("{name}", "0.1.0").kinds([ItemKind::Tool])
    }}

    fn validate(subject: Subject) -> Result<Vec<Diagnostic>, String> {{
        let Subject::Item(item) = subject else {{
            return Ok(Vec::new());
        }};
        let parsed: Value = rye_guest::serde_json::from_str(&item.parsed).map_err(|e| e.to_string())?;
        let described = ["__tool_description__", "description", "__docstring__"]
            .iter()
            .any(|key| parsed.get(*key).and_then(Value::as_str).is_some_and(|s| !s.trim().is_empty()));
        Ok(if described {{
            Vec::new()
        }} else {{
            vec![Diagnostic::error("{name}/description", format!("tool {{}} has no description", item.item_id))]
        }})
    }}
}}

rye_guest::export_validator!(Policy);
"#
        ),
        World::GraphWalker => format!(
            r#"//! {name}: a graph walker component. A graph's runtime names it with
//! `walker: {name}`; the host asks it, step by step, what a graph run
//! does next and does it. This one ends every run at once, its result the
//! run's inputs: a start to grow a walker from.

use rye_guest::serde_json::{{Value, json}};
use rye_guest::walker::{{Change, Clock, GraphWalker, Next, Outcome, WalkInput}};

struct Walker;

fn ended(input: &WalkInput) -> Outcome {{
    let inputs: Value = rye_guest::serde_json::from_str(&input.parameters).unwrap_or(Value::Null);
    Outcome {{
        changes: vec![Change {{ key: "inputs".into(), value: Some(inputs.to_string()) }}],
        cursor: json!({{"ended": true}}).to_string(),
        node: None,
        steps: 0,
        events: Vec::new(),
        next: Next::Finished(
            json!({{"success": true, "status": "completed", "output": inputs, "graph_run_id": input.run_id}})
                .to_string(),
        ),
    }}
}}

impl GraphWalker for Walker {{
    fn start(input: WalkInput, _now: Clock) -> Result<Outcome, String> {{
        Ok(ended(&input))
    }}

    fn resume(input: WalkInput, _state: Vec<(String, String)>, _cursor: String, _inputs: String, _now: Clock) -> Result<Outcome, String> {{
        Ok(ended(&input))
    }}

    fn advance(_results: Vec<String>, _now: Clock) -> Result<Outcome, String> {{
        Err("{name} asks for no action".into())
    }}

    fn analyze(_input: WalkInput) -> String {{
        json!({{"success": true, "errors": [], "warnings": [], "node_count": 0}}).to_string()
    }}
}}

rye_guest::export_walker!(Walker);
"#
        ),
    }
}

/// Builds the component crate in `dir` and installs it into `space`.
pub fn build(
    rye: &Rye,
    project: Option<&Path>,
    dir: &Path,
    space: Space,
    name: Option<&str>,
    out: &mut impl Write,
) -> Result<()> {
    let manifest = dir.join("Cargo.toml");
    if !manifest.is_file() {
        bail!(
            "{}: no Cargo.toml (make a component with `rye component new`)",
            dir.display()
        );
    }
    let output = Command::new("cargo")
        .args([
            "build",
            "--release",
            "--target",
            "wasm32-wasip2",
            "--message-format=json-render-diagnostics",
        ])
        .arg("--manifest-path")
        .arg(&manifest)
        .stderr(std::process::Stdio::inherit())
        .output()
        .context("running cargo (is Rust installed, with `rustup target add wasm32-wasip2`?)")?;
    if !output.status.success() {
        bail!("cargo build of {} failed", manifest.display());
    }
    let mut built: Option<(PathBuf, serde_json::Value)> = None;
    for line in String::from_utf8_lossy(&output.stdout).lines() {
        let Ok(message) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        if message["reason"] != "compiler-artifact" {
            continue;
        }
        if let Some(wasm) = message["filenames"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|f| f.as_str())
            .find(|f| f.ends_with(".wasm"))
        {
            built = Some((PathBuf::from(wasm), message["target"]["name"].clone()));
        }
    }
    let Some((wasm, target)) = built else {
        bail!(
            "cargo built no .wasm from {} (is the crate a cdylib?)",
            manifest.display()
        );
    };
    let inspection = rye.components().inspect(&wasm)?;
    if let Err(e) = &inspection.loads {
        bail!(
            "{} was built, but this host would not load it: {e}",
            wasm.display()
        );
    }
    let kind = match (inspection.world, inspection.tool) {
        (Some(world), _) => Scaffold::Plugin(world),
        (None, Some(_)) => Scaffold::Tool,
        (None, None) => bail!("{} exports no rye:plugin world", wasm.display()),
    };
    let crate_name = target.as_str().unwrap_or("component").replace('_', "-");
    let name = name.map_or_else(|| crate_name.clone(), str::to_owned);
    rye_host::validate_plugin_name(&name)?;
    let spaces = rye.spaces(project);
    let root = spaces
        .root(space)
        .with_context(|| format!("there is no {space} space here to install into"))?;
    if space == Space::System {
        bail!("the system space is built into Rye; install into the project or user space");
    }
    let folder = match kind {
        Scaffold::Plugin(world) => component_folder(world),
        Scaffold::Tool => "tools",
    };
    let target_path = root.ai_dir.join(folder).join(format!("{name}.wasm"));
    std::fs::create_dir_all(target_path.parent().expect("a file in a folder"))?;
    std::fs::copy(&wasm, &target_path)
        .with_context(|| format!("installing {}", target_path.display()))?;
    writeln!(
        out,
        "built {} ({} component, {} KiB), installed as {}",
        wasm.display(),
        inspection.tool.unwrap_or(kind.name()),
        inspection.size.div_ceil(1024),
        target_path.display()
    )?;
    let (signable, noun) = match kind {
        Scaffold::Plugin(world) => (
            Signable::Component(component_folder(world)),
            match world {
                World::Parser => "parser",
                World::RuntimeAdapter => "adapter",
                World::Validator => "validator",
                World::GraphWalker => "walker",
            },
        ),
        Scaffold::Tool => {
            install_tool_item(dir, &crate_name, &name, &target_path, out)?;
            (Signable::Item(rye_host::ItemKind::Tool), "tool")
        }
    };
    match rye.signing_key() {
        Ok(_) => {
            let signed = rye.sign(project, signable, &name, space)?;
            writeln!(out, "signed: {}", signed.signature_path.display())?;
        }
        Err(_) => writeln!(
            out,
            "not signed (no signing key): run `rye keys generate`, then `rye sign {noun} {name}`"
        )?,
    }
    Ok(())
}

/// Puts the tool's item beside its installed `.wasm` unless one is there
/// already (an item edited in place is the author's, never replaced): the
/// crate's `<crate>.yaml`, naming the component as installed.
fn install_tool_item(
    dir: &Path,
    crate_name: &str,
    name: &str,
    wasm: &Path,
    out: &mut impl Write,
) -> Result<()> {
    let item = wasm.with_extension("yaml");
    if item.exists() {
        return writeln!(out, "its item is {} (kept as it is)", item.display()).map_err(Into::into);
    }
    let source = dir.join(format!("{crate_name}.yaml"));
    let text = std::fs::read_to_string(&source).with_context(|| {
        format!(
            "{} has no tool item: write {} (tool_type: wasm_component, config.component: \
             {name}.wasm)",
            dir.display(),
            source.display()
        )
    })?;
    let text = text.replace(
        &format!("component: {crate_name}.wasm"),
        &format!("component: {name}.wasm"),
    );
    std::fs::write(&item, text).with_context(|| format!("writing {}", item.display()))?;
    writeln!(out, "its item: {}", item.display())?;
    Ok(())
}

/// Prints what the component at `path` is.
pub fn inspect(host: &ComponentHost, path: &Path, json: bool, out: &mut impl Write) -> Result<()> {
    let i = host.inspect(path)?;
    if json {
        let value = serde_json::json!({
            "path": i.path,
            "size": i.size,
            "sha256": hex(&i.hash),
            "world": i.world.map(|w| w.name()).or(i.tool),
            "contract_version": i.contract_version,
            "exports": i.exports,
            "imports": i.imports,
            "loads": i.loads.is_ok(),
            "error": i.loads.as_ref().err().map(|e| e.to_string()),
        });
        serde_json::to_writer_pretty(&mut *out, &value)?;
        writeln!(out)?;
        return Ok(());
    }
    writeln!(out, "{}", i.path.display())?;
    writeln!(out, "  size      {} bytes", i.size)?;
    writeln!(out, "  sha256    {}", hex(&i.hash))?;
    match (i.world.map(|w| w.name()).or(i.tool), &i.contract_version) {
        (Some(world), Some(version)) => {
            writeln!(out, "  world     {world} (rye:plugin@{version})")?
        }
        (Some(command), None) => writeln!(out, "  world     {command} (wasi:cli, a tool)")?,
        _ => writeln!(out, "  world     none (no rye:plugin export)")?,
    }
    writeln!(out, "  exports")?;
    for e in &i.exports {
        writeln!(out, "    {e}")?;
    }
    writeln!(out, "  imports")?;
    for e in &i.imports {
        writeln!(out, "    {e}")?;
    }
    match &i.loads {
        Ok(()) => writeln!(
            out,
            "  loads     yes, as a {} component",
            i.world.map(|w| w.name()).or(i.tool).unwrap_or("?")
        )?,
        Err(e) => writeln!(out, "  loads     no: it {e}")?,
    }
    Ok(())
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
