//! Async runs through the database's queue. An async execute is checked
//! as a run waited for is (item, parameters, secrets, a head to run on),
//! then queued with its thread, unless `max_concurrent` runs wait already
//! (503). Every replica claims queued jobs while it has a free slot, so
//! a replica never runs more than `max_concurrent` at once, a job runs on
//! whichever replica is free first, and on another one when its replica
//! dies before taking it. A job its replica died running is tried again only
//! when its caller said it may be (`retries`), since it may have done
//! part of its work; otherwise its thread is marked interrupted.

use std::sync::{Arc, Weak};
use std::time::Duration;

use axum::http::StatusCode;
use rye_cas::ContentHash;
use serde_json::{Value, json};

use super::{
    Job, Node, Reply, error, finish, item, now_secs, secrets_of, thread_row, under_new_id,
};
use crate::db::jobs::Claimed;

/// How often a replica looks for queued jobs when nothing told it of
/// one: another replica's queue, or a run ended there.
const POLL: Duration = Duration::from_millis(500);

/// The most times a caller may ask a run to be tried again.
const MAX_RETRIES: u64 = 5;

/// The `retries` `body` asks for: how many more times the run may start
/// if its replica dies under it.
pub(super) fn retries(body: &Value, run_async: bool) -> Result<u64, Reply> {
    let retries = match body.get("retries") {
        None | Some(Value::Null) => 0,
        Some(n) => n.as_u64().filter(|n| *n <= MAX_RETRIES).ok_or_else(|| {
            error(
                StatusCode::BAD_REQUEST,
                format!("retries is a whole number from 0 to {MAX_RETRIES}"),
            )
        })?,
    };
    if retries > 0 && !run_async {
        return Err(error(
            StatusCode::BAD_REQUEST,
            "retries is for async runs: a run waited for ends with its replica",
        ));
    }
    Ok(retries)
}

/// Queues the run `body` asks for on `base`; its thread id.
pub(super) async fn enqueue(
    node: &Node,
    principal: &str,
    body: &Value,
    item_id: &str,
    id: &str,
    base: &ContentHash,
    retries: u64,
) -> Result<String, Reply> {
    let project = body["project_path"].as_str().unwrap_or_default();
    let mut request = json!({"project_path": project, "item_id": item_id,
                             "parameters": body.get("parameters").cloned().unwrap_or(json!({})),
                             "base": base.hex()});
    // The secrets as asked: names, and an envelope only this node opens.
    for field in ["vault_keys", "secret_envelope"] {
        if let Some(value) = body.get(field).filter(|v| !v.is_null()) {
            request[field] = value.clone();
        }
    }
    let most = node.settings.max_concurrent as i64;
    let (thread_id, queued) = under_new_id(id, |thread_id| {
        let request = &request;
        async move {
            let row = thread_row(&thread_id, project, item_id, base, "queued");
            node.db
                .enqueue(principal, &row, request, retries as i64 + 1, most)
                .await
        }
    })
    .await?;
    if !queued {
        return Err(error(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("{most} runs wait for a free replica already; try again later"),
        ));
    }
    node.queue.notify_one();
    Ok(thread_id)
}

/// Claims queued jobs while this replica has free slots, and runs each;
/// ends with the node.
pub(super) async fn keep_claiming(node: Weak<Node>) {
    loop {
        let Some(strong) = node.upgrade() else {
            return;
        };
        let queue = Arc::clone(&strong.queue);
        let mut claimed = false;
        if let Some(slot) = strong.try_slot() {
            match strong.db.claim(&strong.replica, strong.lease_until()).await {
                Ok(Some(job)) => {
                    claimed = true;
                    let node = Arc::clone(&strong);
                    tokio::spawn(async move {
                        let _slot = slot;
                        run_claimed(&node, job).await;
                    });
                }
                Ok(None) => slot.unused(),
                Err(e) => {
                    slot.unused();
                    tracing::error!("claiming a queued run: {e}");
                }
            }
        }
        drop(strong);
        if !claimed {
            tokio::select! {
                () = queue.notified() => {}
                () = tokio::time::sleep(POLL) => {}
            }
        }
    }
}

/// Runs a claimed job to its end; one that cannot start (its request
/// unreadable, a secret gone from the vault since) ends as an error.
async fn run_claimed(node: &Arc<Node>, claimed: Claimed) {
    match job_of(node, &claimed).await {
        Ok(job) => {
            finish(node, job).await;
        }
        Err(message) => {
            tracing::warn!("{} could not start: {message}", claimed.thread_id);
            node.metrics.run_ended("error");
            let record = json!({"status": "error", "error": message,
                                "thread_id": claimed.thread_id, "phase": "start",
                                "item_id": claimed.request.get("item_id"),
                                "snapshot_hash": claimed.request.get("base"),
                                "attempts": claimed.attempts});
            if let Err(e) = node
                .db
                .finish_thread(&claimed.thread_id, "error", &record, now_secs() as i64)
                .await
            {
                tracing::error!("recording how {} ended: {e}", claimed.thread_id);
            }
        }
    }
}

/// The run a claimed job's request describes, its secrets opened now.
async fn job_of(node: &Node, claimed: &Claimed) -> Result<Job, String> {
    let request = &claimed.request;
    let text = |field: &str| {
        request
            .get(field)
            .and_then(Value::as_str)
            .ok_or_else(|| format!("the queued request has no {field}"))
    };
    let item_id = text("item_id")?.to_owned();
    let (kind, id) = item(&item_id)?;
    let base: ContentHash = text("base")?
        .parse()
        .map_err(|_| "the queued request's base is not a hash".to_owned())?;
    let (secrets, skipped) = secrets_of(node, &claimed.principal, request)
        .await
        .map_err(
            |(_, body)| match body.0.get("error").and_then(Value::as_str) {
                Some(message) => message.to_owned(),
                None => body.0.to_string(),
            },
        )?;
    Ok(Job {
        principal: claimed.principal.clone(),
        project: text("project_path")?.to_owned(),
        kind: kind.to_owned(),
        id: id.to_owned(),
        parameters: request.get("parameters").cloned().unwrap_or(json!({})),
        item_id,
        base,
        thread_id: claimed.thread_id.clone(),
        secrets,
        skipped,
        attempts: Some(claimed.attempts),
    })
}
