//! Where a component tool's `.wasm` is: the one rule that running the
//! tool and signing it both follow.

use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

/// The `.wasm` the tool's `config.component` names: a file beside the
/// item or under its folder, never out of it.
pub(crate) fn component_path(
    config: Option<&Map<String, Value>>,
    tool_dir: &Path,
) -> Result<PathBuf, String> {
    let name = config
        .and_then(|c| c.get("component"))
        .and_then(Value::as_str)
        .ok_or("config.component names no .wasm")?;
    if name.is_empty()
        || name.starts_with('/')
        || !name.ends_with(".wasm")
        || name
            .split('/')
            .any(|p| p.is_empty() || p == "." || p == "..")
    {
        return Err(format!(
            "config.component {name:?} is not a .wasm beside the item (a plain relative path)"
        ));
    }
    let path = tool_dir.join(name);
    // With no link among the name's parts, the file is in the folder as
    // named: one `lstat` a part, where resolving both paths walks each
    // from the root.
    let mut part = tool_dir.to_owned();
    let mut linked = false;
    for piece in name.split('/') {
        part.push(piece);
        match std::fs::symlink_metadata(&part) {
            Ok(meta) if meta.file_type().is_symlink() => {
                linked = true;
                break;
            }
            Ok(_) => {}
            Err(e) => {
                return Err(format!(
                    "config.component {name:?} ({}): {e}",
                    path.display()
                ));
            }
        }
    }
    if !linked {
        return Ok(path);
    }
    let dir = tool_dir
        .canonicalize()
        .map_err(|e| format!("{}: {e}", tool_dir.display()))?;
    let resolved = path
        .canonicalize()
        .map_err(|e| format!("config.component {name:?} ({}): {e}", path.display()))?;
    if !resolved.starts_with(&dir) {
        return Err(format!(
            "config.component {name:?} leads out of the tool's folder (to {})",
            resolved.display()
        ));
    }
    Ok(path)
}
