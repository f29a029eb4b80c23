//! Calls into the `runtime-adapter` world.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use rye_gate::HostCall;
use serde_json::Value;

use crate::bindings::adapter::exports::rye::plugin::planning as wit;
use crate::bindings::adapter::rye::plugin::{host as wit_host, types as wit_types};
use crate::error::{ComponentError, ComponentErrorKind};
use crate::host::{ComponentHost, LoadedComponent, Pre, deadline_store};
use crate::plans::{
    PlanFailure, PlanRequest, Planned, PlannedAction, PlannedCall, PlannedProcess, PlannedRequest,
};
use crate::sandbox::CallState;
use crate::services::{AdapterServices, PluginSpace};
use crate::spare::{Kind, Made, Spare, SpareKey};
use crate::world::World;

impl ComponentHost {
    /// Asks a runtime adapter for the plan of one execution, blocking the
    /// calling thread until it is made: for a caller outside any async
    /// runtime, or on a thread a multi-threaded runtime let block (see
    /// [`tokio::task::block_in_place`]). See [`ComponentHost::plan_async`].
    pub fn plan(
        &self,
        component: &LoadedComponent,
        request: &PlanRequest,
        grants: &[PathBuf],
        services: Box<dyn AdapterServices>,
    ) -> Result<Result<Planned, PlanFailure>, ComponentError> {
        wasmtime_wasi::runtime::in_tokio(self.plan_async(component, request, grants, services))
    }

    /// Asks a runtime adapter for the plan of one execution from an async
    /// task. When `services` answer at once (see
    /// [`AdapterServices::answers_at_once`]), on a worker of a
    /// multi-threaded runtime, the plan is made on the task itself until
    /// it ends or reaches an epoch tick, as a command's run is (see
    /// [`ComponentHost::async_run`]): a short plan costs no hand-off, and
    /// one still going at a tick goes on on a blocking thread, so a plan
    /// that spins to its deadline never holds a worker past one tick.
    /// Given up there (this future dropped), it stops at its next tick.
    /// Otherwise it is made as [`ComponentHost::plan`] makes it, the
    /// worker's other tasks handed to another thread meanwhile (on a
    /// current-thread runtime, on a thread of its own).
    pub async fn plan_on_task(
        self: &Arc<Self>,
        component: &Arc<LoadedComponent>,
        request: PlanRequest,
        grants: Vec<PathBuf>,
        services: Box<dyn AdapterServices>,
    ) -> Result<Result<Planned, PlanFailure>, ComponentError> {
        if let Some(planned) = self.reusable.reuse(&component.hash, &request, &grants) {
            return Ok(Ok(planned));
        }
        let multi_thread = tokio::runtime::Handle::try_current()
            .is_ok_and(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread);
        if !multi_thread {
            return std::thread::scope(|scope| {
                scope
                    .spawn(|| self.plan_anew(component, &request, &grants, services))
                    .join()
                    .expect("the plan's thread panicked")
            });
        }
        if !services.answers_at_once() {
            return tokio::task::block_in_place(|| {
                self.plan_anew(component, &request, &grants, services)
            });
        }
        let ticks = Arc::new(Ticks::default());
        let plan = Box::pin({
            let (host, component, ticks) =
                (Arc::clone(self), Arc::clone(component), Arc::clone(&ticks));
            async move {
                host.plan_ticking(&component, &request, &grants, services, Some(ticks))
                    .await
            }
        });
        // Dropped while the plan is on a blocking thread, this future
        // stops it at its next tick (on the task, the plan is dropped
        // with it).
        let _stop_if_dropped = ticks.stop_on_drop();
        match crate::host::on_task_until_tick(plan, &ticks.ticked).await {
            Ok(done) => done,
            Err(e) => Err(ComponentError {
                path: component.path.clone(),
                kind: ComponentErrorKind::Trap {
                    message: format!("its plan ended abnormally: {e}"),
                    stderr: String::new(),
                },
            }),
        }
    }

