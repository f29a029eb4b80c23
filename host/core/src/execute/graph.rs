//! Graph tools: a chain that ends in the state-graph primitive is walked,
//! not planned. A walker component (`walker:` in the chain, else
//! `rye/state-graph`, found through the spaces like any component)
//! decides each step; the host takes every action it asks for through the
//! same door as any call, under the graph's `permissions`.
//!
//! A graph's action needs the capability `rye.<primary>.<kind>.<id with
//! / as .>`, matched as a shell pattern (`*`, `?`, `[…]`) against the
//! graph's permissions, and against the grant of every graph it runs
//! under and any `capabilities` its caller sent: a graph never has more
//! than whoever runs it. No permissions, no actions.

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use rye_components::{WalkAction, WalkClock, WalkNext, WalkOutcome, WalkRequest, World};
use rye_space::{ItemKind, Space};
use serde_json::{Map, Value, json};

use super::{ExecuteRequest, Ran, Stage, ToolRun, blocking};
use crate::chain::Chain;
use crate::reply::SignReply;
use crate::trace::Step;
use crate::{ErrorReply, LoadRequest, Rye, SearchRequest, Signable};

/// The walker a chain uses unless one of its elements names another.
pub(crate) const DEFAULT_WALKER: &str = "rye/state-graph";

mod cache;
mod checkpoint;
mod policy;

/// Parameters the host reads and the walker is not shown.
const HOST_PARAMETERS: [&str; 4] = ["validate", "capabilities", "resume", "graph_run_id"];

type Acting = Pin<Box<dyn Future<Output = Value> + Send>>;

