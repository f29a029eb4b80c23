//! Verification of items and components before they are used.
//!
//! Every chain element, every parser and adapter component, and every
//! directive or knowledge entry that is executed must carry a valid
//! signature by a key the trust store trusts (see [`rye_integrity`]).
//! Verdicts are cached by content hash and trust store, so a warm
//! execution checks no signature twice; the trust store is re-read only
//! when a trusted-key folder or file changes.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rye_components::World;
use rye_integrity::{
    IntegrityError, TRUSTED_DIR, TrustStore, format_for, verify_detached, verify_text,
};
use rye_space::{Extractors, ItemKind, Space, Spaces};
use sha2::{Digest, Sha256};

use crate::trust_state::{
    ComponentKey, FoundComponent, Signed, TrustEntry, Verdict, VerdictKey, declared_formats,
    files_read, trust_paths, trusted_files,
};
use crate::{HostError, Rye};

impl Rye {
    /// The keys trusted for `spaces`: the system key built into the
    /// binary, keys given in the configuration, and the trusted-key files
    /// of the spaces.
    pub fn trust_store(&self, spaces: &Spaces) -> Arc<TrustStore> {
        let dirs: Vec<PathBuf> = spaces
            .roots()
            .iter()
            .map(|r| r.ai_dir.join(TRUSTED_DIR))
            .collect();
        let mut cache = self.integrity.trust.lock().expect("trust cache lock");
        if let Some(entry) = cache.get(&dirs)
            && entry.stamps == *self.listings.stamps(&entry.paths)
        {
            return entry.store.clone();
        }
        let files = trusted_files(&dirs);
        let paths = trust_paths(&dirs, &files);
        let stamps = self.listings.stamps(&paths).to_vec();
        let mut builder = TrustStore::builder();
        if let Some(key) = &self.integrity.builtin {
            builder = builder.builtin(key.clone(), "rye-system");
        }
        for (key, owner) in &self.integrity.given {
            builder = builder.anchor(key.clone(), owner);
        }
        for root in spaces.roots() {
            builder = builder.dir(root.space, root.ai_dir.join(TRUSTED_DIR));
        }
        let store = Arc::new(builder.build());
        for (path, reason) in store.ignored() {
            tracing::warn!("ignoring trusted key {}: {reason}", path.display());
        }
        let read = files_read(&store);
        let (paths, stamps) = if read == files {
            (paths, stamps)
        } else {
            let paths = trust_paths(&dirs, &read);
            let stamps = self.listings.stamps(&paths).to_vec();
            (paths, stamps)
        };
        cache.insert(
            dirs,
            TrustEntry {
                paths,
                stamps,
                store: store.clone(),
            },
        );
        store
    }

    /// Finds component `name` in the spaces, under the `.ai/` folder of
    /// `world` (see [`crate::component_folder`]), and loads it as `world`
    /// once its signature checks out. Returns the
    /// paths searched when no space has it.
    pub(crate) fn find_component(
        &self,
        spaces: &Spaces,
        trust: &TrustStore,
        name: &str,
        world: World,
    ) -> Result<Result<FoundComponent, Vec<PathBuf>>, HostError> {
        rye_space::validate_plugin_name(name)?;
        let roots = spaces.roots();
        let paths: Vec<PathBuf> = roots
            .iter()
            .map(|root| {
                root.ai_dir
                    .join(crate::component_folder(world))
                    .join(format!("{name}.wasm"))
            })
            .collect();
        // Where each space would hold it, stamped through the listings'
        // watches: a warm lookup reads none of the three from disk.
        let stamps = self.listings.stamps(&paths);
        let mut searched = Vec::new();
        for ((root, path), stamp) in roots.iter().zip(paths).zip(stamps.iter()) {
            if stamp.is_none() {
                searched.push(path);
                continue;
            }
            let mut signed = None;
            let loaded = self.components.load_checked(&path, world, |hash| {
                self.verify_component(trust, root.space, &path, *hash)
                    .map(|s| signed = Some(s))
            })?;
            return Ok(Ok(FoundComponent {
                component: loaded?,
                signed: signed.expect("checked before loading"),
            }));
        }
        Ok(Err(searched))
    }

