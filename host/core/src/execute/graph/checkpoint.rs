//! A graph run kept in the project's state folder, so it goes on after a
//! crash from its last step.
//!
//! Each walker outcome is stored before the host acts on it, as an
//! `execution_snapshot`: the run's place, the walker's cursor, and every
//! state key's value, a value of up to 256 bytes in the snapshot itself
//! and a larger one as a `graph_value` object in the content-addressed
//! store (`.ai/state/objects/`), written only when a step changes it: a
//! value that does not change is stored once however many steps follow.
//! Each action's result is added to the snapshot as soon as the action
//! ends, so an action that finished before a crash is not run again on
//! resume.
//!
//! Snapshots are appended, each with its own hash, to the run's log
//! `.ai/state/graphs/<run>/checkpoints.jsonl`: one write per step, no file
//! made (making a file a step cost more than the rest of the step). The
//! last line whose hash holds is the run's checkpoint; a line torn by a
//! crash does not hold and is passed over. When the run ends, its last
//! snapshot is stored as an object too and the ref
//! `.ai/state/objects/refs/graphs/<run>.json` names it. Events go to
//! `transcript.jsonl` beside the log.
//!
//! Writes are not synced to disk at every step (that costs milliseconds):
//! a killed process loses nothing it wrote, while a power cut may lose
//! the steps the system had not yet written out.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use rye_cas::{Cas, ContentHash, LocalStorage, object};
use serde_json::{Map, Value, json};

use rye_components::{WalkNext, WalkOutcome};

/// State values up to this size (as canonical JSON) are kept in the
/// snapshot itself rather than as objects of their own.
const INLINE_BYTES: usize = 256;

/// The run a snapshot describes.
#[derive(Debug, Clone)]
pub(crate) struct RunHeader {
    pub run_id: String,
    pub graph_id: String,
    /// SHA-256 of the graph file the run started from, hex.
    pub graph_hash: String,
    /// When the run first started, epoch milliseconds.
    pub started_ms: u64,
}

pub(crate) struct Checkpoints {
    cas: Cas<LocalStorage>,
    /// The run's folder under `.ai/state/graphs/`.
    dir: PathBuf,
    /// Where the ref of an ended run goes.
    refs: PathBuf,
    log: Option<std::fs::File>,
    transcript: Option<std::fs::File>,
    header: RunHeader,
    thread_id: Option<String>,
    /// Each state key's value: `{"value": v}`, or the hash of its object.
    state: BTreeMap<String, Value>,
    cursor: Value,
    node: Option<String>,
    steps: u32,
    /// Results of the dispatch under way that have come in.
    results: Vec<(usize, Value)>,
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

/// Whether `run_id` may name a run's folder: one plain path segment.
pub(crate) fn valid_run_id(run_id: &str) -> bool {
    !run_id.is_empty()
        && run_id.len() <= 200
        && !run_id.starts_with('.')
        && run_id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

fn run_dir(state_dir: &Path, run_id: &str) -> PathBuf {
    state_dir.join("graphs").join(run_id)
}

impl Checkpoints {
    /// Checkpoints of a new run (or one going on, from `stored`) under
    /// the project's `state_dir`.
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
                    .map(|(k, v)| (k.clone(), kept(v).0))
                    .collect()
            })
            .unwrap_or_default();
        Self {
            cas,
            dir: run_dir(state_dir, &header.run_id),
            refs: state_dir.join("objects/refs/graphs"),
            log: None,
            transcript: None,
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
                    let (entry, object) = kept(value);
                    if let Some(object) = object {
                        self.cas
                            .put_object(&object)
                            .await
                            .map_err(|e| e.to_string())?;
                    }
                    self.state.insert(key.clone(), entry);
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
        let (status, error) = match &outcome.next {
            WalkNext::Finished(result) => (
                if result.get("success") == Some(&Value::Bool(true)) {
                    "completed"
                } else {
                    "error"
                },
                result
                    .get("error")
                    .and_then(Value::as_str)
                    .map(str::to_owned),
            ),
            WalkNext::Waiting(_) => ("waiting", None),
            _ => ("running", None),
        };
        self.append_events(&outcome.events)?;
        let snapshot = self.snapshot(status, error);
        self.append(&snapshot)?;
        if status != "running" && status != "waiting" {
            self.ended(snapshot).await?;
        }
        Ok(())
    }

