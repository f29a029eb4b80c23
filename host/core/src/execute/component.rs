//! Component tools: a chain that ends in the component primitive runs
//! the tool's own `.wasm` (a `wasi:cli` command beside the item, signed
//! like every component) in the engine, with exactly the capabilities
//! its signed item declares, within the bounds its runtime sets:
//!
//! ```yaml
//! tool_type: wasm_component
//! executor_id: rye/core/runtimes/wasm/component
//! config:
//!   component: search.wasm
//!   capabilities:
//!     files:
//!       - {path: "{project_path}", access: read}
//!       - {path: "{project_path}/.ai/state/search", access: write}
//!     env: [LANG]
//!     network: {hosts: [api.example.com, "127.0.0.1:8080", "*.example.org"]}
//!     limits: {deadline_ms: 2000, memory_bytes: 67108864, output_bytes: 1048576}
//! ```
//!
//! Parameters go in as JSON on stdin and JSON on stdout is the data, as
//! for a process tool; its arguments are the item's path and the
//! project's (each folder is at its own path inside the tool). Outgoing
//! HTTP (`wasi:http`) reaches only the hosts listed, each on its scheme's
//! port unless it names one. Nothing is ambient: no file, variable, host
//! or socket the item does not name reaches the tool.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use rye_components::{CommandGrants, CommandOutput, CommandStop, DirGrant, HostRule, Limits};
use serde_json::{Map, Value, json};

use super::{Ran, Stage, ToolRun};
use crate::ErrorReply;
use crate::chain::Chain;
use crate::tool_component::component_path;
use crate::trace::Step;

/// What a runtime allows when its config says nothing.
const DEFAULT_DEADLINE_MS: u64 = 10_000;
const DEFAULT_MEMORY: u64 = 128 << 20;
const DEFAULT_OUTPUT: u64 = 4 << 20;
/// The ceilings a runtime's own bounds may not pass: the memory the
/// engine reserves per instance, an hour of CPU, 64 MiB of output.
const CEILING_DEADLINE_MS: u64 = 3_600_000;
const CEILING_MEMORY: u64 = 256 << 20;
const CEILING_OUTPUT: u64 = 64 << 20;

/// A limit: its name in the item, its default and its bound.
struct Bound {
    key: &'static str,
    default: u64,
    max: u64,
}

/// The capabilities a component tool is given, as resolved for one run.
#[derive(Debug, Clone)]
pub(crate) struct Granted {
    pub(crate) grants: CommandGrants,
    /// Variable names asked for (their values are not shown).
    pub(crate) env_names: Vec<String>,
}

/// Reads an unsigned number at `key` of `map`, or `default`.
fn number(map: Option<&Map<String, Value>>, key: &str, default: u64) -> Result<u64, String> {
    match map.and_then(|m| m.get(key)) {
        None | Some(Value::Null) => Ok(default),
        Some(value) => value
            .as_u64()
            .ok_or_else(|| format!("{key} is {value}, not a whole number of at least 0")),
    }
}

/// The limits the tool asks for (or the runtime's defaults), each within
/// the runtime's bound.
fn limits(
    tool: Option<&Map<String, Value>>,
    runtime: Option<&Map<String, Value>>,
) -> Result<(Limits, usize), String> {
    let bounds = [
        ("deadline_ms", DEFAULT_DEADLINE_MS, CEILING_DEADLINE_MS),
        ("memory_bytes", DEFAULT_MEMORY, CEILING_MEMORY),
        ("output_bytes", DEFAULT_OUTPUT, CEILING_OUTPUT),
    ]
    .map(|(key, default, ceiling)| -> Result<Bound, String> {
        let max = number(runtime, &format!("max_{key}"), ceiling)?.min(ceiling);
        let default = number(runtime, key, default)?.min(max);
        Ok(Bound { key, default, max })
    });
    let mut values = [0u64; 3];
    for (slot, bound) in values.iter_mut().zip(bounds) {
        let bound = bound.map_err(|e| format!("its runtime's config: {e}"))?;
        let asked = number(tool, bound.key, bound.default)?;
        if asked > bound.max {
            return Err(format!(
                "limits.{} is {asked}, past the {} its runtime allows",
                bound.key, bound.max
            ));
        }
        if asked == 0 {
            return Err(format!("limits.{} is 0", bound.key));
        }
        *slot = asked;
    }
    Ok((
        Limits {
            deadline: std::time::Duration::from_millis(values[0]),
            memory: values[1] as usize,
        },
        values[2] as usize,
    ))
}