impl ToolRun<'_> {
    /// Walks the graph tool at the head of `chain` to its end.
    pub(super) async fn walk(&mut self, chain: &Chain) -> Stage<Ran> {
        let mut journal = None;
        let ran = self.walk_journaled(chain, &mut journal).await;
        // The run's events are all in its thread's log before it ends.
        if let Some(journal) = journal {
            journal.close().await;
        }
        ran
    }

    async fn walk_journaled(&mut self, chain: &Chain, journal: &mut Option<Journal>) -> Stage<Ran> {
        let started = Instant::now();
        let tool = chain.tool();
        let name = chain
            .elements
            .iter()
            .find_map(|e| e.metadata.get("walker").and_then(Value::as_str))
            .unwrap_or(DEFAULT_WALKER)
            .to_owned();
        let (spaces, trust) = (&self.session.spaces, self.session.trust(self.rye));
        let found = match self
            .rye
            .find_component(spaces, &trust, &name, World::GraphWalker)
        {
            Ok(Ok(found)) => found,
            Ok(Err(searched)) => {
                return Err(self.fail(ErrorReply::new(format!(
                    "graph walker {name:?} not found (searched {})",
                    rye_space::display_paths(&searched)
                ))));
            }
            Err(e) => return Err(self.host_failure(&e)),
        };
        self.warnings.extend(
            found
                .signed
                .warning(&format!("walker {}", found.component.path.display())),
        );
        self.step(Step::Walker {
            path: found.component.path.clone(),
        });
        let mut walker = self
            .rye
            .components
            .walker(&found.component)
            .map_err(|e| self.fail(ErrorReply::new(e)))?;

        let mut parameters = match &self.request.parameters {
            Value::Object(map) => map.clone(),
            _ => Map::new(),
        };
        let truthy = |v: &Value| !matches!(v, Value::Null | Value::Bool(false));
        let validate = parameters.get("validate").is_some_and(truthy);
        let resume = parameters.get("resume").is_some_and(truthy);
        let resumed_id = parameters
            .get("graph_run_id")
            .and_then(Value::as_str)
            .map(str::to_owned);
        // What a caller sends a waiting run; on a new run, `inputs` is
        // the graph's own parameter like any other.
        let sent = if resume {
            parameters.remove("inputs").unwrap_or(Value::Null)
        } else {
            Value::Null
        };
        let single_step = parameters.get("node").is_some_and(Value::is_string);
        let mut grants = self.request.grants.clone();
        if let Some(asked) = parameters.get("capabilities") {
            grants.push(strings(asked).into());
        }
        for key in HOST_PARAMETERS {
            parameters.remove(key);
        }
        let permissions: Arc<[String]> =
            strings(tool.metadata.get("permissions").unwrap_or(&Value::Null)).into();
        grants.push(permissions);
        let policies = policy::node_policies(&tool.metadata);
        let run_deadline = policy::deadline(&tool.metadata);
        let (policies, run_deadline) = match (policies, run_deadline) {
            (Ok(policies), Ok(deadline)) => (policies, deadline),
            (Err(e), _) | (_, Err(e)) => {
                return Err(self.fail(ErrorReply::new(format!("the graph cannot run: {e}"))));
            }
        };

        let mut request = WalkRequest {
            graph_id: tool.item_id.clone(),
            graph: Value::Object((*tool.metadata).clone()),
            defaults: runtime_defaults(chain),
            parameters: Value::Object(parameters),
            run_id: run_id(&tool.item_id, single_step),
            env_names: std::env::vars_os()
                .filter_map(|(k, _)| k.into_string().ok())
                .collect(),
        };
        if validate {
            let report =
                blocking(|| walker.analyze(&request)).map_err(|e| self.fail(ErrorReply::new(e)))?;
            let error = (report["success"] != true).then(|| {
                format!(
                    "the graph has errors: {}",
                    report["errors"]
                        .as_array()
                        .map(|e| e
                            .iter()
                            .filter_map(Value::as_str)
                            .collect::<Vec<_>>()
                            .join("; "))
                        .unwrap_or_default()
                )
            });
            return Ok(graph_ran(report, error, started));
        }

        let now_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        // The run is kept where its thread is: in the project's store.
        let state_dir = crate::threads::state_dir(&self.request.project_dir());
        let recorder = if self.rye.threads.enabled() {
            match self.rye.threads.recorder(&self.request.project_dir()).await {
                Ok(recorder) => Some(recorder),
                Err(e) => {
                    self.warnings
                        .push(format!("this run is not kept and cannot be resumed: {e}"));
                    None
                }
            }
        } else {
            None
        };
        let graph_hash = hex::encode(tool.content_hash);
        let stored = match (resume, &recorder) {
            (false, _) => None,
            (true, None) => {
                return Err(self.fail(ErrorReply::new(
                    "resume needs the run's records, and recording is off (RYE_THREADS=0)",
                )));
            }
            (true, Some(recorder)) => {
                let Some(run_id) = resumed_id else {
                    return Err(self.fail(ErrorReply::new(
                        "resume needs graph_run_id: the run to go on with",
                    )));
                };
                let stored = checkpoint::load(&recorder.cas, &state_dir, &run_id)
                    .await
                    .map_err(|e| self.fail(ErrorReply::new(e)))?;
                self.resumable(recorder, &stored, &tool.item_id, &graph_hash)
                    .await?;
                request.run_id = stored.header.run_id.clone();
                Some(stored)
            }
        };
        // The run's deadline counts from when its execution began (for a
        // resumed run, from when it first did).
        let began_ms = now_ms.saturating_sub(self.started.elapsed().as_millis() as u64);
        let started_ms = stored
            .as_ref()
            .map_or(began_ms, |s| s.header.started_ms.min(now_ms));
        let mut checkpoints = recorder.as_ref().map(|recorder| {
            checkpoint::Checkpoints::new(
                recorder.cas.clone(),
                &state_dir,
                checkpoint::RunHeader {
                    run_id: request.run_id.clone(),
                    graph_id: tool.item_id.clone(),
                    graph_hash: graph_hash.clone(),
                    started_ms,
                },
                self.thread_id.clone(),
                stored.as_ref(),
            )
        });
        // Results of the dispatch a crash interrupted, which stand in for
        // running those actions again.
        let mut known = BTreeMap::new();

        let walked = Instant::now();
        let mut outcome = match &stored {
            None => self.decided(blocking(|| walker.start(&request, &clock())))?,
            Some(stored) => {
                known = stored.results.clone();
                self.decided(blocking(|| {
                    walker.resume(&request, &stored.state, &stored.cursor, &sent, &clock())
                }))?
            }
        };
        let mut walker_us = walked.elapsed().as_micros() as u64;
        // The run's transcript also goes to its thread's event log, for
        // `rye threads tail`; the first event names the run.
        *journal = recorder
            .clone()
            .zip(self.thread_id.clone())
            .map(|(recorder, thread)| Journal::open(recorder, thread));
        let journal = journal.as_ref();
        if let Some(journal) = journal {
            let named = json!({"graph_run_id": request.run_id, "graph_id": tool.item_id,
                               "resumed": stored.is_some()});
            journal.log(vec![("graph_run".to_owned(), named)]);
        }
        let cache = recorder.as_ref().map(|recorder| {
            cache::NodeCache::new(
                recorder.cas.clone(),
                &state_dir,
                tool.metadata.get("config").unwrap_or(&Value::Null),
                &request.defaults,
            )
        });
        let door = Arc::new(Door {
            rye: self.rye.clone(),
            grants,
            policies,
            project: self.request.project.clone(),
            parent: self.thread_id.clone(),
            cache,
        });
        let deadline_passed = |outcome: &WalkOutcome, limit: std::time::Duration| {
            let error = format!("the run's deadline of {} s passed", limit.as_secs_f64());
            let data = json!({
                "success": false, "status": "error", "error": error,
                "node": outcome.node, "steps": outcome.steps, "graph_run_id": request.run_id,
            });
            graph_ran(data, Some(error), started)
        };
        loop {
            let remaining = run_deadline.map(|limit| {
                let end = started_ms.saturating_add(limit.as_millis() as u64);
                let now = SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .map_or(0, |d| d.as_millis() as u64);
                (
                    limit,
                    std::time::Duration::from_millis(end.saturating_sub(now)),
                )
            });
            if let Some((limit, left)) = remaining
                && left.is_zero()
                && !matches!(outcome.next, WalkNext::Finished(_) | WalkNext::Waiting(_))
            {
                return Ok(deadline_passed(&outcome, limit));
            }
            if let Some(checkpoints) = &mut checkpoints
                && let Err(e) = checkpoints.outcome(&outcome).await
            {
                return Err(self.fail(ErrorReply::new(format!(
                    "graph run {}: the checkpoint could not be stored, so the run stopped: {e}",
                    request.run_id
                ))));
            }
            if let Some(journal) = journal
                && !outcome.events.is_empty()
            {
                journal.log(outcome.events.clone());
            }
            let acting = Instant::now();
            let (results, next, actions) = match &outcome.next {
                WalkNext::Finished(result) => {
                    let result = result.clone();
                    self.graph_step(&outcome, "finished", Vec::new(), walker_us, 0);
                    let error = (result.get("success") != Some(&Value::Bool(true))).then(|| {
                        result
                            .get("error")
                            .and_then(Value::as_str)
                            .unwrap_or("the graph failed")
                            .to_owned()
                    });
                    return Ok(graph_ran(result, error, started));
                }
                // The run is kept as it is until a caller sends inputs.
                WalkNext::Waiting(told) => {
                    let told = told.clone();
                    self.graph_step(&outcome, "waiting", Vec::new(), walker_us, 0);
                    if checkpoints.is_none() {
                        self.warnings.push(
                            "the run waits for inputs, but recording is off (RYE_THREADS=0), so it cannot be resumed".into(),
                        );
                    }
                    return Ok(graph_ran(told, None, started));
                }
                WalkNext::Proceed => (Vec::new(), "proceed", Vec::new()),
                WalkNext::Dispatch {
                    actions,
                    concurrency,
                    stop_after_failures,
                } => {
                    let names = actions.iter().map(|a| a.item_id.clone()).collect();
                    let dispatching = dispatch(
                        &door,
                        actions.clone(),
                        (*concurrency, *stop_after_failures),
                        std::mem::take(&mut known),
                        checkpoints.as_mut(),
                    );
                    let dispatched = match remaining {
                        // Past the deadline the actions under way stop.
                        Some((limit, left)) => {
                            match tokio::time::timeout(left, dispatching).await {
                                Ok(dispatched) => dispatched,
                                Err(_) => return Ok(deadline_passed(&outcome, limit)),
                            }
                        }
                        None => dispatching.await,
                    };
                    let results = dispatched.map_err(|e| {
                        self.fail(ErrorReply::new(format!(
                            "graph run {}: a result could not be stored, so the run stopped: {e}",
                            request.run_id
                        )))
                    })?;
                    (results, "dispatch", names)
                }
            };
            let actions_us = acting.elapsed().as_micros() as u64;
            self.graph_step(&outcome, next, actions, walker_us, actions_us);
            let walked = Instant::now();
            outcome = self.decided(blocking(|| walker.advance(&results, &clock())))?;
            walker_us = walked.elapsed().as_micros() as u64;
        }
    }

    /// Whether the stored run may go on here: of this graph, unchanged
    /// since it started, not ended, and not running somewhere else.
    async fn resumable(
        &mut self,
        recorder: &crate::threads::Recorder,
        stored: &checkpoint::Stored,
        graph_id: &str,
        graph_hash: &str,
    ) -> Stage<()> {
        let run = &stored.header.run_id;
        if stored.header.graph_id != graph_id {
            return Err(self.fail(ErrorReply::new(format!(
                "graph run {run} is a run of {}, not of {graph_id}",
                stored.header.graph_id
            ))));
        }
        if stored.header.graph_hash != graph_hash {
            return Err(self.fail(ErrorReply::new(format!(
                "graph {graph_id} has changed since run {run} started (it started from {}, the file is now {graph_hash}); a run goes on only with the graph it started with",
                stored.header.graph_hash
            ))));
        }
        if stored.status != "running" && stored.status != "waiting" {
            return Err(self.fail(ErrorReply::new(format!(
                "graph run {run} has already ended ({}{})",
                stored.status,
                stored
                    .error
                    .as_ref()
                    .map_or_else(String::new, |e| format!(": {e}"))
            ))));
        }
        if let Some(thread) = &stored.thread_id {
            // A runner that died is marked so first.
            let _ = recorder.registry.recover().await;
            if let Ok(Some(previous)) = recorder.registry.get(thread).await
                && previous.status == rye_threads::Status::Running
            {
                return Err(self.fail(ErrorReply::new(format!(
                    "graph run {run} is still running (thread {thread}); cancel it or wait for it to end before resuming"
                ))));
            }
        }
        Ok(())
    }

    /// The outcome of a walker call, or the error result of a walker that
    /// failed or refused the run.
    fn decided(
        &mut self,
        answer: Result<Result<WalkOutcome, String>, rye_components::ComponentError>,
    ) -> Stage<WalkOutcome> {
        match answer {
            Ok(Ok(outcome)) => Ok(outcome),
            Ok(Err(refused)) => {
                Err(self.fail(ErrorReply::new(format!("the graph cannot run: {refused}"))))
            }
            Err(e) => Err(self.fail(ErrorReply::new(e))),
        }
    }

    fn graph_step(
        &mut self,
        outcome: &WalkOutcome,
        next: &'static str,
        actions: Vec<String>,
        walker_us: u64,
        actions_us: u64,
    ) {
        if self.request.trace {
            self.step(Step::GraphStep {
                node: outcome.node.clone(),
                steps: outcome.steps,
                next,
                actions,
                walker_us,
                actions_us,
            });
        }
    }
}

