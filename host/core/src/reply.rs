//! The shapes results take, typed once: the CLI and the MCP server
//! serialize them and build none of their own.

use std::borrow::Cow;
use std::path::{Path, PathBuf};

use rye_space::{ItemKind, Space};
use serde::Serialize;

use serde_json::{Map, Value};

use crate::{ChainSummary, Event, HostError, SignOutcome, SignedFile};

/// The longest error message a result carries: a message may quote what a
/// file or a caller sent.
pub const MAX_ERROR_TEXT: usize = 16 << 10;

/// The longest id a result repeats: a valid id is at most 1,024 bytes; an
/// invalid one may be any size and is cut.
pub const MAX_ECHOED_ID: usize = 1024;

/// A failed request, as every front end reports it.
#[derive(Debug, Clone, Serialize)]
pub struct ErrorReply {
    status: &'static str,
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    kind: Option<ItemKind>,
    #[serde(skip_serializing_if = "Option::is_none")]
    item_type: Option<ItemKind>,
    #[serde(skip_serializing_if = "Option::is_none")]
    item_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    query: Option<String>,
    pub error: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error_type: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    metadata: Option<Took>,
    /// An execution's chain, when it was built before the failure.
    #[serde(skip_serializing_if = "Option::is_none")]
    chain: Option<Vec<ChainSummary>>,
    /// A directive's inputs, when the parameters did not fit them.
    #[serde(skip_serializing_if = "Option::is_none")]
    declared_inputs: Option<Value>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    warnings: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    trace: Option<Vec<Event>>,
}

/// How long a request ran.
#[derive(Debug, Clone, Serialize)]
pub struct Took {
    pub duration_ms: u64,
}

impl Took {
    pub fn since(started: std::time::Instant) -> Self {
        Self {
            duration_ms: started.elapsed().as_millis() as u64,
        }
    }
}

impl ErrorReply {
    /// A failure with `error` as its message (cut to [`MAX_ERROR_TEXT`]).
    pub fn new(error: impl std::fmt::Display) -> Self {
        Self {
            status: "error",
            kind: None,
            item_type: None,
            item_id: None,
            query: None,
            error: rye_space::shorten(&error.to_string(), MAX_ERROR_TEXT).into_owned(),
            error_type: None,
            metadata: None,
            chain: None,
            declared_inputs: None,
            warnings: Vec::new(),
            trace: None,
        }
    }

    /// The failure's class, where it is known without the error itself.
    pub fn class(mut self, error_type: &'static str) -> Self {
        self.error_type = Some(error_type);
        self
    }

    /// What an execution had got to: its chain, warnings and trace.
    pub(crate) fn so_far(
        mut self,
        chain: Vec<ChainSummary>,
        warnings: Vec<String>,
        trace: Option<Vec<Event>>,
    ) -> Self {
        self.chain = Some(chain);
        self.warnings = warnings;
        self.trace = trace;
        self
    }

    /// The inputs a directive declares.
    pub(crate) fn declared_inputs(mut self, inputs: Value) -> Self {
        self.declared_inputs = Some(inputs);
        self
    }

    /// How long the request ran, as `metadata.duration_ms`.
    pub fn took(mut self, started: std::time::Instant) -> Self {
        self.metadata = Some(Took::since(started));
        self
    }

    /// A host error, with its class.
    pub fn host(error: &HostError) -> Self {
        Self {
            error_type: Some(error.error_type()),
            ..Self::new(error)
        }
    }

    /// The result of an execution names the item as `type` and `item_id`.
    pub fn of_execution(mut self, kind: ItemKind, id: &str) -> Self {
        self.kind = Some(kind);
        self.item_id = Some(echo(id).into_owned());
        self
    }

    /// Other results name it as `item_type` and `item_id`.
    pub fn of_item(mut self, kind: ItemKind, id: &str) -> Self {
        self.item_type = Some(kind);
        self.item_id = Some(echo(id).into_owned());
        self
    }

    /// The item's id only.
    pub fn of_id(mut self, id: &str) -> Self {
        self.item_id = Some(echo(id).into_owned());
        self
    }

    /// The search that failed.
    pub fn of_query(mut self, query: &str) -> Self {
        self.query = Some(echo(query).into_owned());
        self
    }

    /// As a JSON document.
    pub fn to_value(&self) -> Value {
        to_value(self)
    }
}

/// A reply as the JSON document callers get.
pub(crate) fn to_value(reply: impl Serialize) -> Value {
    serde_json::to_value(reply).expect("a reply serializes")
}

/// An id as a result repeats it, cut to [`MAX_ECHOED_ID`].
pub fn echo(id: &str) -> Cow<'_, str> {
    rye_space::shorten(id, MAX_ECHOED_ID)
}

/// One item signed, as the MCP `sign` tool reports it.
#[derive(Debug, Clone, Serialize)]
pub struct SignReply {
    status: &'static str,
    item_id: String,
    path: PathBuf,
    location: Space,
    fingerprint: String,
    trusted: bool,
    changed: bool,
    removed_lockfiles: Vec<PathBuf>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    warnings: Vec<String>,
}

