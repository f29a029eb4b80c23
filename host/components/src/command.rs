//! Tools that are `wasi:cli` command components: parameters as JSON on
//! stdin, the answer on stdout, exactly as for a process tool, but run
//! in the engine with nothing but what the call grants: the directories
//! it preopens (each read-only or read-write), the environment variables
//! it names, the hosts it may send HTTP requests to, a CPU deadline, a
//! memory cap and an output cap. No socket, no other file, no inherited
//! variable.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use wasmtime::Store;
use wasmtime::component::Component;
use wasmtime_wasi::p2::bindings::sync::CommandPre;

use crate::bindings::tool::ToolPre;
use crate::bindings::tool::exports::rye::plugin::running;
use crate::entry::Entry;
use wasmtime_wasi::p2::pipe::{MemoryInputPipe, MemoryOutputPipe};
use wasmtime_wasi::{FsPerms, I32Exit, WasiCtx};

use crate::error::{ComponentError, ComponentErrorKind};
use crate::host::{ComponentHost, LoadedCommand, Origin};
use crate::limits::Limits;
use crate::sandbox::CallState;

/// How much of a tool's stderr is kept.
const STDERR_CAPTURE: usize = 64 * 1024;

/// A directory a tool may see, at `guest` inside it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirGrant {
    pub host: PathBuf,
    pub guest: String,
    pub writable: bool,
}

/// Everything one run of a command tool is given.
#[derive(Debug, Clone, Default)]
pub struct CommandGrants {
    pub dirs: Vec<DirGrant>,
    /// Variables by name and value; no other reaches the tool.
    pub env: Vec<(String, String)>,
    pub limits: Limits,
    /// Bytes of stdout kept; a tool that writes more is stopped.
    pub output_cap: usize,
    /// The tool's arguments after its name (`args[0]`).
    pub args: Vec<String>,
    /// The hosts its `wasi:http` requests may reach; none when empty.
    pub hosts: Vec<crate::HostRule>,
    /// What a `tool`-world component is told of its call: the item's id
    /// and the project's path.
    pub item_id: String,
    pub project_path: Option<String>,
    /// Set by whoever ran it to stop it: the engine stops the tool at its
    /// next epoch tick (within 100 ms), wherever its code is.
    pub cancel: Option<Arc<AtomicBool>>,
}

/// Why a `tool`-world component gave no answer, as it said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolError {
    InvalidParameters(String),
    NotFound(String),
    Denied(String),
    Failed(String),
}

impl std::fmt::Display for ToolError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::InvalidParameters(m) => write!(f, "invalid parameters: {m}"),
            Self::NotFound(m) => write!(f, "not found: {m}"),
            Self::Denied(m) => write!(f, "denied: {m}"),
            Self::Failed(m) => f.write_str(m),
        }
    }
}

impl From<running::ToolError> for ToolError {
    fn from(error: running::ToolError) -> Self {
        match error {
            running::ToolError::InvalidParameters(m) => Self::InvalidParameters(m),
            running::ToolError::NotFound(m) => Self::NotFound(m),
            running::ToolError::Denied(m) => Self::Denied(m),
            running::ToolError::Failed(m) => Self::Failed(m),
        }
    }
}

/// How a run of a command tool ended, when it was not stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandOutput {
    /// 0 for success; 1 for a failure (WASI 0.2 carries no more), or
    /// the code of an exit that gave one.
    pub exit_code: i32,
    pub stdout: Vec<u8>,
    pub stderr: String,
    /// The requests it sent that its grants did not allow, each as
    /// `scheme://host:port`.
    pub denied: Vec<String>,
    /// A `tool`-world component's error (its exit code is then 1).
    pub error: Option<ToolError>,
}

/// Why a run of a command tool was stopped: each names the limit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CommandStop {
    Deadline(Duration),
    Memory(usize),
    Output(usize),
    /// Its caller stopped it.
    Cancelled,
    /// Its own code failed; `denied` are the requests it sent that its
    /// grants did not allow (often why a tool gave up).
    Trap {
        message: String,
        stderr: String,
        denied: Vec<String>,
    },
}