/// How long a run's journal gathers events before it writes them.
const GATHER: std::time::Duration = std::time::Duration::from_millis(20);

/// A run's events on their way to its thread's log, written by a task
/// of their own so that a step never waits for the database (a step
/// that did cost 150 µs more). What comes within [`GATHER`] of the first
/// event goes in one transaction, so a busy run writes a few times a
/// second rather than once a step, leaving the database to its actions'
/// own records. A log that cannot take them is warned of, not a reason to
/// stop: the checkpoints keep the run.
struct Journal {
    send: tokio::sync::mpsc::UnboundedSender<Vec<(String, Value)>>,
    task: tokio::task::JoinHandle<()>,
}

impl Journal {
    fn open(recorder: Arc<crate::threads::Recorder>, thread: String) -> Self {
        let (send, mut receive) = tokio::sync::mpsc::unbounded_channel::<Vec<(String, Value)>>();
        let task = tokio::spawn(async move {
            while let Some(mut events) = receive.recv().await {
                let gathering = tokio::time::sleep(GATHER);
                tokio::pin!(gathering);
                loop {
                    tokio::select! {
                        more = receive.recv() => match more {
                            Some(more) => events.extend(more),
                            // The run has ended: written at once.
                            None => break,
                        },
                        () = &mut gathering => break,
                    }
                }
                if let Err(e) = recorder.registry.events_at_once(&thread, events).await {
                    tracing::warn!("thread {thread}: the graph's events were not logged: {e}");
                }
            }
        });
        Self { send, task }
    }

