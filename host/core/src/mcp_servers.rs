//! Managing MCP servers: a server item written and signed, its tools
//! discovered into signed tool items (each pinning the definition it was
//! made from), listed and removed.
//!
//! Files, as the original lays them out: the server item at
//! `.ai/tools/mcp/servers/<name>.yaml`, one tool item per remote tool at
//! `.ai/tools/mcp/<name>/<tool>.yaml`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use rye_space::{ItemKind, Space};
use serde::Serialize;
use serde_json::{Map, Value, json};

use crate::mcp::{SERVER_TOOL_TYPE, TOOL_TOOL_TYPE};
use crate::{Rye, Signable};

/// How a new server is reached.
#[derive(Debug, Clone)]
pub enum NewServer {
    Stdio {
        command: String,
        args: Vec<String>,
        /// Declared in the item beside `PATH` and `HOME` (taken from the
        /// host's as `${PATH}` and `${HOME}`).
        env: Vec<(String, String)>,
    },
    Http {
        url: String,
        headers: Vec<(String, String)>,
        /// The variable holding the bearer token.
        bearer_token_env: Option<String>,
    },
}

/// What discovering a server's tools changed.
#[derive(Debug, Default, Serialize)]
pub struct Discovered {
    pub server: String,
    pub added: Vec<String>,
    pub updated: Vec<String>,
    pub unchanged: Vec<String>,
    pub removed: Vec<String>,
}

/// A server item, as `rye mcp list` shows it.
#[derive(Debug, Serialize)]
pub struct ServerListing {
    pub name: String,
    pub space: Space,
    pub path: PathBuf,
    pub transport: String,
    /// The command line or the URL.
    pub target: String,
    pub tools: usize,
}

/// A server's name: what a file name and an id segment may be.
fn check_name(name: &str) -> Result<(), String> {
    let plain = !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
        && name != "servers";
    if plain {
        Ok(())
    } else {
        Err(format!(
            "{name:?} is not a server name: letters, digits, '_' and '-', at most 64 (and not \"servers\")"
        ))
    }
}

/// The file stem for a remote tool's name: letters, digits, `_` and `-`
/// kept, anything else `_`.
fn stem(tool: &str) -> String {
    let mut stem: String = tool
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .take(100)
        .collect();
    if stem.is_empty() || stem.starts_with('-') {
        stem.insert(0, '_');
    }
    stem
}

/// `document` as YAML: a block mapping of its keys, `config` a block
/// mapping of its own, every other value a JSON scalar or flow collection
/// (JSON is YAML). The host writes YAML but never reads it: items are read
/// by their parser component.
fn yaml(document: &Map<String, Value>) -> String {
    let key = |k: &str| {
        let plain = k.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
            && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if plain {
            k.to_owned()
        } else {
            Value::from(k).to_string()
        }
    };
    let mut out = String::new();
    for (name, value) in document {
        match value {
            Value::Object(inner) if !inner.is_empty() && name == "config" => {
                out.push_str(&format!("{}:\n", key(name)));
                for (k, v) in inner {
                    out.push_str(&format!("  {}: {v}\n", key(k)));
                }
            }
            other => out.push_str(&format!("{}: {other}\n", key(name))),
        }
    }
    out
}

impl Rye {
    fn ai_dir(&self, project: Option<&Path>, space: Space) -> Result<PathBuf, String> {
        let session = self.session(project);
        session
            .spaces
            .root(space)
            .map(|root| root.ai_dir.clone())
            .ok_or_else(|| format!("there is no {space} space here"))
    }