impl std::fmt::Display for CommandStop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Deadline(d) => write!(f, "ran past its CPU deadline of {} ms", d.as_millis()),
            Self::Memory(cap) => write!(f, "used more memory than its cap of {cap} bytes"),
            Self::Output(cap) => write!(f, "wrote more than its output cap of {cap} bytes"),
            Self::Cancelled => f.write_str("was cancelled by its caller"),
            Self::Trap {
                message,
                stderr,
                denied,
            } => {
                write!(f, "trapped: {message}")?;
                if !stderr.trim().is_empty() {
                    write!(f, "; stderr: {}", stderr.trim_end())?;
                }
                if !denied.is_empty() {
                    write!(f, "; denied: {}", denied.join(", "))?;
                }
                Ok(())
            }
        }
    }
}

impl CallState {
    /// The state of one run of a command tool: `grants` and nothing else,
    /// `stdin` as its input, stdout kept up to one byte past the cap (so
    /// a tool that passes it is known to have).
    fn command(grants: &CommandGrants, stdin: Vec<u8>) -> Result<Self, String> {
        let stdout = MemoryOutputPipe::new(grants.output_cap.saturating_add(1));
        let stderr = MemoryOutputPipe::new(STDERR_CAPTURE);
        let mut builder = WasiCtx::builder();
        builder
            .allow_blocking_current_thread(true)
            .stdin(MemoryInputPipe::new(stdin))
            .stdout(stdout.clone())
            .stderr(stderr.clone())
            .allow_tcp(false)
            .allow_udp(false)
            .allow_ip_name_lookup(false)
            .arg("tool")
            .args(&grants.args);
        for (name, value) in &grants.env {
            builder.env(name, value);
        }
        for dir in &grants.dirs {
            let perms = if dir.writable {
                FsPerms::ReadWrite
            } else {
                FsPerms::ReadOnly
            };
            builder
                .preopened_dir(&dir.host, &dir.guest, perms)
                .map_err(|e| format!("{}: {e:#}", dir.host.display()))?;
        }
        let mut state = Self::with_context(builder.build(), grants.limits.memory, stderr);
        state.stdout = Some(stdout);
        state.net = crate::net::NetHooks::new(
            grants.hosts.clone().into(),
            std::time::Instant::now() + grants.limits.deadline,
            grants.cancel.clone(),
        );
        Ok(state)
    }
}

impl ComponentHost {
    /// Loads the command component at `path`, first handing its content
    /// hash to `check` (its signature): if it refuses, nothing is
    /// compiled and its answer is returned.
    pub fn load_command<E>(
        &self,
        path: &Path,
        check: impl FnOnce(&[u8; 32]) -> Result<(), E>,
    ) -> Result<Result<Arc<LoadedCommand>, E>, ComponentError> {
        let fail = |kind| ComponentError {
            path: path.to_owned(),
            kind,
        };
        let (hash, bytes) = self.hash_file(path).map_err(fail)?;
        if let Err(refused) = check(&hash) {
            return Ok(Err(refused));
        }
        if let Some(found) = self.known_command(&hash) {
            return Ok(Ok(found));
        }
        let bytes = match bytes {
            Some(bytes) => bytes,
            None => self.read_again(path, &hash).map_err(fail)?,
        };
        let (component, origin): (Component, Origin) =
            self.compile_bytes(path, &bytes, hash).map_err(fail)?;
        let pre = self
            .command_linker()
            .instantiate_pre(&component)
            .map_err(|e| fail(ComponentErrorKind::Import(format!("{e:#}"))))?;
        let typed = component
            .component_type()
            .exports(self.engine())
            .any(|(name, _)| name.starts_with("rye:plugin/running@"));
        let pre = if typed {
            ToolPre::new(pre).map(Entry::Tool).map_err(|e| {
                fail(ComponentErrorKind::Signature(format!(
                    "its rye:plugin/running export: {e:#}"
                )))
            })?
        } else {
            CommandPre::new(pre)
                .map(Entry::Command)
                .map_err(|e| fail(ComponentErrorKind::NotACommand(format!("{e:#}"))))?
        };
        let run_async = match &pre {
            Entry::Command(_) => self
                .command_linker_async()
                .instantiate_pre(&component)
                .ok()
                .and_then(|pre| wasmtime_wasi::p2::bindings::CommandPre::new(pre).ok()),
            Entry::Tool(_) => None,
        };
        let loaded = Arc::new(LoadedCommand {
            path: path.to_owned(),
            hash,
            origin,
            pre,
            run_async,
        });
        self.keep_command(hash, Arc::clone(&loaded));
        Ok(Ok(loaded))
    }

