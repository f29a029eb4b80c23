//! Checking a whole `.ai/` tree without running anything: every item is
//! parsed, every tool's chain built and validated, every signature checked.
//! What `rye validate` reports.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use rye_components::Severity;
use rye_integrity::IntegrityError;
use rye_space::{ItemKind, Space};
use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::finding::Finding;
use crate::parse::ParserLookup;
use crate::session::Session;
use crate::{HostError, Rye};

/// What a validation run found.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// The folder validated (the one holding `.ai/`).
    pub root: PathBuf,
    pub items: usize,
    pub chains: usize,
    /// The validators run: name, version, space and file.
    pub validators: Vec<ValidatorSummary>,
    /// Sorted by path, then line.
    pub findings: Vec<Finding>,
    /// Every item file checked, in order.
    #[serde(skip)]
    pub checked: Vec<PathBuf>,
}

impl Report {
    /// Whether any finding is an error.
    pub fn has_errors(&self) -> bool {
        self.findings.iter().any(|f| f.severity == Severity::Error)
    }
}

/// A validator that took part in a run.
#[derive(Debug, Clone, Serialize)]
pub struct ValidatorSummary {
    pub name: String,
    pub version: String,
    pub space: Space,
    pub path: PathBuf,
}

/// How strict a validation run is, and who hears of its progress.
#[derive(Clone, Copy, Default)]
pub struct ValidateOptions<'a> {
    /// An unsigned item is an error rather than a warning.
    pub require_signed: bool,
    /// Called with (files checked, files in all) as the run goes, from
    /// any of its threads.
    pub progress: Option<&'a (dyn Fn(usize, usize) + Sync)>,
}

impl Rye {
    /// Validates the `.ai/` tree of `root` (the folder holding it) as a
    /// project: parses every item, builds and validates every tool's
    /// chain, and checks every signature. Files are checked in parallel.
    pub fn validate_tree(
        &self,
        root: &Path,
        options: ValidateOptions<'_>,
    ) -> Result<Report, HostError> {
        let ai = root.join(".ai");
        if !ai.is_dir() {
            return Err(HostError::NoAiFolder {
                root: root.to_owned(),
            });
        }
        let session = self.session(Some(root));
        let spaces = &session.spaces;
        let extractors = session.extractors(self)?;
        let mut items: Vec<(ItemKind, String, PathBuf)> = Vec::new();
        let mut conflicts = Vec::new();
        // Config items count when a space defines the config kind; the key
        // store under `config/keys/` is not made of items.
        let config = extractors.get(ItemKind::Config).map(|_| ItemKind::Config);
        for kind in ItemKind::PRIMARY.into_iter().chain(config) {
            let extractor = extractors.require(kind)?;
            let listed =
                spaces.list_cached(&self.listings, kind, Space::Project, &extractor.extensions)?;
            for item in listed
                .iter()
                .filter(|item| !(kind == ItemKind::Config && crate::layout::is_key_store(&item.id)))
            {
                if let Some(escape) = item.escape_error(&ai) {
                    conflicts.push(Finding::error(
                        &item.path,
                        "link-escape",
                        escape.to_string(),
                    ));
                    continue;
                }
                items.push((kind, item.id.clone(), item.path.clone()));
                if !item.conflicts.is_empty() {
                    conflicts.push(Finding::error(
                        &item.path,
                        "conflict",
                        format!(
                            "{kind} {:?} has more than one file in this space: {}",
                            item.id,
                            rye_space::display_paths(&item.conflicts)
                        ),
                    ));
                }
            }
        }
        items.sort_by(|a, b| a.2.cmp(&b.2));
        let validators = self.validator_set(
            spaces,
            &session.trust(self),
            crate::validators::Admission::Sandboxed,
        )?;
        let findings = Mutex::new(conflicts);
        // Tools with no executor wait until every chain is known: those
        // under an anchor are the signed helpers `verify_deps` checks, not
        // chain roots.
        let deferred = Mutex::new(Vec::new());
        let dependencies = Mutex::new(Dependencies::default());
        let done = std::sync::atomic::AtomicUsize::new(0);
        let chains = std::sync::atomic::AtomicUsize::new(0);
        let next = std::sync::atomic::AtomicUsize::new(0);
        let workers = std::thread::available_parallelism()
            .map_or(2, |n| n.get())
            .min(8);
        let tool_check = ToolCheck {
            session: &session,
            validators: &validators,
            chains: &chains,
            dependencies: &dependencies,
            root,
        };
        std::thread::scope(|scope| {
            for _ in 0..workers {
                scope.spawn(|| {
                    let mut parsers = ParserLookup::default();
                    loop {
                        let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let Some((kind, id, path)) = items.get(i) else {
                            break;
                        };
                        let mut found = Vec::new();
                        let parsed = self.check_item(
                            &session,
                            &mut parsers,
                            (*kind, id, path),
                            options,
                            &mut found,
                        );
                        let maybe_dependency = *kind == ItemKind::Tool
                            && parsed.as_ref().is_some_and(|p| {
                                p.outcome.as_ref().as_ref().is_ok_and(|d| {
                                    !is_data(id, &d.document) && !has_executor(&d.document)
                                })
                            });
                        if maybe_dependency {
                            deferred
                                .lock()
                                .expect("deferred lock")
                                .push((i, parsed, found));
                        } else {
                            tool_check.run(self, (*kind, id, path), parsed.as_ref(), &mut found);
                            findings.lock().expect("findings lock").extend(found);
                        }
                        let done = done.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
                        if let Some(progress) = options.progress {
                            progress(done, items.len());
                        }
                    }
                });
            }
        });
        let mut deferred = deferred.into_inner().expect("deferred lock");
        deferred.sort_by_key(|(i, _, _)| *i);
        for (i, parsed, mut found) in deferred {
            let (kind, id, path) = &items[i];
            // A dependency is checked as one: its signature and its parse.
            let dependency = dependencies
                .lock()
                .expect("dependencies lock")
                .files
                .contains(path);
            if !dependency {
                tool_check.run(self, (*kind, id, path), parsed.as_ref(), &mut found);
            }
            findings.lock().expect("findings lock").extend(found);
        }
        let mut findings = findings.into_inner().expect("findings lock");
        findings.extend(
            validators
                .findings
                .into_inner()
                .expect("validator findings lock"),
        );
        findings.sort_by(|a, b| (&a.path, a.line, &a.rule).cmp(&(&b.path, b.line, &b.rule)));
        findings.dedup_by(|a, b| {
            a.path == b.path && a.rule == b.rule && a.line == b.line && a.message == b.message
        });
        Ok(Report {
            root: root.to_owned(),
            items: items.len(),
            chains: chains.into_inner(),
            validators: validators
                .validators
                .iter()
                .map(|v| ValidatorSummary {
                    name: v.name.clone(),
                    version: v.info.version.clone(),
                    space: v.space,
                    path: v.path.clone(),
                })
                .collect(),
            findings,
            checked: items.into_iter().map(|(_, _, path)| path).collect(),
        })
    }

