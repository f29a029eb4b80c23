//! Validator components: found under `.ai/validators/` through the spaces,
//! asked what they want to see, and run on items and chains.
//!
//! A validator of the project space may come from the very tree under
//! test. In `rye validate` it runs even unsigned (its signature is checked
//! and reported like any file's): it is a function of its subject with no
//! way out of the sandbox, so the worst it can do is report wrongly. On
//! `sign` and `execute` every validator must pass the integrity policy
//! like any other component.
//!
//! A validator that traps, runs past its deadline or its memory cap
//! becomes one finding against the validator's file and is not run again
//! for the rest of the run; the other validators go on.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use rye_components::{
    ChainLink, ComponentError, ItemSubject, LoadedComponent, PluginSpace, SchemaRef, Severity,
    Subject, ValidatorInfo, World,
};
use rye_integrity::TrustStore;
use rye_space::{ItemKind, Space, Spaces};
use sha2::{Digest, Sha256};

use crate::config_schema::ConfigSchema;
use crate::finding::Finding;
use crate::metadata::plugin_kind;
use crate::rye::ValidatorListing;
use crate::session::Session;
use crate::{Chain, HostError, ParsedItem, Rye, Signed};

/// One validator ready to run.
#[derive(Debug, Clone)]
pub struct Validator {
    /// Its name: the path under `.ai/validators/` without `.wasm`.
    pub name: String,
    pub space: Space,
    pub path: PathBuf,
    pub info: ValidatorInfo,
    pub(crate) component: Arc<LoadedComponent>,
}

impl Validator {
    fn wants(&self, kind: ItemKind) -> bool {
        self.info.kinds.contains(&plugin_kind(kind))
    }
}

/// How validators are admitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Admission {
    /// Project validators run whatever their signature (it is reported);
    /// user and system ones must verify.
    Sandboxed,
    /// Every validator must pass the integrity policy.
    Enforced,
}

/// The validators of one run, and which of them have failed.
pub(crate) struct ValidatorSet {
    pub(crate) validators: Vec<Validator>,
    /// Per validator: whether it has been stopped.
    stopped: Vec<AtomicBool>,
    /// Findings about the validators themselves.
    pub(crate) findings: Mutex<Vec<Finding>>,
}

/// What one subject is, for the findings about it.
pub(crate) struct SubjectFile<'a> {
    pub(crate) path: &'a Path,
    /// How the subject is named in findings against a validator.
    pub(crate) label: String,
}

impl ValidatorSet {
    pub(crate) fn is_empty(&self) -> bool {
        self.validators.is_empty()
    }

    /// Runs every validator that wants `item` (whose parse succeeded);
    /// a config item goes with its schema, if it has one.
    pub(crate) fn check_item(
        &self,
        rye: &Rye,
        item: &ParsedItem,
        document: &serde_json::Map<String, serde_json::Value>,
        schema: Option<&ConfigSchema>,
        out: &mut Vec<Finding>,
    ) {
        if !self.validators.iter().any(|v| v.wants(item.kind)) {
            return;
        }
        let parsed = serde_json::to_string(document).expect("a JSON map serializes");
        let file_name = item
            .path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default();
        let subject = Subject::Item(ItemSubject {
            kind: plugin_kind(item.kind),
            item_id: &item.id,
            space: plugin_space(item.space),
            file_name,
            content: &item.content,
            parsed: &parsed,
            config_schema: schema.map(|s| SchemaRef {
                item_id: &s.id,
                schema: &s.schema,
            }),
        });
        let file = SubjectFile {
            path: &item.path,
            label: format!("{} {}", item.kind, item.id),
        };
        for (i, validator) in self.validators.iter().enumerate() {
            if validator.wants(item.kind) {
                self.run(rye, i, subject, &file, out);
            }
        }
    }

    /// Runs every validator that checks chains on `chain`.
    pub(crate) fn check_chain(&self, rye: &Rye, chain: &Chain, out: &mut Vec<Finding>) {
        if !self.validators.iter().any(|v| v.info.checks_chains) {
            return;
        }
        let links = chain_links(chain);
        let tool = chain.tool();
        let file = SubjectFile {
            path: &tool.path,
            label: format!("the chain of tool {}", tool.item_id),
        };
        for (i, validator) in self.validators.iter().enumerate() {
            if validator.info.checks_chains {
                self.run(rye, i, Subject::Chain(&links), &file, out);
            }
        }
    }