    /// Runs `command` once with `grants`, `stdin` as its input. A run
    /// the tool ended itself (any exit code) is its output; one stopped
    /// by a limit or a trap is the stop, naming the limit.
    pub fn run_command(
        &self,
        command: &LoadedCommand,
        grants: &CommandGrants,
        stdin: Vec<u8>,
    ) -> Result<Result<CommandOutput, CommandStop>, ComponentError> {
        let mut answer = None;
        self.run_command_then(command, grants, stdin, |ran| answer = Some(ran));
        answer.expect("every run answers")
    }

    /// [`ComponentHost::run_command`], handing the answer to `answer` as
    /// soon as it is known. Only then is the run's store dropped, which
    /// resets the instance's pooled memory and takes longer than a small
    /// tool's whole run: a caller on another thread has its answer
    /// meanwhile, and this thread (a blocking one) does the reset with no
    /// further hand-off.
    pub fn run_command_then(
        &self,
        command: &LoadedCommand,
        grants: &CommandGrants,
        stdin: Vec<u8>,
        answer: impl FnOnce(Result<Result<CommandOutput, CommandStop>, ComponentError>),
    ) {
        // A command reads its parameters from stdin; a typed tool is
        // handed them.
        let (stdin, stdin_copy) = match &command.pre {
            Entry::Command(_) => (stdin, Vec::new()),
            Entry::Tool(_) => (Vec::new(), stdin),
        };
        let (mut store, started) = match self.run_store(command, grants, stdin) {
            Ok(made) => made,
            Err(e) => return answer(Err(e)),
        };
        if let Some(cancel) = grants.cancel.clone() {
            // Every tick asks whether the run was cancelled, and stops it
            // at its deadline as the plain store would.
            let until = started + grants.limits.deadline;
            store.epoch_deadline_callback(move |_| {
                Ok(if must_stop(Some(&*cancel), until) {
                    wasmtime::UpdateDeadline::Interrupt
                } else {
                    wasmtime::UpdateDeadline::Continue(1)
                })
            });
            store.set_epoch_deadline(1);
        }
        answer(Ok(self.command_outcome(
            command,
            grants,
            &stdin_copy,
            &mut store,
            started,
        )));
        drop(store);
    }

    /// The store for one run of `command` with `grants`, `stdin` its
    /// standard input, and when the run's deadline started counting.
    fn run_store(
        &self,
        command: &LoadedCommand,
        grants: &CommandGrants,
        stdin: Vec<u8>,
    ) -> Result<(Store<CallState>, std::time::Instant), ComponentError> {
        let state = CallState::command(grants, stdin).map_err(|e| self.cannot_open(command, &e))?;
        let started = std::time::Instant::now();
        Ok((self.deadline_store(state, grants.limits.deadline), started))
    }

    /// The error of a run of `command` whose granted directory `why`
    /// could not be opened.
    fn cannot_open(&self, command: &LoadedCommand, why: &str) -> ComponentError {
        ComponentError {
            path: command.path.clone(),
            kind: ComponentErrorKind::Io(format!("a granted directory cannot be opened: {why}")),
        }
    }

    /// A run of `command` on the caller's task instead of a thread of its
    /// own, when it is a `wasi:cli` command and one of the
    /// [`ASYNC_RUNS`](crate::host) fiber stacks is free. The run yields
    /// at every epoch tick, so whoever awaits it may stop waiting (and so
    /// stop it) and do other work meanwhile; a short run costs no thread
    /// hand-off at all.
    pub fn async_run(self: &Arc<Self>, command: &Arc<LoadedCommand>) -> Option<AsyncRun> {
        command.run_async.as_ref()?;
        let permit = self.async_permit()?;
        Some(AsyncRun {
            host: Arc::clone(self),
            command: Arc::clone(command),
            permit,
        })
    }

