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

impl crate::Rye {
    /// The project's threads, newest first.
    pub async fn threads(
        &self,
        project: &Path,
        status: Option<Status>,
        limit: u32,
    ) -> Result<Vec<rye_threads::Thread>, String> {
        let recorder = self.threads.recorder(project).await?;
        recorder
            .registry
            .list(status, limit)
            .await
            .map_err(|e| e.to_string())
    }

    /// One thread of the project, with its result and events.
    pub async fn thread(&self, project: &Path, id: &str) -> Result<ThreadView, String> {
        let recorder = self.threads.recorder(project).await?;
        let thread = recorder
            .registry
            .get(id)
            .await
            .map_err(|e| e.to_string())?
            .ok_or_else(|| format!("no thread {id} in {}", recorder.registry.path().display()))?;
        let result = match &thread.result_hash {
            Some(hash) => {
                let hash: rye_cas::ContentHash = hash.parse().map_err(|e| format!("{e}"))?;
                let object = recorder
                    .cas
                    .get_object(&hash)
                    .await
                    .map_err(|e| e.to_string())?;
                object.and_then(|o| o.get("result").cloned())
            }
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
}