    fn check_item(
        &self,
        session: &Session,
        parsers: &mut ParserLookup,
        item: (ItemKind, &String, &PathBuf),
        options: ValidateOptions<'_>,
        found: &mut Vec<Finding>,
    ) -> Option<crate::ParsedItem> {
        let (kind, id, path) = item;
        let finding =
            |severity, rule: &str, message: String, at: Option<rye_components::Position>| Finding {
                path: path.clone(),
                line: at.map(|p| p.line),
                column: at.map(|p| p.column),
                severity,
                rule: rule.into(),
                message,
                validator: None,
            };
        let bytes = match std::fs::read(path) {
            Ok(bytes) => bytes,
            Err(e) => {
                found.push(finding(Severity::Error, "read", e.to_string(), None));
                return None;
            }
        };
        let hash: [u8; 32] = Sha256::digest(&bytes).into();
        let unsigned =
            "unsigned: the file has no signature line (sign it with `rye sign`)".to_owned();
        // Config files may stay unsigned wherever they are read, so an
        // unsigned one only warns, whatever is demanded of other items.
        let unsigned_severity = if options.require_signed && kind != ItemKind::Config {
            Severity::Error
        } else {
            Severity::Warning
        };
        let (trust, extractors) = (session.trust(self), session.extractors(self).ok());
        match self.verify_item(
            &trust,
            extractors.as_deref(),
            (kind, Space::Project, path),
            hash,
            Some(&bytes),
        ) {
            Ok(crate::Signed::UnsignedAllowed) => {
                found.push(finding(unsigned_severity, "signature", unsigned, None));
            }
            Ok(signed) => {
                if let Some(warning) = signed.warning("signature") {
                    found.push(finding(Severity::Warning, "signature", warning, None));
                }
            }
            Err(HostError::Integrity { error, .. }) if error.is_unsigned() => {
                found.push(finding(
                    unsigned_severity,
                    "signature",
                    error.to_string(),
                    None,
                ));
            }
            Err(HostError::Integrity {
                error: IntegrityError::NoFormat { .. },
                ..
            }) if !options.require_signed => {}
            Err(HostError::Integrity { error, .. }) => {
                found.push(finding(
                    Severity::Error,
                    "signature",
                    error.to_string(),
                    None,
                ));
            }
            Err(e) => found.push(finding(Severity::Error, "signature", e.to_string(), None)),
        }
        match self.parse_bytes(session, parsers, (kind, id, Space::Project, path), bytes) {
            Ok(parsed) => {
                match parsed.outcome.as_ref() {
                    Ok(document) => {
                        for d in &document.diagnostics {
                            found.push(finding(d.severity, &d.rule, d.message.clone(), d.at));
                        }
                    }
                    Err(failure) => found.push(finding(
                        Severity::Error,
                        "parse",
                        failure.to_string(),
                        failure.position(),
                    )),
                }
                Some(parsed)
            }
            Err(e) => {
                found.push(finding(Severity::Error, "parse", e.to_string(), None));
                None
            }
        }
    }
}

