//! Async execution: `execute` with `async` records the run as a thread,
//! hands it to a runner and returns at once with the thread's id.
//!
//! The runner is this host's own program started as `rye threads run
//! <thread id>` in a session of its own, so it outlives the MCP client and
//! the command that asked, and a signal to their terminal does not reach
//! it. As the original's runner, it reads the request as JSON on stdin —
//! written only after the thread is recorded, so a runner never runs
//! what no record names — runs it as any execute (its processes contained
//! as every host contains them) and ends the thread with the result.
//!
//! Cancelling a thread asks its runner to stop (SIGTERM: it drops the run,
//! which kills every process of it, and records the thread as cancelled);
//! a runner still there after the grace period is killed, what it left is
//! stopped, and the thread recorded as cancelled.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rye_integrity::PublicKey;
use rye_space::ItemKind;
use rye_threads::{Ending, NewThread, ProcessIdentity, Status, ThreadError};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;

use crate::threads::{Recorder, Recording};
use crate::{ErrorReply, ExecuteRequest, Rye, RyeConfig, ThreadView};

/// The most a runner reads of its request.
pub const MAX_REQUEST_BYTES: u64 = 16 << 20;

/// How long `cancel` waits for a runner to stop before killing it, unless
/// told otherwise.
pub const DEFAULT_GRACE: Duration = Duration::from_secs(5);

/// How often a runner writes a `progress` event while its run goes on.
const PROGRESS_EVERY: Duration = Duration::from_secs(2);

/// What a runner reads on stdin: the run, and the settings of the host
/// that asked which the environment the runner inherits does not carry.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DetachedRun {
    pub item_type: ItemKind,
    pub item_id: String,
    pub parameters: Value,
    pub project: PathBuf,
    #[serde(default)]
    pub trace: bool,
    pub host: HostSettings,
}

/// The asking host's settings a runner takes over.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostSettings {
    pub enforce: bool,
    pub allow_unsigned_project: bool,
    /// Keys the host was told to trust besides the spaces' own: PEM and
    /// owner.
    pub trusted_keys: Vec<(String, String)>,
    pub user_base: Option<PathBuf>,
    pub system_base: PathBuf,
}

impl DetachedRun {
    /// Reads a request from `input` (at most [`MAX_REQUEST_BYTES`]).
    /// `None` when there is none: the host that started the runner went
    /// away before handing the run over.
    pub fn read(input: impl Read) -> Result<Option<Self>, String> {
        let mut text = Vec::new();
        input
            .take(MAX_REQUEST_BYTES + 1)
            .read_to_end(&mut text)
            .map_err(|e| format!("reading the run's request on stdin: {e}"))?;
        if text.is_empty() {
            return Ok(None);
        }
        if text.len() as u64 > MAX_REQUEST_BYTES {
            return Err(format!(
                "the run's request on stdin is over {MAX_REQUEST_BYTES} bytes"
            ));
        }
        serde_json::from_slice(&text)
            .map(Some)
            .map_err(|e| format!("the run's request on stdin is not one: {e}"))
    }

    /// Makes `config` the asking host's.
    pub fn configure(&self, config: &mut RyeConfig) -> Result<(), String> {
        let host = &self.host;
        config.integrity.enforce = host.enforce;
        config.integrity.allow_unsigned_project = host.allow_unsigned_project;
        config.trusted_keys = host
            .trusted_keys
            .iter()
            .map(|(pem, owner)| {
                PublicKey::from_pem(pem)
                    .map(|key| (key, owner.clone()))
                    .map_err(|e| format!("a trusted key of the request: {e}"))
            })
            .collect::<Result<_, _>>()?;
        config.user_base = host.user_base.clone();
        config.system_base = Some(host.system_base.clone());
        config.record_threads = true;
        Ok(())
    }
}

/// What `cancel` did.
#[derive(Debug, Serialize)]
pub struct Cancelled {
    /// `stopped` (the runner ended the run), `killed` (it did not stop
    /// within the grace period), `gone` (its runner had died; the thread
    /// is recorded as killed), `finished` (it had ended before).
    pub outcome: &'static str,
    #[serde(flatten)]
    pub thread: ThreadView,
}