    /// Verifies the item file at `path` (of `kind`, found in `space`) whose
    /// bytes hash to `content_hash`; `content` is the bytes when the caller
    /// has them.
    pub(crate) fn verify_item(
        &self,
        trust: &TrustStore,
        extractors: Option<&Extractors>,
        item: (ItemKind, Space, &Path),
        content_hash: [u8; 32],
        content: Option<&[u8]>,
    ) -> Result<Signed, HostError> {
        let (kind, space, path) = item;
        if !self.integrity.policy.enforce {
            return Ok(Signed::NotChecked);
        }
        let fail = |error: IntegrityError| HostError::Integrity {
            path: path.to_owned(),
            error,
        };
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default();
        let format = format_for(kind, name, &declared_formats(extractors, kind)).map_err(fail)?;
        let mut key = VerdictKey {
            content: content_hash,
            kind,
            format,
            trust: trust.id(),
        };
        let cached = self
            .integrity
            .verdicts
            .lock()
            .expect("verdict lock")
            .get(&key);
        let verdict = match cached {
            Some(verdict) => verdict,
            None => {
                let read;
                let bytes = match content {
                    Some(bytes) => bytes,
                    None => {
                        read = std::fs::read(path).map_err(|e| HostError::io(path, e))?;
                        // The file may have changed since it was hashed.
                        key.content = Sha256::digest(&read).into();
                        &read
                    }
                };
                let verdict = match std::str::from_utf8(bytes) {
                    Ok(text) => verify_text(text, kind, &key.format, trust),
                    Err(_) => Err(IntegrityError::NotText),
                };
                self.integrity
                    .verdicts
                    .lock()
                    .expect("verdict lock")
                    .insert(key, verdict.clone());
                verdict
            }
        };
        self.judge(verdict, space).map_err(fail)
    }

    /// Verifies the component at `path` (found in `space`) whose bytes
    /// hash to `content_hash`, by its detached signature `<path>.sig`.
    pub(crate) fn verify_component(
        &self,
        trust: &TrustStore,
        space: Space,
        path: &Path,
        content_hash: [u8; 32],
    ) -> Result<Signed, HostError> {
        if !self.integrity.policy.enforce {
            return Ok(Signed::NotChecked);
        }
        let sig_path = rye_integrity::detached_path(path);
        let fail = |error: IntegrityError| HostError::Integrity {
            path: path.to_owned(),
            error,
        };
        let key = ComponentKey {
            content: content_hash,
            signature: self.listings.stamp(&sig_path).ok(),
            trust: trust.id(),
        };
        let cached = self
            .integrity
            .components
            .lock()
            .expect("verdict lock")
            .get(&key);
        let verdict = match cached {
            Some(verdict) => verdict,
            None => {
                let verdict = detached_verdict(path, &content_hash, trust)
                    .map_err(|e| HostError::io(&sig_path, e))?;
                self.integrity
                    .components
                    .lock()
                    .expect("verdict lock")
                    .insert(key, verdict.clone());
                verdict
            }
        };
        self.judge(verdict, space).map_err(fail)
    }

    fn judge(&self, verdict: Verdict, space: Space) -> Result<Signed, IntegrityError> {
        match verdict {
            Ok(verified) => Ok(Signed::Verified(verified)),
            Err(e)
                if e.is_unsigned()
                    && space == Space::Project
                    && self.integrity.policy.allow_unsigned_project =>
            {
                Ok(Signed::UnsignedAllowed)
            }
            Err(e) => Err(e),
        }
    }
}