    /// Writes and signs the server item `mcp/servers/<name>` in `space`
    /// (project or user). An existing item is replaced only with `force`.
    pub fn mcp_add(
        &self,
        project: Option<&Path>,
        space: Space,
        name: &str,
        server: &NewServer,
        force: bool,
    ) -> Result<PathBuf, String> {
        check_name(name)?;
        if space == Space::System {
            return Err("server items go in the project or user space".into());
        }
        let path = self
            .ai_dir(project, space)?
            .join(format!("tools/mcp/servers/{name}.yaml"));
        if path.exists() && !force {
            return Err(format!(
                "{} exists; `rye mcp remove {name}` first, or add with --force",
                path.display()
            ));
        }
        let mut config = Map::new();
        let description = match server {
            NewServer::Stdio { command, args, env } => {
                config.insert("transport".into(), json!("stdio"));
                config.insert("command".into(), json!(command));
                config.insert("args".into(), json!(args));
                let mut declared = Map::new();
                declared.insert("PATH".into(), json!("${PATH}"));
                declared.insert("HOME".into(), json!("${HOME}"));
                for (k, v) in env {
                    declared.insert(k.clone(), json!(v));
                }
                config.insert("env".into(), Value::Object(declared));
                format!("MCP server {name}: {command} over stdio.")
            }
            NewServer::Http {
                url,
                headers,
                bearer_token_env,
            } => {
                config.insert("transport".into(), json!("http"));
                config.insert("url".into(), json!(url));
                if !headers.is_empty() {
                    let headers: Map<String, Value> =
                        headers.iter().map(|(k, v)| (k.clone(), json!(v))).collect();
                    config.insert("headers".into(), Value::Object(headers));
                }
                if let Some(var) = bearer_token_env {
                    config.insert("bearer_token_env".into(), json!(var));
                }
                format!("MCP server {name} at {url}.")
            }
        };
        config.insert("timeout".into(), json!(30));
        let mut document = Map::new();
        document.insert("version".into(), json!("1.0.0"));
        document.insert("tool_type".into(), json!(SERVER_TOOL_TYPE));
        document.insert("executor_id".into(), Value::Null);
        document.insert("category".into(), json!("mcp/servers"));
        document.insert("description".into(), json!(description));
        document.insert("config".into(), Value::Object(config));
        std::fs::create_dir_all(path.parent().expect("a server item has a folder"))
            .map_err(|e| format!("{}: {e}", path.display()))?;
        std::fs::write(&path, yaml(&document)).map_err(|e| format!("{}: {e}", path.display()))?;
        self.sign(
            project,
            Signable::Item(ItemKind::Tool),
            &format!("mcp/servers/{name}"),
            space,
        )
        .map_err(|e| e.to_string())?;
        Ok(path)
    }

    /// Starts or reaches server `name`, lists its tools, and writes and
    /// signs one tool item per tool beside the server item's space;
    /// items of tools the server no longer offers are removed. A tool
    /// whose definition changed is rewritten: this is how a changed
    /// definition is approved.
    pub async fn mcp_discover(
        &self,
        project: Option<&Path>,
        name: &str,
    ) -> Result<Discovered, String> {
        check_name(name)?;
        let id = format!("mcp/servers/{name}");
        let session = self.session(project);
        let server = self.mcp_server(&session, Space::Project, &id)?;
        if server.space == Space::System {
            return Err(format!(
                "{id} is in the system space, whose tools are built with Rye"
            ));
        }
        let (connection, _) = self
            .mcp
            .session(&server.key, &server.id, &server.transport, server.startup)
            .await
            .map_err(|e| e.to_string())?;
        let listed = connection
            .tools(Duration::from_secs(60))
            .await
            .map_err(|e| e.to_string())?;
        let runtime = match server.transport {
            rye_mcp_client::Transport::Stdio(_) => "rye/core/runtimes/mcp/stdio",
            rye_mcp_client::Transport::Http { .. } => "rye/core/runtimes/mcp/http",
        };
        let folder = self
            .ai_dir(project, server.space)?
            .join(format!("tools/mcp/{name}"));
        std::fs::create_dir_all(&folder).map_err(|e| format!("{}: {e}", folder.display()))?;

        let mut report = Discovered {
            server: id.clone(),
            ..Discovered::default()
        };
        let mut kept: Vec<String> = Vec::new();
        for tool in &listed {
            let mut file_stem = stem(&tool.name);
            while kept.contains(&file_stem) {
                file_stem.push('_');
            }
            kept.push(file_stem.clone());
            let path = folder.join(format!("{file_stem}.yaml"));
            let hash = tool.hash();
            let item_id = format!("mcp/{name}/{file_stem}");
            let existing = path.is_file();
            let same = existing
                && self
                    .item_document(project, server.space, &item_id)
                    .is_some_and(|doc| {
                        doc.get("definition_hash").and_then(Value::as_str) == Some(hash.as_str())
                            && doc.get("config").map(|c| &c["server"]) == Some(&json!(id))
                            && doc.get("executor_id") == Some(&json!(runtime))
                    });
            if same {
                report.unchanged.push(tool.name.clone());
                continue;
            }
            let mut document = Map::new();
            document.insert("version".into(), json!("1.0.0"));
            document.insert("tool_type".into(), json!(TOOL_TOOL_TYPE));
            document.insert("executor_id".into(), json!(runtime));
            document.insert("category".into(), json!(format!("mcp/{name}")));
            document.insert(
                "description".into(),
                json!(tool.description.clone().unwrap_or_default()),
            );
            document.insert(
                "config".into(),
                json!({"server": id, "tool_name": tool.name}),
            );
            document.insert("input_schema".into(), tool.input_schema.clone());
            document.insert("definition_hash".into(), json!(hash));
            std::fs::write(&path, yaml(&document))
                .map_err(|e| format!("{}: {e}", path.display()))?;
            self.sign(
                project,
                Signable::Item(ItemKind::Tool),
                &item_id,
                server.space,
            )
            .map_err(|e| e.to_string())?;
            if existing {
                report.updated.push(tool.name.clone());
            } else {
                report.added.push(tool.name.clone());
            }
        }
        for (path, document) in self.tool_items(project, server.space, name) {
            let stem = path
                .file_stem()
                .and_then(|s| s.to_str())
                .unwrap_or_default()
                .to_owned();
            if kept.contains(&stem) {
                continue;
            }
            std::fs::remove_file(&path).map_err(|e| format!("{}: {e}", path.display()))?;
            report.removed.push(
                document
                    .get("config")
                    .and_then(|c| c["tool_name"].as_str())
                    .map_or(stem, str::to_owned),
            );
        }
        Ok(report)
    }

