//! The project's threads as resources: `rye://threads/<id>` reads as the
//! thread's record, stored result and events (JSON). A client that
//! subscribes to one is sent `notifications/resources/updated` each time
//! the thread changes — a new event, a new status — until it ends, so it
//! sees an async run finish without polling.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rmcp::ErrorData as McpError;
use rmcp::model::{
    ReadResourceResult, ResourceContents, ResourceTemplate, ResourceUpdatedNotificationParam,
};
use rmcp::service::{Peer, RoleServer};
use rye_host::{Rye, ThreadStatus};

/// The scheme and path of a thread resource.
pub const THREAD_URI: &str = "rye://threads/";

/// How often a subscribed thread is looked at.
const LOOK_EVERY: Duration = Duration::from_millis(100);

/// The template thread resources follow.
pub(crate) fn template() -> ResourceTemplate {
    ResourceTemplate::new(format!("{THREAD_URI}{{thread_id}}"), "thread")
        .with_title("A run of this project")
        .with_description(
            "A tool run (thread) of the served project: its record, its stored result once it \
             has ended, and its events. Subscribe to be told when it changes.",
        )
        .with_mime_type("application/json")
}

fn thread_id(uri: &str) -> Option<&str> {
    uri.strip_prefix(THREAD_URI)
        .filter(|id| !id.is_empty() && id.len() <= 64)
}

/// Whether `uri` names a thread resource.
pub(crate) fn is_thread(uri: &str) -> bool {
    uri.starts_with(THREAD_URI)
}

fn project(project: Option<&PathBuf>) -> Result<&PathBuf, McpError> {
    project.ok_or_else(|| {
        McpError::resource_not_found(
            "threads are resources of the served project, and this server serves none",
            None,
        )
    })
}

/// The thread `uri` names, as JSON.
pub(crate) async fn read(
    rye: &Arc<Rye>,
    served: Option<&PathBuf>,
    uri: &str,
) -> Result<ReadResourceResult, McpError> {
    let id = thread_id(uri).ok_or_else(|| {
        McpError::invalid_params(format!("{uri:?} is not a {THREAD_URI}<id> resource"), None)
    })?;
    let view = rye
        .thread(project(served)?, id)
        .await
        .map_err(|e| McpError::resource_not_found(format!("{uri}: {e}"), None))?;
    let text = serde_json::to_string_pretty(&view)
        .map_err(|e| McpError::internal_error(e.to_string(), None))?;
    Ok(ReadResourceResult::new(vec![
        ResourceContents::text(text, uri).with_mime_type("application/json"),
    ]))
}

/// The watches of one client's subscriptions, by URI.
#[derive(Clone, Default)]
pub(crate) struct Subscriptions {
    watching: Arc<Mutex<HashMap<String, tokio::task::AbortHandle>>>,
}

impl Subscriptions {
    /// Starts telling `peer` about changes of the thread `uri` names.
    pub(crate) async fn subscribe(
        &self,
        rye: Arc<Rye>,
        served: Option<&PathBuf>,
        uri: String,
        peer: Peer<RoleServer>,
    ) -> Result<(), McpError> {
        let id = thread_id(&uri)
            .ok_or_else(|| {
                McpError::invalid_params(
                    format!("{uri:?} is not a {THREAD_URI}<id> resource"),
                    None,
                )
            })?
            .to_owned();
        let project = project(served)?.clone();
        // An unknown thread is an error now, not silence later; a change
        // after this look is told.
        let seen = rye
            .thread(&project, &id)
            .await
            .map_err(|e| McpError::resource_not_found(format!("{uri}: {e}"), None))?;
        let seen = (seen.thread.status, seen.events.len());
        let watching = self.watching.clone();
        let key = uri.clone();
        let task = tokio::spawn(async move {
            watch(&rye, &project, &id, &uri, &peer, seen).await;
            watching.lock().expect("subscriptions lock").remove(&uri);
        });
        let previous = self
            .watching
            .lock()
            .expect("subscriptions lock")
            .insert(key, task.abort_handle());
        if let Some(previous) = previous {
            previous.abort();
        }
        Ok(())
    }

    pub(crate) fn unsubscribe(&self, uri: &str) {
        if let Some(task) = self
            .watching
            .lock()
            .expect("subscriptions lock")
            .remove(uri)
        {
            task.abort();
        }
    }
}

/// Tells `peer` each time thread `id` changes from `seen` (its status and
/// number of events), until it has ended (after saying so) or the peer is
/// gone.
async fn watch(
    rye: &Rye,
    project: &std::path::Path,
    id: &str,
    uri: &str,
    peer: &Peer<RoleServer>,
    seen: (ThreadStatus, usize),
) {
    let mut last = seen;
    loop {
        if last.0 != ThreadStatus::Running || peer.is_transport_closed() {
            return;
        }
        tokio::time::sleep(LOOK_EVERY).await;
        let Ok(view) = rye.thread(project, id).await else {
            return;
        };
        let now = (view.thread.status, view.events.len());
        if last != now {
            let sent = peer
                .notify_resource_updated(ResourceUpdatedNotificationParam::new(uri))
                .await;
            if sent.is_err() {
                return;
            }
        }
        last = now;
    }
}