/// The files the anchored chains seen so far name as dependencies, and the
/// (anchor, tool folder, rule) walks already done.
#[derive(Default)]
struct Dependencies {
    files: std::collections::HashSet<PathBuf>,
    walked: std::collections::HashSet<(PathBuf, PathBuf, String)>,
}

/// Validators and chain for one item, once it has parsed.
struct ToolCheck<'a> {
    session: &'a Session,
    validators: &'a crate::validators::ValidatorSet,
    chains: &'a std::sync::atomic::AtomicUsize,
    dependencies: &'a Mutex<Dependencies>,
    root: &'a Path,
}

impl ToolCheck<'_> {
    fn run(
        &self,
        rye: &Rye,
        (kind, id, path): (ItemKind, &String, &PathBuf),
        parsed: Option<&crate::ParsedItem>,
        found: &mut Vec<Finding>,
    ) {
        let document =
            parsed.and_then(|p| p.outcome.as_ref().as_ref().ok().map(|d| (p, &d.document)));
        if let Some((parsed, document)) = document {
            let schema = match kind {
                ItemKind::Config => match rye.config_schema(self.session, id) {
                    Ok(schema) => schema,
                    Err(e) => {
                        found.push(Finding::error(path, "config-schema", e.to_string()));
                        return;
                    }
                },
                _ => None,
            };
            self.validators
                .check_item(rye, parsed, document, schema.as_ref(), found);
        }
        if kind != ItemKind::Tool
            || document.is_some_and(|(_, d)| is_data(id, d))
            || found.iter().any(|f| f.severity == Severity::Error)
        {
            return;
        }
        self.chains
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let chain = match rye.build_chain(self.session, id) {
            Ok(chain) => chain,
            Err(e) => {
                let rule = if matches!(e, HostError::Integrity { .. }) {
                    "signature"
                } else {
                    "chain"
                };
                found.push(Finding::error(path, rule, e.to_string()));
                return;
            }
        };
        self.validators.check_chain(rye, &chain, found);
        self.note_dependencies(&chain, path, found);
    }

    /// Adds the files the chain's `verify_deps` selects under its anchor.
    fn note_dependencies(&self, chain: &crate::Chain, path: &Path, found: &mut Vec<Finding>) {
        let Some(rule) = chain
            .elements
            .iter()
            .find_map(|e| e.metadata.get("verify_deps"))
        else {
            return;
        };
        let Some(anchor) = crate::integrity::static_anchor(chain, self.root) else {
            return;
        };
        let tool_dir = path.parent().unwrap_or(Path::new("/")).to_owned();
        let walk = (anchor.clone(), tool_dir, rule.to_string());
        if !self
            .dependencies
            .lock()
            .expect("dependencies lock")
            .walked
            .insert(walk)
        {
            return;
        }
        match crate::integrity::static_deps(chain, &anchor) {
            Ok(files) => self
                .dependencies
                .lock()
                .expect("dependencies lock")
                .files
                .extend(files),
            Err(e) => found.push(Finding::error(path, "verify_deps", e.to_string())),
        }
    }
}

/// Whether a tool names its executor.
fn has_executor(document: &serde_json::Map<String, serde_json::Value>) -> bool {
    crate::metadata::tool_field(document, "executor_id").is_some_and(|v| !v.is_null())
}

/// An extractor (`tool_type: extractor`), an MCP server item (`tool_type:
/// mcp_server`) or a config schema (id `<name>.config-schema`) with no
/// executor is data the host reads, not a tool anything runs: it has no
/// chain to check.
fn is_data(id: &str, document: &serde_json::Map<String, serde_json::Value>) -> bool {
    use crate::metadata::tool_field;
    let tool_type = tool_field(document, "tool_type").and_then(serde_json::Value::as_str);
    (matches!(tool_type, Some("extractor" | crate::mcp::SERVER_TOOL_TYPE))
        || id.ends_with(".config-schema"))
        && tool_field(document, "executor_id").is_none_or(serde_json::Value::is_null)
}
