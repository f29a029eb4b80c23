//! Directives as MCP prompts, knowledge as MCP resources
//! (`rye://knowledge/<id>`), listed from all spaces of the server's project,
//! with `list_changed` notifications when `.ai/` files come, go or change.

use std::path::PathBuf;
use std::time::Duration;

use rmcp::model::{
    GetPromptResult, Prompt, PromptArgument, PromptMessage, ReadResourceResult, Resource,
    ResourceContents, Role,
};
use rmcp::{ErrorData as McpError, Peer, RoleServer};
use rye_host::{ExecuteRequest, ItemKind, LoadRequest, Rye, SearchRequest};
use serde_json::{Map, Value};

/// The URI scheme of knowledge resources.
pub const KNOWLEDGE_URI: &str = "rye://knowledge/";

/// How often the catalog is compared with the last one sent.
const WATCH_EVERY: Duration = Duration::from_secs(2);

/// At most this many prompts or resources are listed.
const LISTED: usize = 1000;

fn listing(rye: &Rye, project: Option<&PathBuf>, kind: &str) -> Vec<(String, String, String)> {
    let request = SearchRequest {
        limit: LISTED,
        project: project.cloned(),
        ..SearchRequest::new(kind, "")
    };
    rye.search(&request)
        .map(|found| {
            found
                .results
                .into_iter()
                .filter(|hit| hit.shadowed_by.is_none())
                .map(|hit| (hit.id, hit.description, hit.path.display().to_string()))
                .collect()
        })
        .unwrap_or_default()
}

pub(crate) fn prompts(rye: &Rye, project: Option<&PathBuf>) -> Vec<Prompt> {
    listing(rye, project, "directive")
        .into_iter()
        .map(|(id, description, _)| {
            let arguments = rye
                .load(&LoadRequest {
                    project: project.cloned(),
                    ..LoadRequest::new(ItemKind::Directive, id.clone())
                })
                .ok()
                .and_then(|loaded| loaded.parsed.get("inputs").cloned())
                .and_then(|inputs| inputs.as_array().cloned())
                .map(|inputs| {
                    inputs
                        .iter()
                        .filter_map(|input| {
                            let name = input.get("name")?.as_str()?;
                            let mut argument = PromptArgument::new(name).with_required(
                                input.get("required").and_then(Value::as_bool) == Some(true),
                            );
                            if let Some(text) = input
                                .get("description")
                                .or_else(|| input.get("text"))
                                .and_then(Value::as_str)
                            {
                                argument = argument.with_description(text);
                            }
                            Some(argument)
                        })
                        .collect::<Vec<_>>()
                });
            Prompt::new(id, Some(description).filter(|d| !d.is_empty()), arguments)
        })
        .collect()
}

/// The directive `name`, its inputs filled from `arguments`, as a user
/// message to follow. Verified like an execution.
pub(crate) async fn prompt(
    rye: &std::sync::Arc<Rye>,
    project: Option<&PathBuf>,
    name: &str,
    arguments: Option<Map<String, Value>>,
) -> Result<GetPromptResult, McpError> {
    let request = ExecuteRequest {
        parameters: Value::Object(arguments.unwrap_or_default()),
        project: project.cloned(),
        ..ExecuteRequest::new(ItemKind::Directive, name)
    };
    let result = rye.execute(&request).await;
    if result["status"] != "success" {
        let error = result["error"].as_str().unwrap_or("the directive failed");
        return Err(McpError::invalid_params(
            format!("prompt {name:?}: {error}"),
            None,
        ));
    }
    let directions = result["your_directions"].as_str().unwrap_or_default();
    let mut prompt = GetPromptResult::new(vec![PromptMessage::new_text(Role::User, directions)]);
    if let Some(description) = result["data"]["description"].as_str() {
        prompt = prompt.with_description(description);
    }
    Ok(prompt)
}

pub(crate) fn resources(rye: &Rye, project: Option<&PathBuf>) -> Vec<Resource> {
    listing(rye, project, "knowledge")
        .into_iter()
        .map(|(id, description, _)| {
            let mut resource = Resource::new(format!("{KNOWLEDGE_URI}{id}"), id.clone())
                .with_mime_type("text/markdown");
            if !description.is_empty() {
                resource = resource.with_description(description);
            }
            resource
        })
        .collect()
}

/// The knowledge entry behind `uri`, verified, as its file's text.
pub(crate) async fn resource(
    rye: &std::sync::Arc<Rye>,
    project: Option<&PathBuf>,
    uri: &str,
) -> Result<ReadResourceResult, McpError> {
    let id = uri.strip_prefix(KNOWLEDGE_URI).ok_or_else(|| {
        McpError::invalid_params(
            format!("{uri:?} is not a {KNOWLEDGE_URI}<id> resource"),
            None,
        )
    })?;
    let request = ExecuteRequest {
        project: project.cloned(),
        ..ExecuteRequest::new(ItemKind::Knowledge, id)
    };
    let checked = rye.execute(&request).await;
    if checked["status"] != "success" {
        let error = checked["error"].as_str().unwrap_or("cannot be read");
        return Err(McpError::resource_not_found(
            format!("{uri}: {error}"),
            None,
        ));
    }
    let loaded = rye
        .load(&LoadRequest {
            project: project.cloned(),
            ..LoadRequest::new(ItemKind::Knowledge, id)
        })
        .map_err(|e| McpError::resource_not_found(format!("{uri}: {e}"), None))?;
    Ok(ReadResourceResult::new(vec![ResourceContents::text(
        loaded.content,
        uri,
    )]))
}

type Snapshot = (Vec<(String, String, String)>, Vec<(String, String, String)>);

async fn snapshot(rye: &std::sync::Arc<Rye>, project: &Option<PathBuf>) -> Option<Snapshot> {
    let (rye, project) = (rye.clone(), project.clone());
    tokio::task::spawn_blocking(move || {
        (
            listing(&rye, project.as_ref(), "directive"),
            listing(&rye, project.as_ref(), "knowledge"),
        )
    })
    .await
    .ok()
}

/// Tells `peer` when the prompts or resources change, until it goes away.
pub(crate) async fn watch(
    rye: std::sync::Arc<Rye>,
    project: Option<PathBuf>,
    peer: Peer<RoleServer>,
) {
    let Some(mut last) = snapshot(&rye, &project).await else {
        return;
    };
    loop {
        tokio::time::sleep(WATCH_EVERY).await;
        if peer.is_transport_closed() {
            return;
        }
        let Some(now) = snapshot(&rye, &project).await else {
            return;
        };
        if now.0 != last.0 && peer.notify_prompt_list_changed().await.is_err() {
            return;
        }
        if now.1 != last.1 && peer.notify_resource_list_changed().await.is_err() {
            return;
        }
        last = now;
    }
}