/// The verdict of the detached signature beside the component at `path`,
/// whose bytes hash to `content_hash`; an error only when the signature
/// file exists but cannot be read.
pub(crate) fn detached_verdict(
    path: &Path,
    content_hash: &[u8; 32],
    trust: &TrustStore,
) -> std::io::Result<Verdict> {
    let sig_path = rye_integrity::detached_path(path);
    Ok(match std::fs::read(&sig_path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            Err(IntegrityError::NoDetachedSignature { path: sig_path })
        }
        Err(e) => return Err(e),
        Ok(bytes) => match String::from_utf8(bytes) {
            Ok(text) => verify_detached(content_hash, &text, trust),
            Err(_) => Err(IntegrityError::Malformed(format!(
                "{} is not text",
                sig_path.display()
            ))),
        },
    })
}

/// Dependencies checked by `verify_deps`, from the runtime YAML key of that
/// name (taken from the first chain element that has it).
struct DepsRule {
    scope: String,
    recursive: bool,
    extensions: Vec<String>,
    exclude_dirs: Vec<String>,
}

impl DepsRule {
    fn from(value: &serde_json::Value) -> Option<Self> {
        if value.get("enabled").and_then(serde_json::Value::as_bool) == Some(false) {
            return None;
        }
        let strings = |key: &str, default: &[&str]| -> Vec<String> {
            match value.get(key).and_then(serde_json::Value::as_array) {
                Some(items) => items
                    .iter()
                    .filter_map(serde_json::Value::as_str)
                    .map(str::to_owned)
                    .collect(),
                None => default.iter().map(|s| (*s).to_owned()).collect(),
            }
        };
        Some(Self {
            scope: value
                .get("scope")
                .and_then(serde_json::Value::as_str)
                .unwrap_or("anchor")
                .to_owned(),
            recursive: value
                .get("recursive")
                .and_then(serde_json::Value::as_bool)
                .unwrap_or(true),
            extensions: strings("extensions", &[".py", ".yaml", ".yml", ".json"]),
            exclude_dirs: strings(
                "exclude_dirs",
                &["__pycache__", ".venv", "node_modules", ".git"],
            ),
        })
    }
}

impl Rye {
    /// `verify_deps`: with an active anchor at `anchor`, every file the
    /// chain's rule selects (by scope, extension and excluded folders) must
    /// verify before the tool runs. Symbolic links are not followed into
    /// folders, and a file that resolves outside the base is refused.
    /// Returns the files checked and how each stands.
    pub(crate) fn verify_deps(
        &self,
        trust: &TrustStore,
        chain: &crate::Chain,
        anchor: Option<&Path>,
    ) -> Result<Vec<(PathBuf, Signed)>, HostError> {
        let Some((files, real_base)) = deps_files(chain, anchor)? else {
            return Ok(Vec::new());
        };
        let tool = chain.tool();
        let mut checked = Vec::new();
        for file in files {
            let real = file.canonicalize().map_err(|e| HostError::io(&file, e))?;
            if !real.starts_with(&real_base) {
                return Err(HostError::Integrity {
                    path: file,
                    error: IntegrityError::Escape(format!(
                        "symlink escape: it resolves to {}, outside {}",
                        real.display(),
                        real_base.display()
                    )),
                });
            }
            let hash = self.file_hash(&real)?;
            let signed =
                self.verify_item(trust, None, (ItemKind::Tool, tool.space, &file), hash, None)?;
            checked.push((file, signed));
        }
        Ok(checked)
    }

    /// SHA-256 of a file, re-read only when its stamp changed.
    pub(crate) fn file_hash(&self, path: &Path) -> Result<[u8; 32], HostError> {
        let stamp = self
            .listings
            .stamp(path)
            .map_err(|e| HostError::io(path, e))?;
        if let Some((known, hash)) = self
            .integrity
            .hashes
            .lock()
            .expect("hash cache lock")
            .get(path)
            && *known == stamp
        {
            return Ok(*hash);
        }
        let bytes = std::fs::read(path).map_err(|e| HostError::io(path, e))?;
        let hash: [u8; 32] = Sha256::digest(&bytes).into();
        self.integrity
            .hashes
            .lock()
            .expect("hash cache lock")
            .insert(path.to_owned(), (stamp, hash));
        Ok(hash)
    }
}