    fn run(
        &self,
        rye: &Rye,
        index: usize,
        subject: Subject<'_>,
        file: &SubjectFile<'_>,
        out: &mut Vec<Finding>,
    ) {
        let validator = &self.validators[index];
        if self.stopped[index].load(Ordering::Relaxed) {
            return;
        }
        match rye.components.validate(&validator.component, subject) {
            Ok(Ok(validated)) => {
                // Past its bounds, a validator is stopped; if a call on
                // another thread stopped it first, this call's output is
                // dropped too, so a flood is kept once, whatever the timing.
                let overflowed = validated.overflow.is_some();
                if overflowed && !self.stop(index) {
                    return;
                }
                out.extend(validated.findings.into_iter().map(|d| Finding {
                    path: file.path.to_owned(),
                    line: d.at.map(|p| p.line),
                    column: d.at.map(|p| p.column),
                    severity: d.severity,
                    rule: d.rule,
                    message: d.message,
                    validator: Some(validator.name.clone()),
                }));
                if let Some(overflow) = validated.overflow {
                    self.against(
                        validator,
                        Severity::Error,
                        "validator/output",
                        format!(
                            "on {}, {overflow}; it is not run again in this run",
                            file.label
                        ),
                    );
                }
            }
            Ok(Err(message)) => self.against(
                validator,
                Severity::Error,
                "validator/failed",
                format!("it could not check {}: {message}", file.label),
            ),
            Err(error) => {
                if !self.stop(index) {
                    return;
                }
                self.against(
                    validator,
                    Severity::Error,
                    "validator/crashed",
                    format!(
                        "on {}, {}; it is not run again in this run",
                        file.label, error.kind
                    ),
                );
            }
        }
    }

    /// Stops validator `index` for the rest of the run; false if it was
    /// stopped already (by another thread's call).
    fn stop(&self, index: usize) -> bool {
        !self.stopped[index].swap(true, Ordering::Relaxed)
    }

    fn against(&self, validator: &Validator, severity: Severity, rule: &str, message: String) {
        self.findings
            .lock()
            .expect("validator findings lock")
            .push(against(
                &validator.path,
                &validator.name,
                severity,
                rule,
                message,
            ));
    }
}

impl Rye {
    /// The validators of `spaces`, highest precedence first; a name in a
    /// higher space hides the same name below. Validators that cannot be
    /// loaded are findings against their files.
    pub(crate) fn validator_set(
        &self,
        spaces: &Spaces,
        trust: &TrustStore,
        admission: Admission,
    ) -> Result<ValidatorSet, HostError> {
        let mut seen = HashSet::new();
        let mut validators = Vec::new();
        let mut findings = Vec::new();
        for root in spaces.roots() {
            let dir = root.ai_dir.join(crate::component_folder(World::Validator));
            let files = self.validator_files(&dir)?;
            for (name, path) in files.iter() {
                if !seen.insert(name.clone()) {
                    continue;
                }
                match self.load_validator(trust, root.space, name, path, admission) {
                    Ok((validator, problem)) => {
                        findings.extend(problem);
                        validators.push(validator);
                    }
                    Err(finding) => findings.push(finding),
                }
            }
        }
        Ok(ValidatorSet {
            stopped: validators.iter().map(|_| AtomicBool::new(false)).collect(),
            validators,
            findings: Mutex::new(findings),
        })
    }