    /// The server items of the project and user spaces.
    pub fn mcp_list(&self, project: Option<&Path>) -> Vec<ServerListing> {
        let mut out = Vec::new();
        for space in [Space::Project, Space::User] {
            let Ok(ai) = self.ai_dir(project, space) else {
                continue;
            };
            let Ok(entries) = std::fs::read_dir(ai.join("tools/mcp/servers")) else {
                continue;
            };
            let mut files: Vec<PathBuf> = entries.flatten().map(|e| e.path()).collect();
            files.sort();
            for path in files {
                let Some(name) = path
                    .file_stem()
                    .and_then(|s| s.to_str())
                    .filter(|_| path.extension().is_some_and(|e| e == "yaml"))
                else {
                    continue;
                };
                let document = self
                    .item_document(project, space, &format!("mcp/servers/{name}"))
                    .unwrap_or_default();
                let config = document.get("config").cloned().unwrap_or(Value::Null);
                let transport = config["transport"].as_str().unwrap_or("stdio").to_owned();
                let target = if transport == "http" {
                    config["url"].as_str().unwrap_or_default().to_owned()
                } else {
                    std::iter::once(config["command"].as_str().unwrap_or_default().to_owned())
                        .chain(
                            config["args"]
                                .as_array()
                                .into_iter()
                                .flatten()
                                .filter_map(Value::as_str)
                                .map(str::to_owned),
                        )
                        .collect::<Vec<_>>()
                        .join(" ")
                };
                let tools = self.tool_items(project, space, name).len();
                out.push(ServerListing {
                    name: name.to_owned(),
                    space,
                    path: path.clone(),
                    transport,
                    target,
                    tools,
                });
            }
        }
        out
    }

    /// Removes server `name` from `space`: its item and its tools' items.
    /// Returns the files removed.
    pub fn mcp_remove(
        &self,
        project: Option<&Path>,
        space: Space,
        name: &str,
    ) -> Result<Vec<PathBuf>, String> {
        check_name(name)?;
        let ai = self.ai_dir(project, space)?;
        let server = ai.join(format!("tools/mcp/servers/{name}.yaml"));
        if !server.is_file() {
            return Err(format!(
                "no server item {} in the {space} space",
                server.display()
            ));
        }
        let folder = ai.join(format!("tools/mcp/{name}"));
        let mut removed = Vec::new();
        for (path, _) in self.tool_items(project, space, name) {
            std::fs::remove_file(&path).map_err(|e| format!("{}: {e}", path.display()))?;
            removed.push(path);
        }
        let _ = std::fs::remove_dir(&folder);
        std::fs::remove_file(&server).map_err(|e| format!("{}: {e}", server.display()))?;
        removed.push(server);
        self.mcp.clear();
        Ok(removed)
    }
}

impl Rye {
    /// Item `id`'s metadata as its parser reads it in `space`, if it
    /// parses.
    fn item_document(
        &self,
        project: Option<&Path>,
        space: Space,
        id: &str,
    ) -> Option<Map<String, Value>> {
        let loaded = self
            .load(&crate::LoadRequest {
                source: Some(space),
                project: project.map(Path::to_owned),
                ..crate::LoadRequest::new(ItemKind::Tool, id)
            })
            .ok()?;
        loaded.parse_error.is_none().then_some(loaded.metadata)
    }

    /// The MCP tool items (`tool_type: mcp`) of server `name` in `space`,
    /// with their metadata.
    fn tool_items(
        &self,
        project: Option<&Path>,
        space: Space,
        name: &str,
    ) -> Vec<(PathBuf, Map<String, Value>)> {
        let Ok(ai) = self.ai_dir(project, space) else {
            return Vec::new();
        };
        let Ok(entries) = std::fs::read_dir(ai.join(format!("tools/mcp/{name}"))) else {
            return Vec::new();
        };
        let mut found: Vec<(PathBuf, Map<String, Value>)> = entries
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|e| e == "yaml") && p.is_file())
            .filter_map(|p| {
                let stem = p.file_stem()?.to_str()?.to_owned();
                let document = self.item_document(project, space, &format!("mcp/{name}/{stem}"))?;
                (document.get("tool_type") == Some(&json!(TOOL_TOOL_TYPE))).then_some((p, document))
            })
            .collect();
        found.sort_by(|a, b| a.0.cmp(&b.0));
        found
    }
}