/// `path` with `{project_path}` or `{tool_dir}` put in, which must be
/// one of them or a folder under it (links followed): nothing else may
/// be granted.
fn granted_dir(path: &str, project: Option<&Path>, tool_dir: &Path) -> Result<PathBuf, String> {
    let (root, rest, name) = if let Some(rest) = path.strip_prefix("{project_path}") {
        let project = project.ok_or_else(|| {
            format!("files: {path:?} names the project, but the run has no project")
        })?;
        (project, rest, "{project_path}")
    } else if let Some(rest) = path.strip_prefix("{tool_dir}") {
        (tool_dir, rest, "{tool_dir}")
    } else {
        return Err(format!(
            "files: {path:?} is neither {{project_path}}, {{tool_dir}} nor a folder under one"
        ));
    };
    if !(rest.is_empty() || rest.starts_with('/')) {
        return Err(format!("files: {path:?} does not continue {name} with /"));
    }
    let rest = rest.trim_start_matches('/');
    if rest
        .split('/')
        .any(|part| part == ".." || part == "." || part.contains('{'))
    {
        return Err(format!(
            "files: {path:?} may not use `.`, `..` or other placeholders"
        ));
    }
    let root = root
        .canonicalize()
        .map_err(|e| format!("files: {name} ({}): {e}", root.display()))?;
    let joined = if rest.is_empty() {
        root.clone()
    } else {
        root.join(rest)
    };
    let resolved = joined
        .canonicalize()
        .map_err(|e| format!("files: {path:?} ({}): {e}", joined.display()))?;
    if !resolved.starts_with(&root) {
        return Err(format!(
            "files: {path:?} leads out of {name} (to {})",
            resolved.display()
        ));
    }
    if !resolved.is_dir() {
        return Err(format!("files: {path:?} is not a folder"));
    }
    Ok(resolved)
}

