//! What `rye threads` shows: a project's threads, and one thread with its
//! stored result and events.

use std::path::Path;

use rye_threads::Status;
use serde_json::Value;

/// A thread as `rye threads show` gives it: the record, the stored result
/// and the event log.
#[derive(Debug, serde::Serialize)]
pub struct ThreadView {
    #[serde(flatten)]
    pub thread: rye_threads::Thread,
    pub result: Option<Value>,
    pub events: Vec<rye_threads::Event>,
}

/// What `rye threads prune` removed.
#[derive(Debug, serde::Serialize)]
pub struct Pruned {
    /// Threads removed, with their events.
    pub threads: usize,
    /// Result objects removed with them.
    pub objects: usize,
}

impl crate::Rye {
    /// Removes the project's threads that finished more than `age` ago
    /// (never a running one), their events and their stored results.
    pub async fn prune_threads(
        &self,
        project: &Path,
        age: std::time::Duration,
    ) -> Result<Pruned, String> {
        self.threads.flush().await;
        let recorder = self.threads.recorder(project).await?;
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_err(|e| e.to_string())?;
        let cutoff = now.saturating_sub(age).as_millis() as i64;
        let released = recorder
            .registry
            .prune(cutoff)
            .await
            .map_err(|e| e.to_string())?;
        let mut objects = 0;
        let mut threads = 0;
        for hash in &released {
            threads += 1;
            // Each result object names its thread, so no other refers to it.
            let Some(Ok(hash)) = hash.as_deref().map(str::parse::<rye_cas::ContentHash>) else {
                continue;
            };
            recorder
                .cas
                .delete(rye_cas::Class::Object, &hash)
                .await
                .map_err(|e| e.to_string())?;
            objects += 1;
        }
        Ok(Pruned { threads, objects })
    }

    /// The project's threads, newest first.
    pub async fn threads(
        &self,
        project: &Path,
        status: Option<Status>,
        limit: u32,
    ) -> Result<Vec<rye_threads::Thread>, String> {
        self.threads.flush().await;
        let recorder = self.threads.recorder(project).await?;
        recorder
            .registry
            .list(status, limit)
            .await
            .map_err(|e| e.to_string())
    }

    /// One thread of the project, with its result and events.
    pub async fn thread(&self, project: &Path, id: &str) -> Result<ThreadView, String> {
        self.threads.flush().await;
        let recorder = self.threads.recorder(project).await?;
        let thread = recorder
            .registry
            .get(id)
            .await
            .map_err(|e| e.to_string())?
            .ok_or_else(|| format!("no thread {id} in {}", recorder.registry.path().display()))?;
        let result = match &thread.result_hash {
            Some(hash) => stored_result(&recorder, id, hash).await?,
            None => None,
        };
        let events = recorder
            .registry
            .events(id, 0)
            .await
            .map_err(|e| e.to_string())?;
        Ok(ThreadView {
            thread,
            result,
            events,
        })
    }

    /// The execution that goes on with the graph run thread `id` walked
    /// (or went on with): its graph with `resume` and the run's id, and
    /// `inputs` for a run that waits for them.
    pub async fn resume_request(
        &self,
        project: &Path,
        id: &str,
        inputs: Option<Value>,
    ) -> Result<crate::ExecuteRequest, String> {
        let view = self.thread(project, id).await?;
        let run = view
            .events
            .iter()
            .find(|e| e.kind == "graph_run")
            .and_then(|e| e.detail.get("graph_run_id"))
            .and_then(Value::as_str)
            .ok_or_else(|| {
                format!(
                    "thread {id} ({} {}) walked no graph: only a graph's run can be resumed",
                    view.thread.item_type, view.thread.item_id
                )
            })?;
        let mut parameters = serde_json::json!({"resume": true, "graph_run_id": run});
        if let Some(inputs) = inputs {
            parameters["inputs"] = inputs;
        }
        Ok(crate::ExecuteRequest {
            parameters,
            project: Some(project.to_owned()),
            ..crate::ExecuteRequest::new(rye_space::ItemKind::Tool, view.thread.item_id)
        })
    }
}

/// The `result` of thread `id`'s result object, whose hash is `hash`:
/// kept beside the thread in the registry, or else a file in the store;
/// its bytes checked against `hash` either way.
async fn stored_result(
    recorder: &crate::threads::Recorder,
    id: &str,
    hash: &str,
) -> Result<Option<Value>, String> {
    let hash: rye_cas::ContentHash = hash.parse().map_err(|e| format!("{e}"))?;
    let kept = recorder
        .registry
        .result(id)
        .await
        .map_err(|e| e.to_string())?;
    let object = match kept {
        Some(bytes) => {
            let actual = rye_cas::ContentHash::of(&bytes);
            if actual != hash {
                return Err(format!(
                    "thread {id}: the result kept in {} has hash {}, not the recorded {}",
                    recorder.registry.path().display(),
                    actual.hex(),
                    hash.hex()
                ));
            }
            Some(serde_json::from_slice::<Value>(&bytes).map_err(|e| {
                format!(
                    "thread {id}: the result kept in {} is not JSON: {e}",
                    recorder.registry.path().display()
                )
            })?)
        }
        None => recorder
            .cas
            .get_object(&hash)
            .await
            .map_err(|e| e.to_string())?,
    };
    Ok(object.and_then(|mut o| o.get_mut("result").map(Value::take)))
}