    /// Asks a runtime adapter for the plan of one execution. It sees
    /// read-only views of those of `grants` that open as folders (and
    /// nothing else of the filesystem) and asks `services` for anything
    /// more. The outer error is a failure of the component; the inner one
    /// its verdict on the chain.
    ///
    /// The call runs on the awaiting task itself, on a fiber, and waits on
    /// nothing but the guest: its views are read in place and `services`
    /// answer at once. It yields at every epoch tick until its deadline,
    /// then stops. So an async caller may await it where it is, as long as
    /// `services` run no command (a chain element's declared resolve
    /// command blocks until it exits); [`ComponentHost::plan_on_task`]
    /// decides where.
    ///
    /// A tool call the adapter marked reusable, planned for the same input
    /// but the parameters, is answered from that plan without running the
    /// adapter (see `ReusablePlans`), as by [`ComponentHost::plan_on_task`].
    pub async fn plan_async(
        &self,
        component: &LoadedComponent,
        request: &PlanRequest,
        grants: &[PathBuf],
        services: Box<dyn AdapterServices>,
    ) -> Result<Result<Planned, PlanFailure>, ComponentError> {
        if let Some(planned) = self.reusable.reuse(&component.hash, request, grants) {
            return Ok(Ok(planned));
        }
        self.plan_ticking(component, request, grants, services, None)
            .await
    }

    /// [`ComponentHost::plan`] once the kept plans have been looked in:
    /// the adapter is asked.
    fn plan_anew(
        &self,
        component: &LoadedComponent,
        request: &PlanRequest,
        grants: &[PathBuf],
        services: Box<dyn AdapterServices>,
    ) -> Result<Result<Planned, PlanFailure>, ComponentError> {
        wasmtime_wasi::runtime::in_tokio(
            self.plan_ticking(component, request, grants, services, None),
        )
    }