impl Rye {
    /// Starts a tool's execution without waiting for it (see the module
    /// docs): the reply names the thread and the runner's pid.
    pub async fn execute_async(self: &Arc<Self>, request: &ExecuteRequest) -> Value {
        let started = Instant::now();
        let refuse = |why: String| ErrorReply::new(why).of_id(&request.id).to_value();
        if request.dry_run {
            return refuse(
                "async cannot be combined with dry_run: a dry run returns at once".into(),
            );
        }
        match request.kind {
            ItemKind::Tool => {}
            ItemKind::Knowledge => {
                return refuse(
                    "async is not available for knowledge: it is returned, not run".into(),
                );
            }
            ItemKind::Directive => {
                return refuse(
                    "async is not available for an inline directive: it is returned for the caller to follow"
                        .into(),
                );
            }
            ItemKind::Config => return refuse("config items are not executable".into()),
        }
        if let Err(e) = rye_space::validate_id(&request.id) {
            return refuse(e.to_string());
        }
        if !request.parameters.is_object() {
            return refuse("parameters must be a JSON object".into());
        }
        match self.hand_over(request).await {
            Ok((thread_id, pid)) => json!({
                "status": "success",
                "async": true,
                "thread_id": thread_id,
                "type": "tool",
                "item_id": request.id,
                "execution_mode": "inline",
                "state": "running",
                "pid": pid,
                "metadata": {"duration_ms": started.elapsed().as_millis() as u64},
            }),
            Err(why) => ErrorReply::new(why)
                .of_execution(request.kind, &request.id)
                .took(started)
                .to_value(),
        }
    }

    /// Records the thread, starts its runner and hands it the request.
    async fn hand_over(&self, request: &ExecuteRequest) -> Result<(String, u32), String> {
        if !self.threads.enabled() {
            return Err(
                "async execution needs its run recorded as a thread, and recording is off (RYE_THREADS=0)"
                    .into(),
            );
        }
        let program = self.executable.clone().ok_or(
            "async execution needs the rye program to run it, and this host was not told where it is",
        )?;
        let project = request.project_dir();
        let recorder = self.threads.recorder(&project).await?;
        let run = DetachedRun {
            item_type: request.kind,
            item_id: request.id.clone(),
            parameters: request.parameters.clone(),
            project: project.clone(),
            trace: request.trace,
            host: self.settings(),
        };
        let payload = serde_json::to_vec(&run).map_err(|e| e.to_string())?;
        let thread_id = rye_threads::new_thread_id();
        let args = [
            "--project".as_ref(),
            project.as_os_str(),
            "threads".as_ref(),
            "run".as_ref(),
            thread_id.as_ref(),
        ];
        let mut child = rye_process::spawn_detached(&program, args, None)
            .map_err(|e| format!("starting the runner {}: {e}", program.display()))?;
        let pid = child.id().ok_or("the runner exited as it started")?;
        let recorded = recorder
            .registry
            .start(NewThread {
                item_type: "tool".into(),
                item_id: request.id.clone(),
                params_hash: crate::threads::params_hash(&request.parameters),
                chain: Value::Null,
                execution_mode: "async".into(),
                parent_id: None,
                process: ProcessIdentity::of(pid),
                thread_id: Some(thread_id.clone()),
            })
            .await;
        if let Err(e) = recorded {
            // Its stdin closes unwritten: it exits without running.
            let _ = child.start_kill();
            return Err(format!("recording the thread: {e}"));
        }
        let mut stdin = child.stdin.take().ok_or("the runner has no stdin")?;
        // A request larger than the pipe holds waits here for the runner
        // to read it.
        let written = async {
            stdin.write_all(&payload).await?;
            stdin.shutdown().await
        }
        .await;
        drop(stdin);
        if let Err(e) = written {
            let _ = child.start_kill();
            let _ = recorder
                .registry
                .finish(
                    &thread_id,
                    failed(format!("handing the run to its runner: {e}")),
                )
                .await;
            return Err(format!("handing the run to its runner: {e}"));
        }
        // Reaped when it ends (while this process lives).
        tokio::spawn(async move {
            let _ = child.wait().await;
        });
        Ok((thread_id, pid))
    }