/// The files `verify_deps` selects for `chain` with its anchor at
/// `anchor`, sorted, and the real (resolved) folder they must stay in;
/// `None` when the chain has no rule or no active anchor.
fn deps_files(
    chain: &crate::Chain,
    anchor: Option<&Path>,
) -> Result<Option<(Vec<PathBuf>, PathBuf)>, HostError> {
    let Some(rule) = chain
        .elements
        .iter()
        .find_map(|e| e.metadata.get("verify_deps"))
        .and_then(DepsRule::from)
    else {
        return Ok(None);
    };
    let Some(anchor) = anchor else {
        return Ok(None);
    };
    let tool_dir = chain.tool().path.parent().unwrap_or(Path::new("/"));
    let (base, recursive) = match rule.scope.as_str() {
        "tool_file" => return Ok(None),
        "tool_siblings" => (tool_dir, false),
        "tool_dir" => (tool_dir, rule.recursive),
        "anchor" => (anchor, rule.recursive),
        other => return Err(HostError::DepsScope(other.to_owned())),
    };
    let real_base = base.canonicalize().map_err(|e| HostError::io(base, e))?;
    let mut files = Vec::new();
    collect_deps(&rule, base, recursive, &mut files)?;
    files.sort();
    Ok(Some((files, real_base)))
}

/// Where the chain's anchor would be, read from its `anchor` key without
/// running the adapter: `mode: always`, or `auto` with one of
/// `markers_any` in the tool's folder; `root` placing it. What `rye
/// validate` uses to tell a tool's dependencies from tools.
pub(crate) fn static_anchor(chain: &crate::Chain, project: &Path) -> Option<PathBuf> {
    let config = chain
        .elements
        .iter()
        .find_map(|e| e.metadata.get("anchor"))?;
    let enabled = config.get("enabled").and_then(serde_json::Value::as_bool) == Some(true);
    let mode = config
        .get("mode")
        .and_then(serde_json::Value::as_str)
        .unwrap_or("auto");
    let tool_dir = chain.tool().path.parent()?;
    let marked = config
        .get("markers_any")
        .and_then(serde_json::Value::as_array)
        .is_some_and(|markers| {
            markers
                .iter()
                .filter_map(serde_json::Value::as_str)
                .any(|m| tool_dir.join(m).is_file())
        });
    if !enabled || !(mode == "always" || (mode == "auto" && marked)) {
        return None;
    }
    match config
        .get("root")
        .and_then(serde_json::Value::as_str)
        .unwrap_or("tool_dir")
    {
        "tool_dir" => Some(tool_dir.to_owned()),
        "tool_parent" => tool_dir.parent().map(Path::to_owned),
        "project_path" => Some(project.to_owned()),
        _ => None,
    }
}

/// The dependency files of `chain` as `verify_deps` would select them at
/// run time with its anchor at `anchor` (placed by [`static_anchor`]).
pub(crate) fn static_deps(chain: &crate::Chain, anchor: &Path) -> Result<Vec<PathBuf>, HostError> {
    Ok(deps_files(chain, Some(anchor))?.map_or_else(Vec::new, |(files, _)| files))
}

fn collect_deps(
    rule: &DepsRule,
    dir: &Path,
    recursive: bool,
    out: &mut Vec<PathBuf>,
) -> Result<(), HostError> {
    let entries = std::fs::read_dir(dir).map_err(|e| HostError::io(dir, e))?;
    for entry in entries {
        let entry = entry.map_err(|e| HostError::io(dir, e))?;
        let path = entry.path();
        let file_type = entry.file_type().map_err(|e| HostError::io(&path, e))?;
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if file_type.is_dir() {
            if recursive && !rule.exclude_dirs.iter().any(|d| d == name.as_ref()) {
                collect_deps(rule, &path, recursive, out)?;
            }
        } else if rule
            .extensions
            .iter()
            .any(|ext| name.ends_with(ext.as_str()))
            && (file_type.is_file() || path.is_file())
        {
            out.push(path);
        }
    }
    Ok(())
}