    /// Instantiates `command` in `store` and runs it: its output, or what
    /// stopped it.
    fn command_outcome(
        &self,
        command: &LoadedCommand,
        grants: &CommandGrants,
        stdin_copy: &[u8],
        store: &mut wasmtime::Store<CallState>,
        started: std::time::Instant,
    ) -> Result<CommandOutput, CommandStop> {
        let ran = match &command.pre {
            Entry::Command(pre) => pre
                .instantiate(&mut *store)
                .and_then(|cli| cli.wasi_cli_run().call_run(&mut *store))
                .map(|ran| ran.map(|()| None)),
            Entry::Tool(pre) => {
                let call = running::Call {
                    item_id: grants.item_id.clone(),
                    parameters: String::from_utf8_lossy(stdin_copy).into_owned(),
                    project_path: grants.project_path.clone(),
                };
                pre.instantiate(&mut *store)
                    .and_then(|tool| tool.rye_plugin_running().call_run(&mut *store, &call))
                    .map(|answer| Ok(Some(answer)))
            }
        };
        self.settle(command, grants, store, started, ran)
    }

    /// What a run that ended as `ran` gives: its output, or what stopped
    /// it.
    fn settle(
        &self,
        command: &LoadedCommand,
        grants: &CommandGrants,
        store: &mut wasmtime::Store<CallState>,
        started: std::time::Instant,
        ran: wasmtime::Result<Result<Option<Result<String, running::ToolError>>, ()>>,
    ) -> Result<CommandOutput, CommandStop> {
        tracing::debug!(
            path = %command.path.display(),
            run_us = started.elapsed().as_micros() as u64,
            "tool component ran"
        );
        let data = store.data();
        let mut stdout = data.stdout.as_ref().map(|p| p.contents().to_vec());
        let stderr = data.stderr_text();
        // A wait on the network cut at the deadline is the deadline, however
        // the tool took the error.
        if data.net.past_deadline.load(Ordering::Relaxed) {
            return Err(CommandStop::Deadline(grants.limits.deadline));
        }
        // A run its caller cancelled is cancelled, whether the engine
        // stopped it or a wait on the network was cut.
        if grants
            .cancel
            .as_ref()
            .is_some_and(|c| c.load(Ordering::Relaxed))
        {
            return Err(CommandStop::Cancelled);
        }
        let denied = data.net.denied.clone();
        let (exit_code, error) = match ran {
            Ok(Ok(None)) => (0, None),
            Ok(Err(())) => (1, None),
            Ok(Ok(Some(Ok(answer)))) => {
                // A typed tool's answer is its data; what it printed is not.
                let parsed = serde_json::from_str::<serde::de::IgnoredAny>(&answer);
                stdout = Some(answer.into_bytes());
                match parsed {
                    Ok(_) => (0, None),
                    Err(e) => (
                        1,
                        Some(ToolError::Failed(format!("its answer is not JSON: {e}"))),
                    ),
                }
            }
            Ok(Ok(Some(Err(error)))) => {
                stdout = Some(Vec::new());
                (1, Some(error.into()))
            }
            Err(e) => match e.downcast_ref::<I32Exit>() {
                Some(exit) => (exit.0, None),
                None => {
                    return Err(match crate::host::classify(store, grants.limits, e) {
                        ComponentErrorKind::Timeout(d) => CommandStop::Deadline(d),
                        ComponentErrorKind::MemoryLimit { limit } => CommandStop::Memory(limit),
                        ComponentErrorKind::Trap { message, stderr } => CommandStop::Trap {
                            message,
                            stderr,
                            denied,
                        },
                        other => CommandStop::Trap {
                            message: other.to_string(),
                            stderr,
                            denied,
                        },
                    });
                }
            },
        };
        let stdout = stdout.unwrap_or_default();
        if stdout.len() > grants.output_cap {
            return Err(CommandStop::Output(grants.output_cap));
        }
        Ok(CommandOutput {
            exit_code,
            stdout,
            stderr,
            denied,
            error,
        })
    }
}