    /// Adds the result of action `index` of the dispatch under way.
    pub(crate) async fn result(&mut self, index: usize, result: &Value) -> Result<(), String> {
        self.results.push((index, result.clone()));
        let snapshot = self.snapshot("running", None);
        self.append(&snapshot)
    }

    fn snapshot(&self, status: &str, error: Option<String>) -> Value {
        let mut fields = Map::new();
        fields.insert("graph_run_id".into(), json!(self.header.run_id));
        fields.insert("graph_id".into(), json!(self.header.graph_id));
        fields.insert("graph_hash".into(), json!(self.header.graph_hash));
        fields.insert("started_ms".into(), json!(self.header.started_ms));
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
                    .map(|(i, r)| json!({"index": i, "result": r}))
                    .collect(),
            ),
        );
        if let Some(error) = error {
            fields.insert("error".into(), json!(error));
        }
        object("execution_snapshot", fields)
    }

    /// Appends `snapshot` with its hash to the run's log.
    fn append(&mut self, snapshot: &Value) -> Result<(), String> {
        let text = rye_cas::canonical::to_string(snapshot);
        let hash = ContentHash::of(text.as_bytes());
        let line = format!("{{\"hash\":\"{}\",\"snapshot\":{text}}}\n", hash.hex());
        let path = self.dir.join("checkpoints.jsonl");
        if self.log.is_none() && !path.exists() {
            // The log comes into being holding a whole checkpoint: a run
            // killed while writing its first leaves no log (nothing to
            // resume), never one with nothing whole in it.
            let temp = self
                .dir
                .join(format!(".checkpoints.jsonl.tmp.{}", std::process::id()));
            let written = (|| {
                std::fs::create_dir_all(&self.dir)?;
                std::fs::write(&temp, line.as_bytes())?;
                std::fs::rename(&temp, &path)
            })();
            written.map_err(|e| format!("{}: {e}", path.display()))?;
            open_append(&mut self.log, &path)?;
            return Ok(());
        }
        let log = open_append(&mut self.log, &path)?;
        log.write_all(line.as_bytes())
            .map_err(|e| format!("{}: {e}", path.display()))
    }

    /// The ended run's last snapshot as an object, and its ref.
    async fn ended(&mut self, snapshot: Value) -> Result<(), String> {
        let hash = self
            .cas
            .put_object(&snapshot)
            .await
            .map_err(|e| e.to_string())?;
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

    fn append_events(&mut self, events: &[(String, Value)]) -> Result<(), String> {
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
        let path = self.dir.join("transcript.jsonl");
        let file = open_append(&mut self.transcript, &path)?;
        file.write_all(lines.as_bytes())
            .map_err(|e| format!("{}: {e}", path.display()))
    }
}

/// The file in `slot`, opened for appending (its folder made) the first
/// time.
fn open_append<'a>(
    slot: &'a mut Option<std::fs::File>,
    path: &Path,
) -> Result<&'a mut std::fs::File, String> {
    if slot.is_none() {
        let opened = (|| {
            if let Some(dir) = path.parent() {
                std::fs::create_dir_all(dir)?;
            }
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
        })()
        .map_err(|e| format!("{}: {e}", path.display()))?;
        *slot = Some(opened);
    }
    Ok(slot.as_mut().expect("opened above"))
}

fn graph_value(value: &Value) -> Value {
    object(
        "graph_value",
        Map::from_iter([("value".to_owned(), value.clone())]),
    )
}

/// How the snapshot names `value`: `{"value": v}` when it is small, else
/// the hash of its `graph_value` object (returned, to be stored).
fn kept(value: &Value) -> (Value, Option<Value>) {
    if rye_cas::canonical::to_vec(value).len() <= INLINE_BYTES {
        return (json!({"value": value}), None);
    }
    let object = graph_value(value);
    let hash = ContentHash::of(&rye_cas::canonical::to_vec(&object));
    (json!(hash.hex()), Some(object))
}

/// The last snapshot of the log whose hash holds.
fn last_snapshot(log: &str) -> Option<Value> {
    log.lines().rev().find_map(|line| {
        let entry: Value = serde_json::from_str(line).ok()?;
        let snapshot = entry.get("snapshot")?;
        let hash = entry.get("hash")?.as_str()?;
        let text = rye_cas::canonical::to_string(snapshot);
        (ContentHash::of(text.as_bytes()).hex() == hash).then(|| snapshot.clone())
    })
}