    fn log(&self, events: Vec<(String, Value)>) {
        let _ = self.send.send(events);
    }

    /// Waits until every event logged is written.
    async fn close(self) {
        drop(self.send);
        let _ = self.task.await;
    }
}

/// The run's result as the execution's: the walker's result is the data.
fn graph_ran(result: Value, error: Option<String>, started: Instant) -> Ran {
    Ran {
        data: result,
        error,
        duration: started.elapsed(),
        return_code: None,
        status_code: None,
        truncated: None,
    }
}

/// The `config` maps of the chain's runtimes merged, the one nearest the
/// tool winning each key.
fn runtime_defaults(chain: &Chain) -> Value {
    let mut merged = Map::new();
    for element in chain.elements.iter().skip(1).rev() {
        if let Some(Value::Object(config)) = element.metadata.get("config") {
            for (key, value) in config {
                merged.insert(key.clone(), value.clone());
            }
        }
    }
    Value::Object(merged)
}

/// The strings of a JSON list (anything else: none).
fn strings(value: &Value) -> Vec<String> {
    value
        .as_array()
        .map(|items| {
            items
                .iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

/// A run's id: the graph's id with `/` as `-`, the second it started, a
/// random part so two runs in one second differ, and `-step` for a
/// single-step run.
fn run_id(graph_id: &str, single_step: bool) -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let random = rye_threads::new_thread_id();
    let step = if single_step { "-step" } else { "" };
    format!(
        "{}-{secs}-{}{step}",
        graph_id.replace('/', "-"),
        &random[random.len() - 8..]
    )
}

/// Now, as walkers are told it.
fn clock() -> WalkClock {
    let now = SystemTime::now();
    let since = now.duration_since(UNIX_EPOCH).unwrap_or_default();
    let seconds = rye_integrity::utc_timestamp(now);
    WalkClock {
        epoch_ms: since.as_millis() as u64,
        iso: format!(
            "{}.{:06}+00:00",
            seconds.trim_end_matches('Z'),
            since.subsec_micros()
        ),
    }
}

/// The capability an action needs.
pub(crate) fn capability(action: &WalkAction) -> String {
    format!(
        "rye.{}.{}.{}",
        action.primary,
        action.kind,
        action.item_id.replace('/', ".")
    )
}

/// Whether every grant has a pattern matching `capability`.
pub(crate) fn allowed(grants: &[Arc<[String]>], capability: &str) -> bool {
    grants.iter().all(|grant| {
        grant
            .iter()
            .any(|pattern| rye_space::shell_match(pattern, capability))
    })
}

/// Takes `actions`, at most `concurrency` at a time, and gives their
/// results in their order; each is stored in `checkpoints` as it comes
/// in. Once more than `stop_after` have failed, no more are started (each
/// not started gets an error result). An action with a `known` result
/// (from before a crash) is not taken again. Dropping the future stops
/// every action still running (a tool's processes with it).
async fn dispatch(
    door: &Arc<Door>,
    actions: Vec<WalkAction>,
    (concurrency, stop_after): (usize, Option<usize>),
    mut known: BTreeMap<usize, Value>,
    mut checkpoints: Option<&mut checkpoint::Checkpoints>,
) -> Result<Vec<Value>, String> {
    let count = actions.len();
    let mut results = vec![Value::Null; count];
    let permits = Arc::new(tokio::sync::Semaphore::new(concurrency.max(1)));
    let failures = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let too_many = move |failures: &std::sync::atomic::AtomicUsize| {
        stop_after.is_some_and(|most| failures.load(std::sync::atomic::Ordering::SeqCst) > most)
    };
    let mut running = tokio::task::JoinSet::new();
    for (index, action) in actions.into_iter().enumerate() {
        if let Some(result) = known.remove(&index) {
            if let Some(checkpoints) = checkpoints.as_deref_mut() {
                checkpoints.result(index, &result).await?;
            }
            if failed(&result) {
                failures.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            }
            results[index] = result;
            continue;
        }
        let acting = act(door.clone(), action);
        let (permits, failures) = (permits.clone(), failures.clone());
        running.spawn(async move {
            let _permit = permits.acquire_owned().await;
            if too_many(&failures) {
                let skipped = ErrorReply::new(format!(
                    "not run: more actions of this dispatch failed than the {} it tolerates",
                    stop_after.unwrap_or_default()
                ))
                .to_value();
                return (index, skipped);
            }
            let result = acting.await;
            if failed(&result) {
                failures.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            }
            (index, result)
        });
    }
    while let Some(done) = running.join_next().await {
        match done {
            Ok((index, result)) => {
                if let Some(checkpoints) = checkpoints.as_deref_mut() {
                    checkpoints.result(index, &result).await?;
                }
                results[index] = result;
            }
            Err(e) => {
                tracing::warn!("a graph action's task failed: {e}");
            }
        }
    }
    for result in &mut results {
        if result.is_null() {
            *result = ErrorReply::new("the action did not finish").to_value();
        }
    }
    Ok(results)
}

/// What every action of one run goes through.
struct Door {
    rye: Arc<Rye>,
    /// The graph's permissions, and those of every graph it runs under.
    grants: Vec<Arc<[String]>>,
    project: Option<PathBuf>,
    /// The run's thread, each action's parent.
    parent: Option<String>,
    /// Nodes' timeouts and retries.
    policies: HashMap<String, policy::NodePolicy>,
    /// Where `cache_result` nodes' results are kept (none when runs are
    /// not recorded).
    cache: Option<cache::NodeCache>,
}

/// One action: its permission checked, then taken under its node's
/// timeout, and again as its retry policy says. Its result document.
fn act(door: Arc<Door>, action: WalkAction) -> Acting {
    Box::pin(async move {
        let needed = capability(&action);
        if !allowed(&door.grants, &needed) {
            return ErrorReply::new(format!(
                "permission denied: node {:?} needs {needed}, which the graph's permissions do not grant",
                action.node
            ))
            .to_value();
        }
        let cached = match &door.cache {
            Some(cache) if action.cacheable && action.primary == "execute" => {
                match cached(&door, cache, &action).await {
                    Ok(Cached::Hit(result)) => return result,
                    Ok(Cached::Miss(key)) => Some((cache, key)),
                    Err(refused) => return refused,
                }
            }
            _ => None,
        };
        let rules = door.policies.get(&action.node).cloned().unwrap_or_default();
        let mut attempt = 1;
        let result = loop {
            let once = perform(door.clone(), action.clone());
            let (result, failure) = match rules.timeout {
                Some(limit) => match tokio::time::timeout(limit, once).await {
                    Ok(result) => {
                        let failure = failed(&result).then_some(policy::Failure::Error);
                        (result, failure)
                    }
                    Err(_) => (
                        ErrorReply::new(format!(
                            "node {:?} timed out after {} s; its action was stopped",
                            action.node,
                            limit.as_secs_f64()
                        ))
                        .to_value(),
                        Some(policy::Failure::Timeout),
                    ),
                },
                None => {
                    let result = once.await;
                    let failure = failed(&result).then_some(policy::Failure::Error);
                    (result, failure)
                }
            };
            match (&rules.retry, failure) {
                (Some(retry), Some(failure))
                    if attempt < retry.max_attempts && retry.retries(failure) =>
                {
                    tokio::time::sleep(retry.delay(attempt)).await;
                    attempt += 1;
                }
                _ => break result,
            }
        };
        if let Some((cache, key)) = cached
            && !failed(&result)
            && let Err(e) = cache.put(&key, &action.node, &result).await
        {
            tracing::warn!("node {:?}: its result was not cached: {e}", action.node);
        }
        result
    })
}

/// What the node cache has for an action.
enum Cached {
    /// The result of an earlier run, marked `cache_hit`.
    Hit(Value),
    /// Nothing yet: the key the result goes under.
    Miss(String),
}

/// Looks `action` up in `cache`, its chain checked first (as the run
/// would check it, without running): an item that no longer verifies
/// gives the check's error, and one that changed has another key.
async fn cached(
    door: &Door,
    cache: &cache::NodeCache,
    action: &WalkAction,
) -> Result<Cached, Value> {
    let kind = kind_of(action)?;
    let check = ExecuteRequest {
        parameters: action.params.clone(),
        project: door.project.clone(),
        dry_run: true,
        grants: door.grants.clone(),
        ..ExecuteRequest::new(kind, action.item_id.clone())
    };
    let checked = door.rye.execute(&check).await;
    if checked.get("status").and_then(Value::as_str) == Some("error") {
        return Err(checked);
    }
    let chain: Vec<String> = checked
        .get("chain")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|element| {
            element
                .get("integrity")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned()
        })
        .collect();
    let key = cache.key(action, &chain);
    Ok(match cache.get(&key).await {
        Some(mut result) => {
            if let Some(Value::Object(metadata)) = result.get_mut("metadata") {
                metadata.insert("cache_hit".into(), Value::Bool(true));
            }
            Cached::Hit(result)
        }
        None => Cached::Miss(key),
    })
}

/// Whether an action's result is a failure.
fn failed(result: &Value) -> bool {
    result.get("status").and_then(Value::as_str) == Some("error")
        || result.get("success") == Some(&Value::Bool(false))
        || result.get("data").and_then(|d| d.get("success")) == Some(&Value::Bool(false))
}

/// The kind of item an action names, or the error result saying it names
/// none.
fn kind_of(action: &WalkAction) -> Result<ItemKind, Value> {
    action.kind.parse().map_err(|_| {
        ErrorReply::new(format!(
            "node {:?} asks for kind {:?}: directive, tool or knowledge",
            action.node, action.kind
        ))
        .to_value()
    })
}

/// One attempt of an allowed action.
fn perform(door: Arc<Door>, action: WalkAction) -> Acting {
    Box::pin(async move {
        let (rye, project) = (door.rye.clone(), door.project.clone());
        let kind = match kind_of(&action) {
            Ok(kind) => kind,
            Err(refused) => return refused,
        };
        match action.primary.as_str() {
            "execute" => {
                let request = ExecuteRequest {
                    parameters: action.params,
                    project,
                    parent_thread: door.parent.clone(),
                    grants: door.grants.clone(),
                    ..ExecuteRequest::new(kind, action.item_id)
                };
                rye.execute(&request).await
            }
            "load" | "fetch" => {
                let request = LoadRequest {
                    project,
                    ..LoadRequest::new(kind, action.item_id.clone())
                };
                on_blocking(rye, move |rye| match rye.load(&request) {
                    Ok(loaded) => loaded.reply(crate::LOAD_REPLY_TEXT),
                    Err(e) => ErrorReply::host(&e)
                        .of_item(kind, &action.item_id)
                        .to_value(),
                })
                .await
            }
            "search" => {
                let query = action.params.get("query").and_then(Value::as_str);
                let mut request = SearchRequest::new(kind.to_string(), query.unwrap_or_default());
                request.project = project;
                if let Some(limit) = action.params.get("limit").and_then(Value::as_u64) {
                    request.limit = limit as usize;
                }
                on_blocking(rye, move |rye| match rye.search(&request) {
                    Ok(response) => serde_json::to_value(response).unwrap_or_default(),
                    Err(e) => ErrorReply::host(&e).of_query(&request.query).to_value(),
                })
                .await
            }
            "sign" => {
                let id = action.item_id.clone();
                on_blocking(rye, move |rye| {
                    match rye.sign(
                        project.as_deref(),
                        Signable::Item(kind),
                        &id,
                        Space::Project,
                    ) {
                        Ok(signed) => json!(SignReply::new(&id, Space::Project, signed)),
                        Err(e) => ErrorReply::host(&e).of_id(&id).to_value(),
                    }
                })
                .await
            }
            other => ErrorReply::new(format!(
                "node {:?} asks for {other:?}: execute, load, search or sign",
                action.node
            ))
            .to_value(),
        }
    })
}

/// Host work that blocks (parsing, signing), off the reactor.
async fn on_blocking(rye: Arc<Rye>, work: impl FnOnce(&Rye) -> Value + Send + 'static) -> Value {
    match tokio::task::spawn_blocking(move || work(&rye)).await {
        Ok(value) => value,
        Err(e) => ErrorReply::new(format!("the action failed: {e}")).to_value(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_grant_must_allow() {
        let wide: Arc<[String]> = vec!["rye.execute.*".to_owned()].into();
        let narrow: Arc<[String]> = vec!["rye.execute.tool.demo.*".to_owned()].into();
        let none: Arc<[String]> = Vec::new().into();
        assert!(allowed(std::slice::from_ref(&wide), "rye.execute.tool.x"));
        assert!(!allowed(
            &[narrow.clone(), wide.clone()],
            "rye.execute.tool.x"
        ));
        assert!(allowed(&[narrow, wide], "rye.execute.tool.demo.x"));
        assert!(!allowed(&[none], "rye.execute.tool.demo.x"));
    }
}
