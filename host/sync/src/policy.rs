//! What a manifest takes from a space: `.ai/config/cas/manifest.yaml`,
//! merged system → user → project over the core defaults (maps merge key
//! by key, lists are joined, other values replaced), so a project can add
//! an exclusion but never drop one a wider space set.
//!
//! - `manifest.skip_dirs`: folders directly under `.ai/` left out
//!   (`state`, `node_modules`, `.venv`, `__pycache__`, `.git`).
//! - `manifest.hard_exclude.names` and `.patterns`: files never taken,
//!   by exact name (`private_key.pem`) or by a regular expression matched
//!   from the start of the name (`.env`, `.env.*`, `*.secret(s)`).
//! - `sync.include` / `sync.exclude`: the project's files outside `.ai/`
//!   to carry: a pattern ending in `/` is a folder and all under it,
//!   anything else a shell pattern on the path from the project root.
//!   `.ai/` is always left to the items.

use std::collections::BTreeSet;
use std::path::Path;

use serde_json::{Value, json};

use crate::SyncError;

/// The file under each space's `.ai/` that sets the policy.
pub const POLICY_FILE: &str = "config/cas/manifest.yaml";

/// The policy before any space's file.
pub fn core_defaults() -> Value {
    json!({
        "manifest": {
            "skip_dirs": ["state", "node_modules", ".venv", "__pycache__", ".git"],
            "hard_exclude": {
                "names": ["private_key.pem"],
                "patterns": ["^\\.env$", "^\\.env\\.", ".*\\.secrets?$"],
            },
        },
        "sync": {
            "include": [".ai/"],
            "exclude": [".ai/state/", "node_modules/", ".venv/", "__pycache__/", ".git/"],
        },
    })
}

/// `over` merged into `base`: maps key by key, lists joined (without
/// repeats), anything else replaced.
pub fn merge_into(base: &mut Value, over: Value) {
    match (base, over) {
        (Value::Object(base), Value::Object(over)) => {
            for (key, value) in over {
                match base.get_mut(&key) {
                    Some(existing) => merge_into(existing, value),
                    None => {
                        base.insert(key, value);
                    }
                }
            }
        }
        (Value::Array(base), Value::Array(over)) => {
            for value in over {
                if !base.contains(&value) {
                    base.push(value);
                }
            }
        }
        (base, over) => *base = over,
    }
}

/// A merged policy, ready to apply.
#[derive(Debug, Clone)]
pub struct Policy {
    pub skip_dirs: BTreeSet<String>,
    pub exclude_names: BTreeSet<String>,
    exclude_patterns: Vec<(String, regex::Regex)>,
    pub include: Vec<String>,
    pub exclude: Vec<String>,
}

impl Policy {
    /// The policy of the spaces whose `.ai/` folders are `spaces`, widest
    /// first (system, user, project); a space without the file adds
    /// nothing.
    pub fn load(spaces: &[&Path]) -> Result<Policy, SyncError> {
        let mut merged = core_defaults();
        for space in spaces {
            let path = space.join(POLICY_FILE);
            let text = match std::fs::read_to_string(&path) {
                Ok(text) => text,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(SyncError::io(&path, e)),
            };
            let value: Value = serde_yaml_ng::from_str(&text)
                .map_err(|e| SyncError::Policy(format!("{}: {e}", path.display())))?;
            match value {
                Value::Null => {}
                value @ Value::Object(_) => merge_into(&mut merged, value),
                _ => {
                    return Err(SyncError::Policy(format!(
                        "{}: not a map of settings",
                        path.display()
                    )));
                }
            }
        }
        Policy::from_value(&merged)
    }

    /// The policy a merged settings map describes.
    pub fn from_value(value: &Value) -> Result<Policy, SyncError> {
        let list = |path: &[&str]| -> Result<Vec<String>, SyncError> {
            let mut at = value;
            for key in path {
                match at.get(key) {
                    Some(next) => at = next,
                    None => return Ok(Vec::new()),
                }
            }
            match at {
                Value::Null => Ok(Vec::new()),
                Value::Array(items) => items
                    .iter()
                    .map(|item| {
                        item.as_str().map(str::to_owned).ok_or_else(|| {
                            SyncError::Policy(format!("{} holds {item}, not text", path.join(".")))
                        })
                    })
                    .collect(),
                other => Err(SyncError::Policy(format!(
                    "{} is {other}, not a list",
                    path.join(".")
                ))),
            }
        };
        let exclude_patterns = list(&["manifest", "hard_exclude", "patterns"])?
            .into_iter()
            .map(|pattern| {
                regex::Regex::new(&format!("^(?:{pattern})"))
                    .map(|re| (pattern.clone(), re))
                    .map_err(|e| {
                        SyncError::Policy(format!(
                            "manifest.hard_exclude.patterns: {pattern:?} is no regular expression: {e}"
                        ))
                    })
            })
            .collect::<Result<_, _>>()?;
        Ok(Policy {
            skip_dirs: list(&["manifest", "skip_dirs"])?.into_iter().collect(),
            exclude_names: list(&["manifest", "hard_exclude", "names"])?
                .into_iter()
                .collect(),
            exclude_patterns,
            include: list(&["sync", "include"])?,
            exclude: list(&["sync", "exclude"])?,
        })
    }