/// A store that ran a tool: dropping it resets the instance's pooled
/// memory, which takes longer than a small tool's run, so a caller may
/// drop it once its answer is on its way.
pub struct Spent(#[allow(dead_code, reason = "held to be dropped")] wasmtime::Store<CallState>);

/// A command's run on its caller's task (see [`ComponentHost::async_run`]).
pub struct AsyncRun {
    host: Arc<ComponentHost>,
    command: Arc<LoadedCommand>,
    permit: crate::host::AsyncPermit,
}

type Answer = (
    Result<Result<CommandOutput, CommandStop>, ComponentError>,
    Option<Spent>,
);

impl AsyncRun {
    /// Runs the command with `grants`, `stdin` as its input: as
    /// [`ComponentHost::run_command`] answers, and the spent store (none
    /// when the host keeps spares: their thread took it). It
    /// runs on the caller's task until it ends or reaches an epoch tick;
    /// a run still going at a tick goes on on a blocking thread, so a
    /// long run never holds an async worker.
    pub async fn run(self, grants: CommandGrants, stdin: Vec<u8>) -> Answer {
        let path = self.command.path.clone();
        let ticked = Arc::new(AtomicBool::new(false));
        let work = Box::pin(self.work(grants, stdin, Arc::clone(&ticked)));
        match crate::host::on_task_until_tick(work, &ticked).await {
            Ok(done) => done,
            Err(e) => (
                Err(ComponentError {
                    path,
                    kind: ComponentErrorKind::Trap {
                        message: format!("its run ended abnormally: {e}"),
                        stderr: String::new(),
                    },
                }),
                None,
            ),
        }
    }

    /// The run itself; `ticked` turns true when it yields at a tick.
    async fn work(self, grants: CommandGrants, stdin: Vec<u8>, ticked: Arc<AtomicBool>) -> Answer {
        let Self {
            host,
            command,
            permit,
        } = self;
        let Some(pre) = command.run_async.as_ref() else {
            unreachable!("an async run is made only for a command with an async entry")
        };
        let key = crate::spare::SpareKey {
            hash: command.hash,
            memory: grants.limits.memory,
        };
        let spares = host.config().spares;
        let spare = if spares {
            host.spares.take_command(key)
        } else {
            None
        };
        let (mut store, made, started) = match spare {
            Some((mut store, made)) => match CallState::command(&grants, stdin) {
                Ok(fresh) => {
                    store.data_mut().take_run(fresh);
                    (store, Some(made), std::time::Instant::now())
                }
                Err(e) => return (Err(host.cannot_open(&command, &e)), None),
            },
            None => match host.run_store(&command, &grants, stdin) {
                Ok((store, started)) => (store, None, started),
                Err(e) => return (Err(e), None),
            },
        };
        // Every tick: stopped if cancelled or past the deadline, else a
        // yield to the executor.
        let until = started + grants.limits.deadline;
        let cancel = grants.cancel.clone();
        store.epoch_deadline_callback(move |_| {
            Ok(if must_stop(cancel.as_deref(), until) {
                wasmtime::UpdateDeadline::Interrupt
            } else {
                ticked.store(true, Ordering::Release);
                wasmtime::UpdateDeadline::Yield(1)
            })
        });
        store.set_epoch_deadline(1);
        let made = match made {
            Some(made) => Ok(made),
            None => pre.instantiate_async(&mut store).await,
        };
        let ran = match made {
            Ok(cli) => cli
                .wasi_cli_run()
                .call_run(&mut store)
                .await
                .map(|ran| ran.map(|()| None)),
            Err(e) => Err(e),
        };
        drop(permit);
        let settled = host.settle(&command, &grants, &mut store, started, ran);
        if !spares {
            return (Ok(settled), Some(Spent(store)));
        }
        // The spent store goes to the spares' thread (once the call is
        // answered, where workers hand it on), which then makes the next
        // instance of this command with the same memory cap.
        let (engine, pre, deadline) = (host.engine().clone(), pre.clone(), grants.limits.deadline);
        host.spares
            .after(store, key, crate::spare::Kind::Command, move |runtime| {
                let state = CallState::sandboxed(key.memory);
                let mut store = crate::host::deadline_store(&engine, state, deadline);
                let made = runtime.block_on(pre.instantiate_async(&mut store)).ok()?;
                Some(crate::spare::Spare {
                    key,
                    store,
                    made: crate::spare::Made::Command(made),
                })
            });
        (Ok(settled), None)
    }
}

/// Whether a run is to stop at an epoch tick: it was cancelled through
/// `cancel`, or it is past `until`, its deadline.
fn must_stop(cancel: Option<&AtomicBool>, until: std::time::Instant) -> bool {
    cancel.is_some_and(|c| c.load(Ordering::Relaxed)) || std::time::Instant::now() >= until
}