/// The stored run `run_id`, read back and checked: the log's last whole
/// snapshot, each object it names verified against its hash as it is
/// read.
pub(crate) async fn load(
    cas: &Cas<LocalStorage>,
    state_dir: &Path,
    run_id: &str,
) -> Result<Stored, String> {
    if !valid_run_id(run_id) {
        return Err(format!(
            "{:?} is not a graph run id (letters, digits, '.', '_' and '-')",
            run_id.chars().take(120).collect::<String>()
        ));
    }
    let path = run_dir(state_dir, run_id).join("checkpoints.jsonl");
    let log = match std::fs::read_to_string(&path) {
        Ok(log) => log,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(format!("no graph run {run_id:?} in this project"));
        }
        Err(e) => return Err(format!("{}: {e}", path.display())),
    };
    let snapshot = last_snapshot(&log)
        .ok_or_else(|| format!("{}: no whole checkpoint in it", path.display()))?;
    let text = |key: &str| snapshot.get(key).and_then(Value::as_str).map(str::to_owned);
    let mut state = Vec::new();
    if let Some(Value::Object(keys)) = snapshot.get("state") {
        for (key, entry) in keys {
            let value = match entry {
                Value::Object(inline) => inline.get("value").cloned().unwrap_or(Value::Null),
                other => {
                    let hash: ContentHash = other
                        .as_str()
                        .unwrap_or_default()
                        .parse()
                        .map_err(|e| format!("run {run_id}: state key {key:?}: {e}"))?;
                    let what = format!("run {run_id}'s state key {key:?}");
                    let stored = cas
                        .get_object(&hash)
                        .await
                        .map_err(|e| format!("{what}: {e}"))?
                        .ok_or_else(|| {
                            format!("{what} ({}) is missing from the store", hash.hex())
                        })?;
                    stored.get("value").cloned().unwrap_or(Value::Null)
                }
            };
            state.push((key.clone(), value));
        }
    }
    let results = snapshot
        .get("results")
        .and_then(Value::as_array)
        .map(|done| {
            done.iter()
                .filter_map(|entry| {
                    let index = entry.get("index")?.as_u64()? as usize;
                    Some((index, entry.get("result")?.clone()))
                })
                .collect()
        })
        .unwrap_or_default();
    Ok(Stored {
        header: RunHeader {
            run_id: run_id.to_owned(),
            graph_id: text("graph_id").unwrap_or_default(),
            graph_hash: text("graph_hash").unwrap_or_default(),
            started_ms: snapshot
                .get("started_ms")
                .and_then(Value::as_u64)
                .unwrap_or_default(),
        },
        thread_id: text("thread_id"),
        status: text("status").unwrap_or_default(),
        state,
        cursor: snapshot.get("cursor").cloned().unwrap_or(Value::Null),
        results,
        error: text("error"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_torn_or_altered_last_line_is_passed_over() {
        let line = |n: u64| {
            let snapshot = object(
                "execution_snapshot",
                Map::from_iter([("step".into(), json!(n))]),
            );
            let text = rye_cas::canonical::to_string(&snapshot);
            format!(
                "{{\"hash\":\"{}\",\"snapshot\":{text}}}",
                ContentHash::of(text.as_bytes()).hex()
            )
        };
        let whole = format!("{}\n{}\n", line(1), line(2));
        assert_eq!(last_snapshot(&whole).unwrap()["step"], 2);
        let torn = format!("{}\n{}", line(1), &line(2)[..40]);
        assert_eq!(last_snapshot(&torn).unwrap()["step"], 1);
        let altered = format!(
            "{}\n{}\n",
            line(1),
            line(2).replace("\"step\":2", "\"step\":9")
        );
        assert_eq!(last_snapshot(&altered).unwrap()["step"], 1);
        assert!(last_snapshot("").is_none());
    }

    #[test]
    fn run_ids_are_one_plain_segment() {
        assert!(valid_run_id("demo-count-1795548481-552cf9ea"));
        for bad in ["", "..", ".hidden", "a/b", "../x", "a b", &"x".repeat(201)] {
            assert!(!valid_run_id(bad), "{bad:?}");
        }
    }
}