    /// The settings a runner takes over from this host.
    fn settings(&self) -> HostSettings {
        HostSettings {
            enforce: self.integrity.policy.enforce,
            allow_unsigned_project: self.integrity.policy.allow_unsigned_project,
            trusted_keys: self
                .integrity
                .given
                .iter()
                .map(|(key, owner)| (key.pem().to_owned(), owner.clone()))
                .collect(),
            user_base: self.user_base.clone(),
            system_base: self.system_base().to_owned(),
        }
    }

    /// The runner's side: runs the thread `thread_id` was recorded for,
    /// which must be running and recorded as this process's, and ends it
    /// with the result.
    pub async fn run_detached(
        self: &Arc<Self>,
        thread_id: &str,
        run: &DetachedRun,
    ) -> Result<Value, String> {
        let recorder = self.threads.recorder(&run.project).await?;
        let thread = recorder
            .registry
            .get(thread_id)
            .await
            .map_err(|e| e.to_string())?
            .ok_or_else(|| format!("no thread {thread_id} is recorded"))?;
        if thread.status != Status::Running {
            return Err(format!(
                "thread {thread_id} is {}, not running",
                thread.status
            ));
        }
        if thread.process != ProcessIdentity::current() {
            return Err(format!(
                "thread {thread_id} is recorded as run by another process (pid {})",
                thread.pid.map_or("none".into(), |p| p.to_string())
            ));
        }
        let request = ExecuteRequest {
            parameters: run.parameters.clone(),
            project: Some(run.project.clone()),
            trace: run.trace,
            ..ExecuteRequest::new(run.item_type, run.item_id.clone())
        };
        let begun = Instant::now();
        let recording = Recording::resumed(&self.threads, thread_id.to_owned(), recorder.clone());
        let counts = Arc::new(rye_process::OutputCounts::default());
        // Pinned where it is made (`tokio::pin!` would keep a second copy
        // of this large future in this one's state).
        let mut run =
            std::pin::pin!(self.run_tool(&request, begun, Some(recording), Some(counts.clone())));
        // A run that takes a while says so in its log, for `tail` and
        // subscribers.
        let mut ticks =
            tokio::time::interval_at(tokio::time::Instant::now() + PROGRESS_EVERY, PROGRESS_EVERY);
        let result = loop {
            tokio::select! {
                result = &mut run => break result,
                _ = ticks.tick() => {
                    let detail = json!({
                        "elapsed_ms": begun.elapsed().as_millis() as u64,
                        "stdout_bytes": counts.stdout(),
                        "stderr_bytes": counts.stderr(),
                    });
                    if let Err(e) = recorder.registry.event(thread_id, "progress", &detail).await {
                        tracing::warn!("thread {thread_id}: {e}");
                    }
                }
            }
        };
        self.threads.flush().await;
        Ok(result)
    }

    /// Waits until the records of the runs that returned (or were dropped
    /// unfinished) are written: for a process about to exit.
    pub async fn flush_threads(&self) {
        self.threads.flush().await;
    }

