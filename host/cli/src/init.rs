//! What `rye init` tells MCP clients, and how it reports.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::Context;
use serde::Serialize;
use serde_json::{Value, json};

/// The stdio server entry MCP clients start Rye with.
pub struct McpEntry {
    command: String,
    args: Vec<String>,
}

/// The `.mcp.json` of `rye init --mcp-config`.
#[derive(Serialize)]
pub struct McpWritten {
    pub path: PathBuf,
    /// False: a file was there and was kept as it was.
    pub written: bool,
}

impl McpEntry {
    pub fn new(program: &Path, project: &Path) -> Self {
        Self {
            command: program.display().to_string(),
            args: vec![
                "serve".into(),
                "--project".into(),
                project.display().to_string(),
            ],
        }
    }

    /// `{"mcpServers": {"rye": …}}`: the shape of `.mcp.json` (Claude
    /// Code), `.cursor/mcp.json`, Claude Desktop and most others.
    pub fn servers(&self) -> Value {
        json!({"mcpServers": {"rye": {"command": self.command, "args": self.args}}})
    }

    /// `{"servers": {"rye": …}}`: the shape of VS Code's `.vscode/mcp.json`.
    fn vscode(&self) -> Value {
        json!({"servers": {"rye": {"type": "stdio", "command": self.command, "args": self.args}}})
    }

    /// Writes `.mcp.json` in `dir` unless a file is there.
    pub fn write(&self, dir: &Path) -> anyhow::Result<McpWritten> {
        let path = dir.join(".mcp.json");
        let text = format!("{:#}\n", self.servers());
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path);
        match file {
            Ok(mut file) => {
                file.write_all(text.as_bytes())
                    .with_context(|| format!("writing {}", path.display()))?;
                Ok(McpWritten {
                    path,
                    written: true,
                })
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(McpWritten {
                path,
                written: false,
            }),
            Err(e) => Err(e).with_context(|| format!("writing {}", path.display())),
        }
    }
}

pub fn human(
    out: &mut impl Write,
    report: &rye_host::InitReport,
    mcp: &McpEntry,
    written: Option<&McpWritten>,
) -> std::io::Result<()> {
    let key = &report.key;
    if key.made {
        writeln!(
            out,
            "made signing key {} in {}",
            key.fingerprint,
            key.dir.display()
        )?;
    }
    if let Some(file) = &key.trusted_in {
        writeln!(
            out,
            "trusted key {} for your projects: {}",
            key.fingerprint,
            file.display()
        )?;
    }
    for path in &report.created {
        writeln!(out, "created {} (signed)", path.display())?;
    }
    for path in &report.kept {
        writeln!(out, "kept    {} (already there)", path.display())?;
    }
    match written {
        Some(w) if w.written => writeln!(out, "wrote   {}", w.path.display())?,
        Some(w) => writeln!(
            out,
            "kept    {} (already there: add the entry below to it)",
            w.path.display()
        )?,
        None => {}
    }
    writeln!(
        out,
        "\ntry it:\n  rye execute tool {} --params '{{\"name\": \"Ada\"}}'\n  rye validate --require-signed",
        rye_host::SAMPLE_TOOL
    )?;
    writeln!(
        out,
        "\nMCP clients start Rye with this entry:\n  .mcp.json (Claude Code), .cursor/mcp.json (Cursor), Claude Desktop:\n{:#}\n  .vscode/mcp.json (VS Code):\n{:#}",
        mcp.servers(),
        mcp.vscode()
    )?;
    Ok(())
}