/// What the tool's `config.capabilities` grants, checked against its
/// runtime's bounds.
pub(crate) fn capabilities(
    config: Option<&Map<String, Value>>,
    runtime: Option<&Map<String, Value>>,
    project: Option<&Path>,
    tool_dir: &Path,
) -> Result<Granted, String> {
    let capabilities = match config.and_then(|c| c.get("capabilities")) {
        None | Some(Value::Null) => None,
        Some(Value::Object(map)) => Some(map),
        Some(other) => return Err(format!("capabilities is {other}, not a mapping")),
    };
    if let Some(unknown) = capabilities
        .into_iter()
        .flat_map(|c| c.keys())
        .find(|k| !["files", "env", "network", "limits"].contains(&k.as_str()))
    {
        return Err(format!(
            "capabilities.{unknown} is not a capability (files, env, network, limits)"
        ));
    }
    let field = |key: &str| capabilities.and_then(|c| c.get(key));
    let mut dirs = Vec::new();
    match field("files") {
        None | Some(Value::Null) => {}
        Some(Value::Array(files)) => {
            for file in files {
                let path = file
                    .get("path")
                    .and_then(Value::as_str)
                    .ok_or_else(|| format!("files: {file} has no path"))?;
                let writable = match file.get("access").and_then(Value::as_str) {
                    None | Some("read") => false,
                    Some("write") => true,
                    Some(other) => {
                        return Err(format!(
                            "files: {path:?} has access {other:?}, not read or write"
                        ));
                    }
                };
                let host = granted_dir(path, project, tool_dir)?;
                let guest = host
                    .to_str()
                    .ok_or_else(|| format!("files: {} is not UTF-8", host.display()))?
                    .to_owned();
                dirs.push(DirGrant {
                    host,
                    guest,
                    writable,
                });
            }
        }
        Some(other) => return Err(format!("files is {other}, not a list")),
    }
    let mut env = Vec::new();
    let mut env_names = Vec::new();
    match field("env") {
        None | Some(Value::Null) => {}
        Some(Value::Array(names)) => {
            for name in names {
                let name = name
                    .as_str()
                    .filter(|n| {
                        !n.is_empty() && n.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
                    })
                    .ok_or_else(|| format!("env: {name} is not a variable name"))?;
                env_names.push(name.to_owned());
                if let Ok(value) = std::env::var(name) {
                    env.push((name.to_owned(), value));
                }
            }
        }
        Some(other) => return Err(format!("env is {other}, not a list of names")),
    }
    let hosts = match field("network") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Object(network)) => {
            if let Some(unknown) = network.keys().find(|k| k.as_str() != "hosts") {
                return Err(format!("network.{unknown} is not known (hosts)"));
            }
            match network.get("hosts") {
                None | Some(Value::Null) => Vec::new(),
                Some(Value::Array(hosts)) => hosts
                    .iter()
                    .map(|host| {
                        host.as_str()
                            .ok_or_else(|| format!("{host} is not a host"))
                            .and_then(str::parse::<HostRule>)
                            .map_err(|e| format!("network.hosts: {e}"))
                    })
                    .collect::<Result<_, _>>()?,
                Some(other) => return Err(format!("network.hosts is {other}, not a list")),
            }
        }
        Some(other) => return Err(format!("network is {other}, not a mapping")),
    };
    let tool_limits = match field("limits") {
        None | Some(Value::Null) => None,
        Some(Value::Object(map)) => Some(map),
        Some(other) => return Err(format!("limits is {other}, not a mapping")),
    };
    let (limits, output_cap) = limits(tool_limits, runtime)?;
    Ok(Granted {
        grants: CommandGrants {
            dirs,
            env,
            limits,
            output_cap,
            hosts,
            ..CommandGrants::default()
        },
        env_names,
    })
}