    /// Loads one validator and asks what it wants. Besides the validator,
    /// returns what its signature leaves to say, if anything.
    fn load_validator(
        &self,
        trust: &TrustStore,
        space: Space,
        name: &str,
        path: &Path,
        admission: Admission,
    ) -> Result<(Validator, Option<Finding>), Finding> {
        let against = |severity, rule: &str, message| against(path, name, severity, rule, message);
        let mut verdict = None;
        let loaded = self
            .components
            .load_checked(path, World::Validator, |hash| {
                let checked = self.verify_component(trust, space, path, *hash);
                let admitted = checked.is_ok()
                    || (admission == Admission::Sandboxed && space == Space::Project);
                // The finding names the file already.
                verdict = Some(checked.map_err(|e| match e {
                    HostError::Integrity { error, .. } => error.to_string(),
                    other => other.to_string(),
                }));
                if admitted { Ok(()) } else { Err(()) }
            })
            .map_err(|e: ComponentError| {
                against(Severity::Error, "validator/load", e.kind.to_string())
            })?;
        let verdict = verdict.expect("checked before loading");
        let component = match loaded {
            Ok(component) => component,
            Err(()) => {
                let why = verdict.err().unwrap_or_default();
                return Err(against(
                    Severity::Error,
                    "signature",
                    format!("not run: {why}"),
                ));
            }
        };
        let info = self.describe(&component).map_err(|e| {
            against(
                Severity::Error,
                "validator/crashed",
                format!("describe failed: {}", e.kind),
            )
        })?;
        let problem = match verdict {
            Ok(Signed::UnsignedAllowed) => Some(against(
                Severity::Warning,
                "signature",
                format!(
                    "unsigned: no detached signature beside it (sign it with `rye sign validator {name}`)"
                ),
            )),
            Ok(signed) => signed
                .warning("its signature")
                .map(|w| against(Severity::Warning, "signature", w)),
            Err(why) => Some(against(
                Severity::Warning,
                "signature",
                format!("run in the sandbox although {why}"),
            )),
        };
        Ok((
            Validator {
                name: name.to_owned(),
                space,
                path: path.to_owned(),
                info,
                component,
            },
            problem,
        ))
    }

    /// What a validator says of itself, asked once per component.
    fn describe(&self, component: &Arc<LoadedComponent>) -> Result<ValidatorInfo, ComponentError> {
        if let Some(known) = self
            .validator_info
            .lock()
            .expect("validator info lock")
            .get(&component.hash)
        {
            return known.clone();
        }
        let info = self.components.describe_validator(component);
        self.validator_info
            .lock()
            .expect("validator info lock")
            .insert(component.hash, info.clone());
        info
    }

    /// Runs the validators, each admitted under the integrity policy (see
    /// [`Admission::Enforced`]), on `item` and, when given, on `chain`.
    /// Results are kept by validator and subject, so an unchanged item
    /// costs a lookup and is parsed only on a miss. Returns the findings;
    /// a validator that cannot be admitted refuses the whole request.
    pub(crate) fn enforce_validators(
        &self,
        session: &Session,
        item: ItemRef<'_>,
        chain: Option<&Chain>,
    ) -> Result<Arc<Vec<Finding>>, HostError> {
        let set = self.validator_set(&session.spaces, &session.trust(self), Admission::Enforced)?;
        let admitted = set
            .findings
            .lock()
            .expect("validator findings lock")
            .clone();
        if let Some(refused) = admitted.iter().find(|f| f.severity == Severity::Error) {
            return Err(HostError::Validation {
                path: refused.path.clone(),
                report: refused.message.clone(),
            });
        }
        if set.is_empty() {
            return Ok(Arc::new(admitted));
        }
        let schema = if item.kind == ItemKind::Config {
            self.config_schema(session, item.id)?
        } else {
            None
        };
        let mut h = Sha256::new();
        for v in &set.validators {
            h.update(v.component.hash);
        }
        h.update(item.kind.to_string());
        h.update(b"\0");
        h.update(item.id);
        h.update(b"\0");
        h.update(item.space.to_string());
        h.update(item.content_hash);
        if let Some(schema) = &schema {
            h.update(b"\0schema\0");
            h.update(&schema.id);
            h.update(schema.content_hash);
        }
        if let Some(chain) = chain {
            for e in &chain.elements {
                h.update(b"\0");
                h.update(&e.item_id);
                h.update(b"\0");
                h.update(e.space.to_string());
                h.update(e.content_hash);
            }
        }
        let key: [u8; 32] = h.finalize().into();
        if let Some(found) = self
            .validations
            .lock()
            .expect("validation cache lock")
            .get(&key)
        {
            return Ok(found);
        }
        let mut found = admitted;
        if set.validators.iter().any(|v| v.wants(item.kind)) {
            let mut parsers = crate::parse::ParserLookup::default();
            let parsed = self.parse_file(
                session,
                &mut parsers,
                (item.kind, item.id, item.space, item.path),
            )?;
            if let Ok(document) = parsed.outcome.as_ref() {
                set.check_item(
                    self,
                    &parsed,
                    &document.document,
                    schema.as_ref(),
                    &mut found,
                );
            }
        }
        if let Some(chain) = chain {
            set.check_chain(self, chain, &mut found);
        }
        found.extend(
            set.findings
                .lock()
                .expect("validator findings lock")
                .drain(..),
        );
        let found = Arc::new(found);
        self.validations
            .lock()
            .expect("validation cache lock")
            .insert(key, found.clone());
        Ok(found)
    }
}