impl SignReply {
    pub fn new(id: &str, space: Space, signed: SignedFile) -> Self {
        let warnings = if signed.trusted {
            Vec::new()
        } else {
            vec![format!(
                "key {} is not trusted here, so this signature will not verify until it is (rye keys trust)",
                signed.fingerprint
            )]
        };
        Self {
            status: "signed",
            item_id: echo(id).into_owned(),
            path: signed.path,
            location: space,
            fingerprint: signed.fingerprint,
            trusted: signed.trusted,
            changed: signed.changed,
            removed_lockfiles: signed.removed_lockfiles,
            warnings,
        }
    }
}

/// A whole space signed: what was, and what failed and why.
#[derive(Debug, Clone, Serialize)]
pub struct SignAllReply {
    status: &'static str,
    summary: String,
    total: usize,
    signed: Vec<PathBuf>,
    failed: Vec<SignFailure>,
}

#[derive(Debug, Clone, Serialize)]
struct SignFailure {
    item: PathBuf,
    error: String,
}

impl SignAllReply {
    pub fn new(outcomes: &[SignOutcome]) -> Self {
        let signed: Vec<PathBuf> = outcomes
            .iter()
            .filter_map(|o| o.as_ref().ok())
            .map(|s| s.path.clone())
            .collect();
        let failed: Vec<SignFailure> = outcomes
            .iter()
            .filter_map(|o| o.as_ref().err())
            .map(|(path, e)| SignFailure {
                item: path.clone(),
                error: e.to_string(),
            })
            .collect();
        let summary = format!(
            "Signed {}/{} files{}",
            signed.len(),
            outcomes.len(),
            if failed.is_empty() {
                String::new()
            } else {
                format!(", {} failed", failed.len())
            }
        );
        Self {
            status: if failed.is_empty() {
                "completed"
            } else {
                "error"
            },
            summary,
            total: outcomes.len(),
            signed,
            failed,
        }
    }
}

/// One file of a signing as `rye sign --json` lists it: the signed file,
/// or the file and why it was not signed.
#[derive(Debug, Serialize)]
#[serde(untagged)]
pub enum SignEntry<'a> {
    Signed(&'a SignedFile),
    Failed { path: &'a Path, error: String },
}

impl<'a> SignEntry<'a> {
    pub fn of(outcome: &'a SignOutcome) -> Self {
        match outcome {
            Ok(signed) => SignEntry::Signed(signed),
            Err((path, error)) => SignEntry::Failed {
                path,
                error: error.to_string(),
            },
        }
    }
}

/// A tool's run, finished: its data, the chain that ran it and what each
/// stage took.
#[derive(Debug, Serialize)]
pub struct ToolReply {
    /// `success`, or `error` when the tool failed.
    pub status: &'static str,
    #[serde(rename = "type")]
    pub kind: ItemKind,
    pub item_id: String,
    pub data: Value,
    pub chain: Vec<ChainSummary>,
    pub metadata: ToolMetadata,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trace: Option<Vec<Event>>,
}

#[derive(Debug, Serialize)]
pub struct ToolMetadata {
    pub duration_ms: u64,
    pub chain_us: u64,
    pub validate_us: u64,
    pub plan_us: u64,
    /// The primitive's time: the process, or the HTTP exchange.
    pub process_us: u64,
    pub return_code: Option<i32>,
    /// The HTTP status of a request.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status_code: Option<u16>,
    pub lockfile_used: bool,
    pub lockfile_created: bool,
    /// Output read past the capture caps and dropped.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub truncated: Option<Truncated>,
}

#[derive(Debug, Serialize)]
pub struct Truncated {
    pub stdout_bytes: u64,
    pub stderr_bytes: u64,
}

/// A tool's chain built and validated, nothing run.
#[derive(Debug, Serialize)]
pub struct DryRunReply {
    pub status: &'static str,
    pub message: &'static str,
    #[serde(rename = "type")]
    pub kind: ItemKind,
    pub item_id: String,
    pub chain: Vec<ChainSummary>,
    pub validated_pairs: usize,
    pub metadata: Took,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trace: Option<Vec<Event>>,
}

/// A directive or knowledge entry, "executed": handed to the agent with
/// what to do with it.
#[derive(Debug, Serialize)]
pub struct ItemReply {
    /// `success`, or `validation_passed` for a dry run.
    pub status: &'static str,
    #[serde(rename = "type")]
    pub kind: ItemKind,
    pub item_id: String,
    pub data: Value,
    /// A directive's inputs, filled from the parameters and defaults.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub inputs: Option<Map<String, Value>>,
    pub your_directions: String,
    pub metadata: ItemMetadata,
    pub signature: Value,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

#[derive(Debug, Serialize)]
pub struct ItemMetadata {
    pub duration_ms: u64,
    pub path: PathBuf,
    pub source: Space,
}