    /// [`ComponentHost::plan_async`], telling `ticks` of each tick it
    /// yields at, and stopped at a tick once `ticks` say so.
    async fn plan_ticking(
        &self,
        component: &LoadedComponent,
        request: &PlanRequest,
        grants: &[PathBuf],
        services: Box<dyn AdapterServices>,
        ticks: Option<Arc<Ticks>>,
    ) -> Result<Result<Planned, PlanFailure>, ComponentError> {
        let fail = |kind| ComponentError {
            path: component.path.clone(),
            kind,
        };
        let Pre::Adapter(pre) = &component.pre else {
            return Err(fail(ComponentErrorKind::WrongWorld {
                expected: World::RuntimeAdapter.name().to_owned(),
                found: vec![format!("the {} world", component.world)],
            }));
        };
        let limits = self.config().limits(World::RuntimeAdapter);
        let cannot_grant = |(dir, e): (PathBuf, String)| {
            fail(ComponentErrorKind::Io(format!(
                "cannot grant {}: {e}",
                dir.display()
            )))
        };
        // The slot first, so that waiting for one does not count against
        // the deadline.
        let slot = wait_for_slot(self.slots_of(World::RuntimeAdapter));
        let key = SpareKey {
            hash: component.hash,
            memory: limits.memory,
        };
        let (mut store, made) = match self.spares.take_adapter(key) {
            Some((mut store, adapter)) => {
                store.data_mut().grant(grants).map_err(cannot_grant)?;
                (store, Some(adapter))
            }
            None => {
                let mut state = CallState::granted(limits.memory, grants).map_err(cannot_grant)?;
                state.world = Some(World::RuntimeAdapter);
                (deadline_store(self.engine(), state, limits.deadline), None)
            }
        };
        let asked = Arc::new(AtomicBool::new(false));
        store.data_mut().services = Some(Box::new(Watched {
            services,
            asked: Arc::clone(&asked),
        }));
        store.data_mut().slot = Some(slot);
        // At every tick until the deadline the call yields to the
        // runtime, so that a long plan shares the thread that awaits it;
        // past the deadline, or once its caller gave up, it is stopped.
        let until = std::time::Instant::now() + limits.deadline;
        store.epoch_deadline_callback(move |_| {
            let given_up = ticks.as_deref().is_some_and(Ticks::given_up);
            Ok(if given_up || std::time::Instant::now() >= until {
                wasmtime::UpdateDeadline::Interrupt
            } else {
                if let Some(ticks) = &ticks {
                    ticks.ticked.store(true, Ordering::Release);
                }
                wasmtime::UpdateDeadline::Yield(1)
            })
        });
        store.set_epoch_deadline(1);

        let input = wit::PlanInput {
            chain: request
                .chain
                .iter()
                .map(|e| wit::ChainElement {
                    item_id: e.item_id.clone(),
                    space: wit_space(e.space),
                    path: e.path.display().to_string(),
                    metadata: String::from(&*e.metadata),
                })
                .collect(),
            parameters: request.parameters.to_string(),
            project_path: request.project_path.display().to_string(),
            user_space: request.user_space.display().to_string(),
            system_space: request.system_space.display().to_string(),
        };
        let result = match made {
            Some(adapter) => Ok(adapter),
            None => pre.instantiate_async(&mut store).await,
        };
        let result = match result {
            Ok(adapter) => {
                adapter
                    .rye_plugin_planning()
                    .call_plan(&mut store, &input)
                    .await
            }
            Err(e) => Err(e),
        };
        let result = result.map_err(|e| fail(self.classify(&store, World::RuntimeAdapter, e)));
        if self.config().spares {
            // The spent instance is dropped, and the next made, off the
            // caller's path; its slot and services are given back now.
            store.data_mut().slot = None;
            store.data_mut().services = None;
            let (engine, pre) = (self.engine().clone(), pre.clone());
            self.spares
                .after(store, key, Kind::Adapter, move |runtime| {
                    let mut state = CallState::sandboxed(limits.memory);
                    state.world = Some(World::RuntimeAdapter);
                    let mut store = deadline_store(&engine, state, limits.deadline);
                    let adapter = runtime.block_on(pre.instantiate_async(&mut store)).ok()?;
                    Some(Spare {
                        key,
                        store,
                        made: Made::Adapter(adapter),
                    })
                });
        } else {
            drop(store);
        }
        let result = result?;
        let mut reusable = false;
        Ok(match result {
            Ok(planned) => {
                let (action, raw_notes) = match planned {
                    wit::Planned::Process(plan) => (
                        PlannedAction::Process(PlannedProcess {
                            command: plan.command,
                            args: plan.args,
                            env: plan.env.into_iter().map(|v| (v.name, v.value)).collect(),
                            cwd: plan.cwd,
                            stdin: plan.stdin,
                            timeout_ms: plan.timeout_ms,
                        }),
                        plan.notes,
                    ),
                    wit::Planned::Http(plan) => (
                        PlannedAction::Http(PlannedRequest {
                            method: plan.method,
                            url: plan.url,
                            headers: plan
                                .headers
                                .into_iter()
                                .map(|h| (h.name, h.value))
                                .collect(),
                            body: plan.body,
                            timeout_ms: plan.timeout_ms,
                            max_response_bytes: plan.max_response_bytes,
                            max_redirects: plan.max_redirects,
                            retry: plan.retry.map(|r| (r.max_attempts, r.backoff_ms)),
                        }),
                        plan.notes,
                    ),
                    wit::Planned::Mcp(plan) => {
                        let arguments: Value =
                            serde_json::from_str(&plan.arguments).map_err(|e| {
                                fail(ComponentErrorKind::BadOutput(format!(
                                    "the MCP call's arguments are not valid JSON: {e}"
                                )))
                            })?;
                        if !arguments.is_object() {
                            return Err(fail(ComponentErrorKind::BadOutput(
                                "the MCP call's arguments are not a JSON object".into(),
                            )));
                        }
                        reusable = plan.reusable && !asked.load(Ordering::Relaxed);
                        (
                            PlannedAction::Mcp(PlannedCall {
                                server: plan.server,
                                tool_name: plan.tool_name,
                                arguments,
                                startup_timeout_ms: plan.startup_timeout_ms,
                                timeout_ms: plan.timeout_ms,
                            }),
                            plan.notes,
                        )
                    }
                };
                let mut notes = Vec::with_capacity(raw_notes.len());
                for note in raw_notes {
                    let detail = serde_json::from_str(&note.detail).map_err(|e| {
                        fail(ComponentErrorKind::BadOutput(format!(
                            "trace note {:?} is not valid JSON: {e}",
                            note.step
                        )))
                    })?;
                    notes.push((note.step, detail));
                }
                let planned = Planned {
                    action,
                    notes,
                    reused: false,
                };
                if reusable {
                    self.reusable
                        .keep(component.hash, request, grants, &planned);
                }
                Ok(planned)
            }
            Err(wit::PlanError::Config(e)) => Err(PlanFailure::Config {
                item_id: e.item_id,
                message: e.message,
            }),
            Err(wit::PlanError::InterpreterNotFound(e)) => Err(PlanFailure::InterpreterNotFound {
                item_id: e.item_id,
                message: e.message,
            }),
            Err(wit::PlanError::Template(e)) => Err(PlanFailure::Template {
                item_id: e.item_id,
                message: e.message,
            }),
            Err(wit::PlanError::Unsupported(e)) => Err(PlanFailure::Unsupported(e)),
        })
    }
}