    /// Cancels a running async thread (see the module docs), waiting
    /// `grace` for its runner to stop before killing it.
    pub async fn cancel_thread(
        &self,
        project: &Path,
        id: &str,
        grace: Duration,
    ) -> Result<Cancelled, String> {
        self.threads.flush().await;
        let recorder = self.threads.recorder(project).await?;
        let thread = get(&recorder, id).await?;
        if thread.status != Status::Running {
            return self.cancelled(project, id, "finished").await;
        }
        if thread.execution_mode != "async" {
            return Err(format!(
                "thread {id} runs inside the process that asked for it (pid {}), which may be serving other requests; cancel it there (the MCP client's cancel, or Ctrl-C)",
                thread.pid.map_or("unknown".into(), |p| p.to_string())
            ));
        }
        let alive = thread.process.as_ref().filter(|p| p.is_alive());
        let Some(process) = alive else {
            recorder
                .registry
                .recover()
                .await
                .map_err(|e| e.to_string())?;
            return self.cancelled(project, id, "gone").await;
        };
        rye_process::signal(process.pid, rye_process::Signal::Terminate);
        let deadline = Instant::now() + grace;
        while Instant::now() < deadline {
            if get(&recorder, id).await?.status != Status::Running {
                return self.cancelled(project, id, "stopped").await;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        if process.is_alive() {
            rye_process::signal(process.pid, rye_process::Signal::Kill);
            let gone = Instant::now() + Duration::from_secs(5);
            while process.is_alive() && Instant::now() < gone {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
        // What the killed runner could not stop (a detached grandchild).
        crate::runs::stop_abandoned_runs();
        let ended = recorder
            .registry
            .finish(
                id,
                Ending {
                    status: Status::Cancelled,
                    result_hash: None,
                    result: None,
                    error: Some(format!(
                        "cancelled; its runner did not stop within {:.1} s and was killed, with its processes",
                        grace.as_secs_f64()
                    )),
                    chain: None,
                },
            )
            .await;
        match ended {
            // It ended itself at the last moment.
            Ok(()) | Err(ThreadError::NotRunning { .. }) => {
                self.cancelled(project, id, "killed").await
            }
            Err(e) => Err(e.to_string()),
        }
    }

    async fn cancelled(
        &self,
        project: &Path,
        id: &str,
        outcome: &'static str,
    ) -> Result<Cancelled, String> {
        Ok(Cancelled {
            outcome,
            thread: self.thread(project, id).await?,
        })
    }

    /// Waits until thread `id` is no longer running, at most `timeout`;
    /// the thread as it is then.
    pub async fn wait_thread(
        &self,
        project: &Path,
        id: &str,
        timeout: Duration,
    ) -> Result<ThreadView, String> {
        self.tail_thread(project, id, i64::MAX, timeout, |_| Ok(()))
            .await?;
        self.thread(project, id).await
    }

    /// Follows thread `id`: calls `each` with every event after `after`
    /// as it is written, until the thread has ended and its last event is
    /// out (or `timeout` passes). The thread as it is then.
    pub async fn tail_thread(
        &self,
        project: &Path,
        id: &str,
        mut after: i64,
        timeout: Duration,
        mut each: impl FnMut(&rye_threads::Event) -> std::io::Result<()>,
    ) -> Result<rye_threads::Thread, String> {
        self.threads.flush().await;
        let recorder = self.threads.recorder(project).await?;
        let deadline = Instant::now() + timeout;
        let mut pause = Duration::from_millis(5);
        loop {
            // The status first: every event written before it ended is
            // then in the read that follows.
            let thread = get(&recorder, id).await?;
            let events = recorder
                .registry
                .events(id, after)
                .await
                .map_err(|e| e.to_string())?;
            for event in &events {
                each(event).map_err(|e| e.to_string())?;
                after = event.seq;
            }
            if thread.status != Status::Running || Instant::now() >= deadline {
                return Ok(thread);
            }
            // A runner that died is found here, not left running.
            if thread.process.as_ref().is_some_and(|p| !p.is_alive()) {
                recorder
                    .registry
                    .recover()
                    .await
                    .map_err(|e| e.to_string())?;
                continue;
            }
            if events.is_empty() {
                tokio::time::sleep(pause.min(deadline.saturating_duration_since(Instant::now())))
                    .await;
                pause = (pause * 2).min(Duration::from_millis(100));
            } else {
                pause = Duration::from_millis(5);
            }
        }
    }
}

async fn get(recorder: &Recorder, id: &str) -> Result<rye_threads::Thread, String> {
    recorder
        .registry
        .get(id)
        .await
        .map_err(|e| e.to_string())?
        .ok_or_else(|| format!("no thread {id} in {}", recorder.registry.path().display()))
}

fn failed(why: String) -> Ending {
    Ending {
        status: Status::Error,
        result_hash: None,
        result: None,
        error: Some(why),
        chain: None,
    }
}