    /// Whether a file called `name` is never taken.
    pub fn excluded_name(&self, name: &str) -> bool {
        self.exclude_names.contains(name)
            || self
                .exclude_patterns
                .iter()
                .any(|(_, re)| re.is_match(name))
    }

    /// Whether the project path `path` (`/`-separated, from the root) is
    /// one of the files to carry.
    pub fn includes_file(&self, path: &str) -> bool {
        !path.starts_with(".ai/")
            && self
                .include
                .iter()
                .filter(|p| !p.starts_with(".ai/"))
                .any(|p| pattern_matches(p, path))
            && !self.excludes_path(path)
    }

    /// Whether `path` (a file, or a folder with a trailing `/`) is under
    /// an exclusion, so a walk need not go in.
    pub fn excludes_path(&self, path: &str) -> bool {
        self.exclude.iter().any(|p| pattern_matches(p, path))
    }

    /// Whether any inclusion may lie inside the folder `folder` (with a
    /// trailing `/`), so a walk must go in.
    pub fn may_include_under(&self, folder: &str) -> bool {
        self.include.iter().any(|p| {
            !p.starts_with(".ai/")
                && (p.starts_with(folder) || folder.starts_with(p.as_str()) || !p.ends_with('/'))
        })
    }
}

/// A policy pattern against a path: `dir/` takes the folder and all
/// under it, anything else is a shell pattern on the whole path.
fn pattern_matches(pattern: &str, path: &str) -> bool {
    if let Some(folder) = pattern.strip_suffix('/') {
        // A one-name folder (`node_modules/`) at any depth.
        path.starts_with(pattern)
            || (!folder.contains('/') && path.split('/').rev().skip(1).any(|part| part == folder))
    } else {
        rye_space::shell_match(pattern, path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_join_maps_merge_and_values_replace() {
        let mut base = json!({"a": [1, 2], "m": {"x": 1, "l": ["p"]}, "s": "old"});
        merge_into(
            &mut base,
            json!({"a": [2, 3], "m": {"y": 2, "l": ["q"]}, "s": "new"}),
        );
        assert_eq!(
            base,
            json!({"a": [1, 2, 3], "m": {"x": 1, "y": 2, "l": ["p", "q"]}, "s": "new"})
        );
    }

    #[test]
    fn spaces_add_exclusions_and_never_drop_one() {
        let system = tempfile::tempdir().unwrap();
        let project = tempfile::tempdir().unwrap();
        let write = |root: &Path, text: &str| {
            let path = root.join(POLICY_FILE);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        };
        write(
            system.path(),
            "manifest:\n  hard_exclude:\n    names: [id_rsa]\n",
        );
        write(
            project.path(),
            "manifest:\n  skip_dirs: [cache]\n  hard_exclude:\n    patterns: ['.*\\.key$']\nsync:\n  include: [docs/, '*.md']\n",
        );
        let policy = Policy::load(&[system.path(), project.path()]).unwrap();
        assert!(policy.skip_dirs.contains("state") && policy.skip_dirs.contains("cache"));
        for name in [
            "private_key.pem",
            "id_rsa",
            ".env",
            ".env.local",
            "a.secret",
            "b.secrets",
            "c.key",
        ] {
            assert!(policy.excluded_name(name), "{name}");
        }
        for name in ["env", "my.env", "secrets.txt", "key.pub"] {
            assert!(!policy.excluded_name(name), "{name}");
        }
        assert!(policy.includes_file("docs/guide.txt"));
        assert!(policy.includes_file("README.md"));
        assert!(!policy.includes_file("src/main.rs"));
        assert!(!policy.includes_file("docs/node_modules/x/y.md"));
        assert!(!policy.includes_file(".ai/tools/x.md"));
    }

    #[test]
    fn a_bad_policy_names_its_file() {
        let project = tempfile::tempdir().unwrap();
        let path = project.path().join(POLICY_FILE);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, "manifest:\n  hard_exclude:\n    patterns: ['(']\n").unwrap();
        let error = Policy::load(&[project.path()]).unwrap_err().to_string();
        assert!(error.contains("is no regular expression"), "{error}");
        std::fs::write(&path, "- a list\n").unwrap();
        let error = Policy::load(&[project.path()]).unwrap_err().to_string();
        assert!(
            error.contains("manifest.yaml") && error.contains("not a map"),
            "{error}"
        );
        std::fs::write(&path, "sync: {include: 7}\n").unwrap();
        let error = Policy::load(&[project.path()]).unwrap_err().to_string();
        assert!(error.contains("sync.include is 7, not a list"), "{error}");
    }
}