/// What a plan made on its caller's task shares with that task: whether
/// it has yielded at a tick, and whether its caller gave up on it.
#[derive(Default)]
struct Ticks {
    ticked: AtomicBool,
    stop: AtomicBool,
}

impl Ticks {
    fn given_up(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }

    /// A guard that, dropped, stops the plan at its next tick.
    fn stop_on_drop(self: &Arc<Self>) -> impl Drop {
        struct Stop(Arc<Ticks>);
        impl Drop for Stop {
            fn drop(&mut self) {
                self.0.stop.store(true, Ordering::Relaxed);
            }
        }
        Stop(Arc::clone(self))
    }
}

/// A slot of `slots`: a free one at once, else one waited for where
/// waiting does not hold up other tasks (on a multi-threaded runtime's
/// worker, by handing its other tasks to another thread meanwhile).
fn wait_for_slot(slots: &Arc<crate::slots::Slots>) -> crate::slots::Slot {
    if let Some(slot) = slots.try_take() {
        return slot;
    }
    match tokio::runtime::Handle::try_current().map(|h| h.runtime_flavor()) {
        Ok(tokio::runtime::RuntimeFlavor::MultiThread) => {
            tokio::task::block_in_place(|| slots.take())
        }
        _ => slots.take(),
    }
}

fn wit_space(space: PluginSpace) -> wit_types::Space {
    match space {
        PluginSpace::Project => wit_types::Space::Project,
        PluginSpace::User => wit_types::Space::User,
        PluginSpace::System => wit_types::Space::System,
    }
}

/// A call the gate does not let the component's world make, or made
/// without services, gets the empty answer or an error saying so.
impl wit_host::Host for CallState {
    fn get_env(&mut self, name: String) -> Option<String> {
        self.services_for(HostCall::GetEnv)?.get_env(&name)
    }

    fn environment(&mut self) -> Vec<(String, String)> {
        self.services_for(HostCall::Environment)
            .map(|s| s.environment())
            .unwrap_or_default()
    }

    fn which(&mut self, binary: String) -> Option<String> {
        self.services_for(HostCall::Which)?.which(&binary)
    }

    fn run_declared_command(&mut self, item_id: String) -> Result<String, String> {
        match self.services_for(HostCall::RunDeclaredCommand) {
            Some(services) => services.run_declared_command(&item_id),
            None => Err("this component may not run commands".into()),
        }
    }

    fn read_config(
        &mut self,
        space: wit_types::Space,
        path: String,
    ) -> Result<Option<String>, String> {
        let space = match space {
            wit_types::Space::Project => PluginSpace::Project,
            wit_types::Space::User => PluginSpace::User,
            wit_types::Space::System => PluginSpace::System,
        };
        match self.services_for(HostCall::ReadConfig) {
            Some(services) => services.read_config(space, &path),
            None => Err("this component may not read configuration".into()),
        }
    }
}

impl wit_types::Host for CallState {}

/// The services an adapter is lent, noting whether it asked them anything.
struct Watched {
    services: Box<dyn AdapterServices>,
    asked: Arc<AtomicBool>,
}

impl Watched {
    fn asked(&mut self) -> &mut dyn AdapterServices {
        self.asked.store(true, Ordering::Relaxed);
        &mut *self.services
    }
}

impl AdapterServices for Watched {
    fn get_env(&mut self, name: &str) -> Option<String> {
        self.asked().get_env(name)
    }
    fn environment(&mut self) -> Vec<(String, String)> {
        self.asked().environment()
    }
    fn which(&mut self, binary: &str) -> Option<String> {
        self.asked().which(binary)
    }
    fn run_declared_command(&mut self, item_id: &str) -> Result<String, String> {
        self.asked().run_declared_command(item_id)
    }
    fn read_config(&mut self, space: PluginSpace, path: &str) -> Result<Option<String>, String> {
        self.asked().read_config(space, path)
    }
    fn answers_at_once(&self) -> bool {
        self.services.answers_at_once()
    }
}