/// An item validators are asked about on `execute` or `sign`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ItemRef<'a> {
    pub(crate) kind: ItemKind,
    pub(crate) id: &'a str,
    pub(crate) space: Space,
    pub(crate) path: &'a Path,
    pub(crate) content_hash: [u8; 32],
}

/// The error findings of a validation, as one refusal; `None` when there
/// are none.
pub(crate) fn refusal(findings: &[Finding]) -> Option<HostError> {
    let errors: Vec<&Finding> = findings
        .iter()
        .filter(|f| f.severity == Severity::Error)
        .collect();
    let first = errors.first()?;
    let report = errors
        .iter()
        .map(|f| {
            let at = f.line.map(|l| format!(":{l}")).unwrap_or_default();
            let by = f
                .validator
                .as_deref()
                .map(|v| format!(" (validator {v})"))
                .unwrap_or_default();
            format!("{}{at}: [{}] {}{by}", f.path.display(), f.rule, f.message)
        })
        .collect::<Vec<_>>()
        .join("; ");
    Some(HostError::Validation {
        path: first.path.clone(),
        report,
    })
}

/// A finding against the validator `name` at `path` itself.
fn against(path: &Path, name: &str, severity: Severity, rule: &str, message: String) -> Finding {
    Finding {
        path: path.to_owned(),
        line: None,
        column: None,
        severity,
        rule: rule.into(),
        message: format!("validator {name}: {message}"),
        validator: Some(name.to_owned()),
    }
}

/// The chain as validators see it.
pub(crate) fn chain_links(chain: &Chain) -> Vec<ChainLink> {
    chain
        .elements
        .iter()
        .map(|e| ChainLink {
            item_id: e.item_id.clone(),
            space: plugin_space(e.space),
            metadata: e.metadata_json.to_string(),
        })
        .collect()
}

impl Rye {
    /// The validator components under `dir` (name, path), sorted: listed
    /// again only when a watch on one of the folders listed reports a
    /// change (see [`rye_space::ListingCache::stamps`]).
    fn validator_files(&self, dir: &Path) -> Result<Arc<Vec<(String, PathBuf)>>, HostError> {
        let listing = || -> Result<ValidatorListing, HostError> {
            let mut files = Vec::new();
            let mut folders = vec![dir.to_owned()];
            collect_wasm(dir, dir, &mut files, &mut folders).map_err(|e| HostError::io(dir, e))?;
            files.sort();
            Ok(ValidatorListing {
                files: Arc::new(files),
                folders,
            })
        };
        if let Some((listing, stamps)) = self
            .validator_listings
            .lock()
            .expect("validator listings lock")
            .get(dir)
            && *self.listings.stamps(&listing.folders) == *stamps
        {
            return Ok(listing.files.clone());
        }
        // Watched from before the second listing, kept only if both agree:
        // a change between them is not missed.
        let first = listing()?;
        let stamps = self.listings.stamps(&first.folders).to_vec();
        let second = listing()?;
        if second == first {
            self.validator_listings
                .lock()
                .expect("validator listings lock")
                .insert(dir.to_owned(), (second.clone(), stamps));
        }
        Ok(second.files)
    }
}

/// Every `*.wasm` under `dir`, with its name relative to `base`, and
/// every folder below `dir` that was read.
fn collect_wasm(
    base: &Path,
    dir: &Path,
    out: &mut Vec<(String, PathBuf)>,
    folders: &mut Vec<PathBuf>,
) -> std::io::Result<()> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    for entry in entries {
        let entry = entry?;
        let path = entry.path();
        let file_type = entry.file_type()?;
        if file_type.is_dir() {
            folders.push(path.clone());
            collect_wasm(base, &path, out, folders)?;
        } else if path.extension().is_some_and(|e| e == "wasm")
            && let Ok(relative) = path.strip_prefix(base)
            && let Some(name) = relative.with_extension("").to_str()
        {
            out.push((name.replace(std::path::MAIN_SEPARATOR, "/"), path));
        }
    }
    Ok(())
}

pub(crate) fn plugin_space(space: Space) -> PluginSpace {
    match space {
        Space::Project => PluginSpace::Project,
        Space::User => PluginSpace::User,
        Space::System => PluginSpace::System,
    }
}