/// Stops a tool's run when the future that waits for it is dropped.
struct StopOnDrop(Arc<AtomicBool>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// What a tool was denied, naming the capability, if anything.
fn denied(tool_id: &str, denied: &[String]) -> Option<String> {
    (!denied.is_empty()).then(|| {
        format!(
            "tool {tool_id:?} was denied HTTP to {}: not among the hosts its item grants \
             (capabilities.network.hosts)",
            denied.join(", ")
        )
    })
}

impl ToolRun<'_> {
    /// Runs the component tool at the head of `chain`.
    pub(super) async fn run_component(&mut self, chain: &Chain) -> Stage<Ran> {
        let tool = chain.tool();
        let tool_id = tool.item_id.clone();
        let refuse = |run: &mut Self, why: String| {
            run.fail(ErrorReply::new(format!("tool {tool_id:?}: {why}")))
        };
        let config = tool.metadata.get("config").and_then(Value::as_object);
        // The runtime is the element whose executor is the primitive.
        let runtime = chain
            .elements
            .iter()
            .rev()
            .nth(1)
            .and_then(|e| e.metadata.get("config"))
            .and_then(Value::as_object);
        let tool_dir = tool.path.parent().unwrap_or(Path::new(".")).to_owned();
        let project = self
            .session
            .spaces
            .root(rye_space::Space::Project)
            .map(|r| r.base.clone());
        let path = match component_path(config, &tool_dir) {
            Ok(path) => path,
            Err(why) => return Err(refuse(self, why)),
        };
        let granted = match capabilities(config, runtime, project.as_deref(), &tool_dir) {
            Ok(granted) => granted,
            Err(why) => return Err(refuse(self, format!("capabilities: {why}"))),
        };
        let trust = self.session.trust(self.rye);
        let mut signed = None;
        let loaded = self
            .rye
            .components
            .load_command(&path, |hash| {
                self.rye
                    .verify_component(&trust, tool.space, &path, *hash)
                    .map(|s| signed = Some(s))
            })
            .map_err(|e| self.host_failure(&crate::HostError::Component(e)))?
            .map_err(|e| self.host_failure(&e))?;
        let signed = signed.expect("checked before loading");
        self.warnings
            .extend(signed.warning(&format!("component {}", path.display())));
        self.step(Step::VerifyIntegrity {
            item: format!("{tool_id} component"),
            path: path.clone(),
            signed,
        });
        let Granted {
            mut grants,
            env_names,
        } = granted;
        // As for a process tool: the tool's file and the project, so a
        // tool can find the folders it was granted; a typed tool is told
        // its id and the project.
        let project_path = project
            .as_deref()
            .and_then(|p| p.canonicalize().ok())
            .map(|p| p.display().to_string());
        grants.args = vec![
            tool.path.display().to_string(),
            project_path.clone().unwrap_or_default(),
        ];
        grants.item_id = tool_id.clone();
        grants.project_path = project_path;
        self.step(Step::Component {
            path: path.clone(),
            files: grants
                .dirs
                .iter()
                .map(|d| json!({"path": d.guest, "access": if d.writable { "write" } else { "read" }}))
                .collect(),
            env_keys: env_names,
            hosts: grants.hosts.iter().map(ToString::to_string).collect(),
            deadline_ms: grants.limits.deadline.as_millis() as u64,
            memory_bytes: grants.limits.memory as u64,
            output_bytes: grants.output_cap as u64,
        });
        // A tool that can change something (a folder it may write, a host
        // it may send to) starts once its thread's record names it, as a
        // process does; one that can only read and answer has nothing a
        // record must name first, and does not wait.
        let effects = grants.dirs.iter().any(|d| d.writable) || !grants.hosts.is_empty();
        if let Some(begun) = self.begun.take()
            && effects
        {
            begun.wait().await;
        }
        let stdin = serde_json::to_vec(&self.request.parameters).unwrap_or_default();
        let started = Instant::now();
        // The run goes on a blocking thread while this future waits for it,
        // so a caller who stops waiting (an MCP cancel, a runner told to
        // stop) drops the future, and the guard stops the tool within a
        // tick.
        let cancel = Arc::new(AtomicBool::new(false));
        grants.cancel = Some(Arc::clone(&cancel));
        let _stop_if_dropped = StopOnDrop(cancel);
        // A command runs on this task when a fiber stack is free (moving to
        // a blocking thread if it is still running at an epoch tick); its
        // spent store is dropped (which resets the instance's memory) by a
        // task of its own, after this answer.
        let ran = if let Some(run) = self.rye.components.async_run(&loaded) {
            let (ran, spent) = run.run(grants, stdin).await;
            if let Some(spent) = spent {
                tokio::spawn(async move { drop(spent) });
            }
            ran
        } else {
            self.run_blocking(&tool_id, loaded, grants, stdin).await?
        }
        .map_err(|e| self.host_failure(&crate::HostError::Component(e)))?;
        let duration = started.elapsed();
        Ok(match ran {
            Ok(output) => {
                let stdout = String::from_utf8_lossy(&output.stdout);
                let parsed = serde_json::from_str::<Value>(stdout.trim()).ok();
                let denied = denied(&tool_id, &output.denied);
                let error = (output.exit_code != 0).then(|| {
                    let detail = output.stderr.trim();
                    let failed = if let Some(error) = &output.error {
                        format!("tool {tool_id:?}: {error}")
                    } else if detail.is_empty() {
                        format!("tool {tool_id:?} failed (exit code {})", output.exit_code)
                    } else {
                        detail.to_owned()
                    };
                    match &denied {
                        Some(denied) => format!("{denied}; {failed}"),
                        None => failed,
                    }
                });
                if error.is_none() {
                    self.warnings.extend(denied);
                }
                let data = match (&output.error, parsed) {
                    (Some(_), _) => Value::Null,
                    (None, Some(parsed)) => parsed,
                    (None, None) => json!({"stdout": stdout, "stderr": output.stderr,
                                           "return_code": output.exit_code}),
                };
                Ran {
                    data,
                    error,
                    duration,
                    return_code: Some(output.exit_code),
                    status_code: None,
                    truncated: None,
                }
            }
            Err(stop) => {
                let capability = match &stop {
                    CommandStop::Deadline(_) => "limits.deadline_ms",
                    CommandStop::Memory(_) => "limits.memory_bytes",
                    CommandStop::Output(_) => "limits.output_bytes",
                    CommandStop::Cancelled => "its caller",
                    CommandStop::Trap { denied, .. } if !denied.is_empty() => "network.hosts",
                    CommandStop::Trap { .. } => "its own code",
                };
                Ran {
                    data: Value::Null,
                    error: Some(format!("tool {tool_id:?} {stop} ({capability})")),
                    duration,
                    return_code: None,
                    status_code: None,
                    truncated: None,
                }
            }
        })
    }

    /// Runs a loaded tool on a blocking thread while this future waits,
    /// for a run that cannot go on this task. The answer comes back as
    /// soon as it is known; the thread then resets the instance's memory,
    /// off this run's path.
    async fn run_blocking(
        &mut self,
        tool_id: &str,
        loaded: Arc<rye_components::LoadedCommand>,
        grants: CommandGrants,
        stdin: Vec<u8>,
    ) -> Stage<Result<Result<CommandOutput, CommandStop>, rye_components::ComponentError>> {
        let host = Arc::clone(&self.rye.components);
        let (answer, answered) = tokio::sync::oneshot::channel();
        let running = tokio::task::spawn_blocking(move || {
            host.run_command_then(&loaded, &grants, stdin, |ran| {
                let _ = answer.send(ran);
            });
        });
        match answered.await {
            Ok(ran) => Ok(ran),
            Err(_) => {
                let why = match running.await {
                    Err(e) => e.to_string(),
                    Ok(()) => "it gave no answer".to_owned(),
                };
                Err(self.fail(ErrorReply::new(format!(
                    "tool {tool_id:?}: its run ended abnormally: {why}"
                ))))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(value: Value) -> Map<String, Value> {
        value.as_object().unwrap().clone()
    }

    #[test]
    fn limits_default_from_the_runtime_and_stay_within_its_bounds() {
        let runtime = map(json!({"deadline_ms": 500, "max_memory_bytes": 1_048_576}));
        let (limits, output) = super::limits(None, Some(&runtime)).unwrap();
        assert_eq!(limits.deadline.as_millis(), 500);
        assert_eq!(limits.memory, 1_048_576, "the default is cut to the bound");
        assert_eq!(output, DEFAULT_OUTPUT as usize);
        let asked = map(json!({"memory_bytes": 2_000_000}));
        let error = super::limits(Some(&asked), Some(&runtime)).unwrap_err();
        assert!(error.contains("limits.memory_bytes is 2000000"), "{error}");
        let wild = map(json!({"max_output_bytes": u64::MAX}));
        let asked = map(json!({"output_bytes": CEILING_OUTPUT + 1}));
        assert!(super::limits(Some(&asked), Some(&wild)).is_err());
        let zero = map(json!({"deadline_ms": 0}));
        assert!(super::limits(Some(&zero), None).is_err());
        let text = map(json!({"deadline_ms": "1s"}));
        assert!(super::limits(Some(&text), None).is_err());
    }

    #[test]
    fn only_the_project_the_tool_folder_and_folders_under_them_are_granted() {
        let project = tempfile::tempdir().unwrap();
        let tool = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(project.path().join(".ai/state")).unwrap();
        std::os::unix::fs::symlink(outside.path(), project.path().join("away")).unwrap();
        let dir = |p: &str| granted_dir(p, Some(project.path()), tool.path());
        assert_eq!(
            dir("{project_path}").unwrap(),
            project.path().canonicalize().unwrap()
        );
        assert!(dir("{project_path}/.ai/state").is_ok());
        assert!(dir("{tool_dir}").is_ok());
        for bad in [
            "/etc",
            "{project_path}/..",
            "{project_path}/away",
            "{project_path}x",
            "{project_path}/missing",
            "{project_path}/{tool_dir}",
            "~",
        ] {
            assert!(dir(bad).is_err(), "{bad}");
        }
        assert!(granted_dir("{project_path}", None, tool.path()).is_err());
    }

    #[test]
    fn network_grants_name_hosts_and_nothing_else() {
        let tool = tempfile::tempdir().unwrap();
        let grant = |network: Value| {
            let config = map(json!({"capabilities": {"network": network}}));
            capabilities(Some(&config), None, None, tool.path())
        };
        let granted = grant(json!({"hosts": ["api.example.com", "127.0.0.1:8080"]})).unwrap();
        let hosts: Vec<String> = granted.grants.hosts.iter().map(|h| h.to_string()).collect();
        assert_eq!(hosts, ["api.example.com", "127.0.0.1:8080"]);
        assert!(grant(json!({})).unwrap().grants.hosts.is_empty());
        for (bad, says) in [
            (json!(true), "network is true, not a mapping"),
            (json!({"hosts": "api.example.com"}), "not a list"),
            (
                json!({"hosts": ["https://api.example.com"]}),
                "is not a host",
            ),
            (json!({"hosts": [7]}), "7 is not a host"),
            (json!({"ports": [80]}), "network.ports is not known"),
        ] {
            let error = grant(bad.clone()).unwrap_err();
            assert!(error.contains(says), "{bad}: {error}");
        }
    }

    #[test]
    fn the_component_is_beside_the_item() {
        let tool = tempfile::tempdir().unwrap();
        std::fs::write(tool.path().join("t.wasm"), b"").unwrap();
        let config = |name: &str| map(json!({"component": name}));
        assert!(component_path(Some(&config("t.wasm")), tool.path()).is_ok());
        for bad in [
            "../t.wasm",
            "/t.wasm",
            "t.txt",
            "",
            "./t.wasm",
            "missing.wasm",
        ] {
            assert!(
                component_path(Some(&config(bad)), tool.path()).is_err(),
                "{bad}"
            );
        }
        assert!(component_path(None, tool.path()).is_err());
    }

    #[test]
    fn a_link_may_lead_to_a_component_in_the_folder_never_out_of_it() {
        let tool = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(tool.path().join("t.wasm"), b"").unwrap();
        std::fs::write(outside.path().join("o.wasm"), b"").unwrap();
        std::fs::create_dir(tool.path().join("sub")).unwrap();
        let link = |target: &Path, name: &str| {
            std::os::unix::fs::symlink(target, tool.path().join(name)).unwrap();
        };
        link(&tool.path().join("t.wasm"), "in.wasm");
        link(&outside.path().join("o.wasm"), "out.wasm");
        link(outside.path(), "away");
        link(&tool.path().join("sub"), "here");
        std::fs::write(tool.path().join("sub/s.wasm"), b"").unwrap();
        let config = |name: &str| map(json!({"component": name}));
        for good in ["in.wasm", "sub/s.wasm", "here/s.wasm"] {
            assert!(
                component_path(Some(&config(good)), tool.path()).is_ok(),
                "{good}"
            );
        }
        for bad in ["out.wasm", "away/o.wasm"] {
            let error = component_path(Some(&config(bad)), tool.path()).unwrap_err();
            assert!(
                error.contains("leads out of the tool's folder"),
                "{bad}: {error}"
            );
        }
        let error = component_path(Some(&config("sub/none.wasm")), tool.path()).unwrap_err();
        assert!(error.contains("sub/none.wasm"), "{error}");
    }
}
