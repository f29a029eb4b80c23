//! A graph run kept in the project's content-addressed store, so it goes
//! on after a crash from its last step.
//!
//! Each walker outcome is stored before the host acts on it: the values
//! of the state keys the step changed (each a `graph_value` object, so a
//! value that does not change is stored once however many steps follow),
//! then an `execution_snapshot` naming every key's value by hash, the
//! walker's cursor and the run's place, then the ref
//! `refs/graphs/<run>.json` moved to it. Each action's result is stored
//! (a `node_result`) and named in the snapshot as soon as the action
//! ends, so an action that finished before a crash is not run again on
//! resume. Events go to `graphs/<run>/transcript.jsonl` beside it.
//!
//! Files are written whole and renamed into place: a run killed at any
//! moment leaves the last snapshot or the next one. They are not synced
//! to disk at every step (that would cost milliseconds a step), so a
//! power cut may lose the steps the system had not yet written out.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use rye_cas::{Cas, ContentHash, LocalRefs, LocalStorage, object};
use serde_json::{Map, Value, json};

use rye_components::WalkOutcome;

/// The run a snapshot describes.
#[derive(Debug, Clone)]
pub(crate) struct RunHeader {
    pub run_id: String,
    pub graph_id: String,
    /// SHA-256 of the graph file the run started from, hex.
    pub graph_hash: String,
}

pub(crate) struct Checkpoints {
    cas: Cas<LocalStorage>,
    /// Where the refs of graph runs live.
    refs: PathBuf,
    transcript: PathBuf,
    header: RunHeader,
    thread_id: Option<String>,
    /// Each state key's value, by hash.
    state: BTreeMap<String, String>,
    cursor: Value,
    node: Option<String>,
    steps: u32,
    /// Results of the dispatch under way that have come in.
    results: Vec<(usize, String)>,
}

/// What a stored run gives back to go on with.
pub(crate) struct Stored {
    pub header: RunHeader,
    pub thread_id: Option<String>,
    pub status: String,
    pub state: Vec<(String, Value)>,
    pub cursor: Value,
    /// Results of the dispatch that was under way, by its index.
    pub results: BTreeMap<usize, Value>,
    /// Why the run ended, when it failed.
    pub error: Option<String>,
}

fn ref_name(run_id: &str) -> String {
    format!("graphs/{run_id}")
}

impl Checkpoints {
    /// Checkpoints of a new run (or one going on, from `stored`) in the
    /// store under `state_dir`.
    pub(crate) fn new(
        cas: Cas<LocalStorage>,
        state_dir: &Path,
        header: RunHeader,
        thread_id: Option<String>,
        stored: Option<&Stored>,
    ) -> Self {
        let state = stored
            .map(|s| {
                s.state
                    .iter()
                    .map(|(k, v)| (k.clone(), value_hash(v).hex()))
                    .collect()
            })
            .unwrap_or_default();
        Self {
            cas,
            refs: state_dir.join("objects/refs/graphs"),
            transcript: state_dir
                .join("graphs")
                .join(&header.run_id)
                .join("transcript.jsonl"),
            header,
            thread_id,
            state,
            cursor: stored.map_or(Value::Null, |s| s.cursor.clone()),
            node: None,
            steps: 0,
            results: Vec::new(),
        }
    }

    /// Stores `outcome` (the state it changed, where the run is) before
    /// the host acts on it.
    pub(crate) async fn outcome(&mut self, outcome: &WalkOutcome) -> Result<(), String> {
        for (key, value) in &outcome.changes {
            match value {
                Some(value) => {
                    let hash = self
                        .cas
                        .put_object(&graph_value(value))
                        .await
                        .map_err(|e| e.to_string())?;
                    self.state.insert(key.clone(), hash.hex());
                }
                None => {
                    self.state.remove(key);
                }
            }
        }
        self.cursor = outcome.cursor.clone();
        self.node = outcome.node.clone();
        self.steps = outcome.steps;
        self.results.clear();
        let status = match &outcome.next {
            rye_components::WalkNext::Finished(result) => {
                if result.get("success") == Some(&Value::Bool(true)) {
                    "completed"
                } else {
                    "error"
                }
            }
            _ => "running",
        };
        let error = match &outcome.next {
            rye_components::WalkNext::Finished(result) => result
                .get("error")
                .and_then(Value::as_str)
                .map(str::to_owned),
            _ => None,
        };
        self.write(status, error).await?;
        self.events(&outcome.events)
    }

    /// Stores the result of action `index` of the dispatch under way.
    pub(crate) async fn result(&mut self, index: usize, result: &Value) -> Result<(), String> {
        let hash = self
            .cas
            .put_object(&object(
                "node_result",
                Map::from_iter([("result".to_owned(), result.clone())]),
            ))
            .await
            .map_err(|e| e.to_string())?;
        self.results.push((index, hash.hex()));
        self.write("running", None).await
    }

    async fn write(&mut self, status: &str, error: Option<String>) -> Result<(), String> {
        let mut fields = Map::new();
        fields.insert("graph_run_id".into(), json!(self.header.run_id));
        fields.insert("graph_id".into(), json!(self.header.graph_id));
        fields.insert("graph_hash".into(), json!(self.header.graph_hash));
        fields.insert("thread_id".into(), json!(self.thread_id));

        fields.insert("status".into(), json!(status));
        fields.insert("step".into(), json!(self.steps));
        fields.insert("current_node".into(), json!(self.node));
        fields.insert("state".into(), json!(self.state));
        fields.insert("cursor".into(), self.cursor.clone());
        fields.insert(
            "results".into(),
            Value::Array(
                self.results
                    .iter()
                    .map(|(i, h)| json!({"index": i, "hash": h}))
                    .collect(),
            ),
        );
        if let Some(error) = error {
            fields.insert("error".into(), json!(error));
        }
        let hash = self
            .cas
            .put_object(&object("execution_snapshot", fields))
            .await
            .map_err(|e| e.to_string())?;
        // Written whole and renamed into place (the store's own writes
        // keep a file that is already there, as content-addressed files
        // may; a ref changes).
        let target = self.refs.join(format!("{}.json", self.header.run_id));
        let temp = self.refs.join(format!(
            ".{}.json.tmp.{}",
            self.header.run_id,
            std::process::id()
        ));
        let written = (|| {
            std::fs::create_dir_all(&self.refs)?;
            std::fs::write(&temp, json!({"hash": hash.hex()}).to_string())?;
            std::fs::rename(&temp, &target)
        })();
        written.map_err(|e| format!("{}: {e}", target.display()))
    }

    fn events(&self, events: &[(String, Value)]) -> Result<(), String> {
        if events.is_empty() {
            return Ok(());
        }
        let at = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        let mut lines = String::new();
        for (event_type, payload) in events {
            lines.push_str(
                &json!({"timestamp": at, "thread_id": self.thread_id, "event_type": event_type, "payload": payload})
                    .to_string(),
            );
            lines.push('\n');
        }
        let write = || -> std::io::Result<()> {
            if let Some(dir) = self.transcript.parent() {
                std::fs::create_dir_all(dir)?;
            }
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&self.transcript)?
                .write_all(lines.as_bytes())
        };
        write().map_err(|e| format!("{}: {e}", self.transcript.display()))
    }
}

fn graph_value(value: &Value) -> Value {
    object(
        "graph_value",
        Map::from_iter([("value".to_owned(), value.clone())]),
    )
}

/// The hash `value` is stored under as a state value.
fn value_hash(value: &Value) -> ContentHash {
    ContentHash::of(&rye_cas::canonical::to_vec(&graph_value(value)))
}

/// The stored run `run_id`, read back and checked. Every object is
/// verified against its hash as it is read.
pub(crate) async fn load(
    cas: &Cas<LocalStorage>,
    state_dir: &Path,
    run_id: &str,
) -> Result<Stored, String> {
    let refs = LocalRefs::new(state_dir.join("objects"));
    let hash = refs
        .get(&ref_name(run_id))
        .map_err(|e| e.to_string())?
        .ok_or_else(|| format!("no graph run {run_id:?} in this project"))?;
    let object = |hash: ContentHash, what: String| async move {
        cas.get_object(&hash)
            .await
            .map_err(|e| format!("{what}: {e}"))?
            .ok_or_else(|| format!("{what} ({}) is missing from the store", hash.hex()))
    };
    let snapshot = object(hash, format!("run {run_id}'s snapshot")).await?;
    let text = |key: &str| snapshot.get(key).and_then(Value::as_str).map(str::to_owned);
    let parse_hash = |text: &str, what: &str| {
        text.parse::<ContentHash>()
            .map_err(|e| format!("run {run_id}: {what}: {e}"))
    };
    if snapshot.get("kind").and_then(Value::as_str) != Some("execution_snapshot") {
        return Err(format!("run {run_id}'s ref names no execution snapshot"));
    }
    let mut state = Vec::new();
    if let Some(Value::Object(keys)) = snapshot.get("state") {
        for (key, hash) in keys {
            let hash = parse_hash(hash.as_str().unwrap_or_default(), key)?;
            let stored = object(hash, format!("run {run_id}'s state key {key:?}")).await?;
            state.push((
                key.clone(),
                stored.get("value").cloned().unwrap_or(Value::Null),
            ));
        }
    }
    let mut results = BTreeMap::new();
    if let Some(Value::Array(done)) = snapshot.get("results") {
        for entry in done {
            let index = entry.get("index").and_then(Value::as_u64).unwrap_or(0) as usize;
            let hash = parse_hash(
                entry
                    .get("hash")
                    .and_then(Value::as_str)
                    .unwrap_or_default(),
                "a result",
            )?;
            let stored = object(hash, format!("run {run_id}'s result {index}")).await?;
            results.insert(index, stored.get("result").cloned().unwrap_or(Value::Null));
        }
    }

    Ok(Stored {
        header: RunHeader {
            run_id: run_id.to_owned(),
            graph_id: text("graph_id").unwrap_or_default(),
            graph_hash: text("graph_hash").unwrap_or_default(),
        },
        thread_id: text("thread_id"),
        status: text("status").unwrap_or_default(),
        state,
        cursor: snapshot.get("cursor").cloned().unwrap_or(Value::Null),
        results,
        error: text("error"),
    })
}
