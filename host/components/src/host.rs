use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use rye_space::{FileStamp, ListingCache};

use sha2::{Digest, Sha256};
use wasmtime::component::{Component, Linker};
use wasmtime::{Config, Engine, InstanceAllocationStrategy, PoolingAllocationConfig, Store};

use crate::bindings;
use crate::cache::ArtifactCache;
use crate::error::{ComponentError, ComponentErrorKind};
use crate::limits::Limits;
use crate::sandbox::CallState;
use crate::world::{CONTRACT_VERSION, World, contract_exports};

/// Bytes of each pooled linear memory kept resident between calls.
const KEEP_RESIDENT: usize = 512 << 10;

/// How often the engine's epoch advances. A deadline is enforced to within
/// one tick; ticks much shorter than this cost measurable time.
const EPOCH_TICK: Duration = Duration::from_millis(100);

/// The largest memory cap any world may be given while the pooling
/// allocator is in use (it reserves address space for this much per slot).
const POOL_MAX_MEMORY: usize = 256 * 1024 * 1024;

/// Finds the artifact built into the binary for the component whose
/// SHA-256 is given.
pub type Precompiled = fn(&[u8; 32]) -> Option<&'static [u8]>;

/// How the host is set up.
#[derive(Debug, Clone)]
pub struct HostConfig {
    /// Where compiled components are kept between processes; `None`
    /// compiles in every process.
    pub cache_dir: Option<PathBuf>,
    /// The file holding the secret that authenticates cached artifacts,
    /// made on first use. It must live outside `cache_dir`: whoever can
    /// write both can make the host run their code. Without it nothing is
    /// cached.
    pub cache_key_file: Option<PathBuf>,
    /// Limits per world.
    pub parser_limits: Limits,
    pub adapter_limits: Limits,
    pub validator_limits: Limits,
    /// For each call of a graph walker (one decision); its memory is
    /// the run's.
    pub walker_limits: Limits,
    /// Graph walkers alive at once (each walks one run, for as long as
    /// the run lasts).
    pub max_walkers: usize,
    /// Try the pooling instance allocator (faster instantiation); it is used
    /// only if the machine lets the engine reserve its address space.
    pub pooling: bool,
    /// How many instances of one world may run at once (each may use its
    /// world's memory cap); further calls wait. `0` means twice the
    /// machine's cores, at least 4.
    pub instances_per_world: usize,
    /// Components compiled when the binary was built, by the SHA-256 of
    /// the component: tried before the cache and the compiler. Their
    /// bytes are as trusted as the binary that holds them; one the engine
    /// refuses (another CPU, other settings) is compiled as usual.
    pub precompiled: Option<Precompiled>,
    /// Make each adapter instance ahead of its plan, and drop the spent
    /// one, on a thread of the host's: for a host that plans again and
    /// again (a server); a one-command process would make a spare it never
    /// uses.
    pub spares: bool,
}

impl Default for HostConfig {
    fn default() -> Self {
        Self {
            cache_dir: None,
            cache_key_file: None,
            parser_limits: Limits::default(),
            // An adapter may wait on the host: a `which`, an interpreter's
            // resolve command.
            adapter_limits: Limits {
                deadline: Duration::from_secs(5),
                ..Limits::default()
            },
            validator_limits: Limits::default(),
            walker_limits: Limits::default(),
            max_walkers: 256,
            pooling: true,
            instances_per_world: 0,
            precompiled: None,
            spares: false,
        }
    }
}

impl HostConfig {
    pub fn limits(&self, world: World) -> Limits {
        match world {
            World::Parser => self.parser_limits,
            World::RuntimeAdapter => self.adapter_limits,
            World::Validator => self.validator_limits,
            World::GraphWalker => self.walker_limits,
        }
    }
}

/// Where a loaded component's machine code came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// Compiled in this process.
    Compiled,
    /// Deserialized from the on-disk cache.
    Cache,
    /// Deserialized from the artifact built into the binary.
    Bundled,
}

/// A component checked against its world and ready to instantiate.
pub struct LoadedComponent {
    pub path: PathBuf,
    /// SHA-256 of the component's bytes.
    pub hash: [u8; 32],
    pub world: World,
    pub origin: Origin,
    pub(crate) pre: Pre,
}

pub(crate) enum Pre {
    Parser(bindings::parser::ParserPre<CallState>),
    Adapter(bindings::adapter::RuntimeAdapterPre<CallState>),
    Validator(bindings::validator::ValidatorPre<CallState>),
    Walker(bindings::walker::GraphWalkerPre<CallState>),
}

impl std::fmt::Debug for LoadedComponent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoadedComponent")
            .field("path", &self.path)
            .field("hash", &hex::encode(self.hash))
            .field("world", &self.world)
            .field("origin", &self.origin)
            .finish()
    }
}

/// A tool's component compiled and ready to instantiate: a `wasi:cli`
/// command or a component of the `tool` world.
pub struct LoadedCommand {
    pub path: PathBuf,
    /// SHA-256 of the component's bytes.
    pub hash: [u8; 32],
    pub origin: Origin,
    pub(crate) pre: crate::entry::Entry,
    /// A `wasi:cli` command's entry for runs on async tasks.
    pub(crate) run_async: Option<wasmtime_wasi::p2::bindings::CommandPre<CallState>>,
}

impl LoadedCommand {
    /// Whether it is a component of the `tool` world (else a command).
    pub fn is_typed(&self) -> bool {
        matches!(self.pre, crate::entry::Entry::Tool(_))
    }
}

impl std::fmt::Debug for LoadedCommand {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoadedCommand")
            .field("path", &self.path)
            .field("hash", &hex::encode(self.hash))
            .field("origin", &self.origin)
            .finish()
    }
}

/// The linker of command tools: WASI and outgoing `wasi:http`, whose
/// grants each run's context makes; nothing of `rye:plugin`.
pub(crate) fn command_linker(
    engine: &wasmtime::Engine,
) -> Result<Linker<CallState>, wasmtime::Error> {
    let mut linker = Linker::new(engine);
    wasmtime_wasi::p2::add_to_linker_sync(&mut linker)?;
    wasmtime_wasi_http::p2::add_only_http_to_linker_sync(&mut linker)?;
    Ok(linker)
}

/// The same imports for a command run on its caller's async task.
fn command_linker_async(engine: &wasmtime::Engine) -> Result<Linker<CallState>, wasmtime::Error> {
    let mut linker = Linker::new(engine);
    wasmtime_wasi::p2::add_to_linker_async(&mut linker)?;
    wasmtime_wasi_http::p2::add_only_http_to_linker_async(&mut linker)?;
    Ok(linker)
}

/// How many command tools may run on async tasks at once, each on a fiber
/// stack of the pool; more run on blocking threads.
pub(crate) const ASYNC_RUNS: usize = 16;

/// One of the [`ASYNC_RUNS`] (or of the plans made on async tasks), held
/// while it runs.
pub(crate) struct AsyncPermit(Arc<AtomicUsize>);

impl AsyncPermit {
    /// One of `count`'s permits, if fewer than `bound` are held.
    fn take(count: &Arc<AtomicUsize>, bound: usize) -> Option<Self> {
        use std::sync::atomic::Ordering;
        count
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < bound).then_some(n + 1)
            })
            .ok()
            .map(|_| Self(Arc::clone(count)))
    }
}

impl Drop for AsyncPermit {
    fn drop(&mut self) {
        self.0.fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
    }
}

type LoadResult = Result<Arc<LoadedComponent>, ComponentErrorKind>;

/// The component host. Cheap to share: wrap it in an `Arc`; every method
/// takes `&self` and may be called from many threads at once.
pub struct ComponentHost {
    engine: Engine,
    /// One linker per world, in [`World::ALL`] order, linking what the
    /// gate grants that world.
    linkers: Vec<Linker<CallState>>,
    config: HostConfig,
    pooling: bool,
    cache: Option<ArtifactCache>,
    hashes: Mutex<HashMap<PathBuf, (FileStamp, [u8; 32])>>,
    /// Where a component file's stamp comes from, once the host using
    /// this one shares its watches; until then each is `stat`ed.
    stamps: OnceLock<Arc<ListingCache>>,
    loaded: Mutex<HashMap<([u8; 32], World), LoadResult>>,
    /// Instance slots of each world, in [`World::ALL`] order.
    slots: Vec<Arc<crate::slots::Slots>>,
    /// The linker of command tools, and the tools loaded, by hash.
    commands: Linker<CallState>,
    commands_async: Linker<CallState>,
    loaded_commands: Mutex<HashMap<[u8; 32], Arc<LoadedCommand>>>,
    /// Commands running on async tasks now.
    async_runs: Arc<AtomicUsize>,
    /// An instance of the last adapter planned with, made ahead.
    pub(crate) spares: crate::spare::Spares,
    /// Tool calls adapters planned that may be made again with other
    /// parameters.
    pub(crate) reusable: crate::plans::ReusablePlans,
}

impl ComponentHost {
    pub fn new(config: HostConfig) -> Result<Self, wasmtime::Error> {
        let (engine, pooling) = build_engine(&config)?;
        let linkers = World::ALL
            .into_iter()
            .map(|world| world_linker(&engine, world))
            .collect::<Result<Vec<_>, _>>()?;
        let cache = match (&config.cache_dir, &config.cache_key_file) {
            (Some(dir), Some(key)) => ArtifactCache::new(dir.clone(), key, &engine),
            _ => None,
        };
        start_epoch_ticker(&engine);
        let per_world = instances_per_world(&config);
        let slots = World::ALL
            .iter()
            .map(|world| match world {
                World::GraphWalker => crate::slots::Slots::new(config.max_walkers),
                _ => crate::slots::Slots::new(per_world),
            })
            .collect();
        let commands = command_linker(&engine)?;
        let commands_async = command_linker_async(&engine)?;
        Ok(Self {
            slots,
            commands,
            commands_async,
            async_runs: Arc::default(),
            spares: crate::spare::Spares::default(),
            reusable: Default::default(),
            loaded_commands: Mutex::default(),
            engine,
            linkers,
            config,
            pooling,
            cache,
            hashes: Mutex::default(),
            stamps: OnceLock::new(),
            loaded: Mutex::default(),
        })
    }

    /// Whether the pooling allocator is in use (it needs address space the
    /// machine may not grant).
    pub fn pooling(&self) -> bool {
        self.pooling
    }

    pub fn config(&self) -> &HostConfig {
        &self.config
    }

    /// Loads the component at `path` as a `world` component: reads it
    /// (reusing the last hash while the file is unchanged), compiles or
    /// deserializes it, checks its contract version, world and imports,
    /// and pre-instantiates it. Results, failures included, are kept by
    /// content hash, so a second load of the same bytes costs a `stat`.
    pub fn load(&self, path: &Path, world: World) -> Result<Arc<LoadedComponent>, ComponentError> {
        self.load_checked(path, world, |_| Ok::<(), std::convert::Infallible>(()))
            .map(|loaded| match loaded {
                Ok(loaded) => loaded,
            })
    }

    /// Like [`ComponentHost::load`], but first hands the component's
    /// content hash to `check` (a signature check, say): if it refuses, the
    /// component is neither compiled nor instantiated and its answer is
    /// returned. The bytes compiled are the bytes `check` approved; a file
    /// that changes in between is an error.
    pub fn load_checked<E>(
        &self,
        path: &Path,
        world: World,
        check: impl FnOnce(&[u8; 32]) -> Result<(), E>,
    ) -> Result<Result<Arc<LoadedComponent>, E>, ComponentError> {
        let fail = |kind| ComponentError {
            path: path.to_owned(),
            kind,
        };
        let (hash, bytes) = self.hash_file(path).map_err(fail)?;
        if let Err(refused) = check(&hash) {
            return Ok(Err(refused));
        }
        if let Some(found) = self
            .loaded
            .lock()
            .expect("load cache lock")
            .get(&(hash, world))
        {
            return found.clone().map(Ok).map_err(fail);
        }
        let bytes = match bytes {
            Some(bytes) => bytes,
            None => self.read_again(path, &hash).map_err(fail)?,
        };
        let result = self.prepare(path, &bytes, hash, world).map(Arc::new);
        self.loaded
            .lock()
            .expect("load cache lock")
            .insert((hash, world), result.clone());
        result.map(Ok).map_err(fail)
    }

    /// The bytes of `path`, which must still hash to `hash`.
    pub(crate) fn read_again(
        &self,
        path: &Path,
        hash: &[u8; 32],
    ) -> Result<Vec<u8>, ComponentErrorKind> {
        let bytes = std::fs::read(path).map_err(|e| ComponentErrorKind::Io(e.to_string()))?;
        if <[u8; 32]>::from(Sha256::digest(&bytes)) != *hash {
            return Err(ComponentErrorKind::Io(
                "the file changed while it was being loaded".into(),
            ));
        }
        Ok(bytes)
    }

    /// The component of `bytes`, checked to be one, compiled or from a
    /// cache.
    pub(crate) fn compile_bytes(
        &self,
        path: &Path,
        bytes: &[u8],
        hash: [u8; 32],
    ) -> Result<(Component, Origin), ComponentErrorKind> {
        check_header(bytes)?;
        self.compile(path, bytes, hash)
    }

    pub(crate) fn engine(&self) -> &Engine {
        &self.engine
    }

    pub(crate) fn command_linker(&self) -> &Linker<CallState> {
        &self.commands
    }

    pub(crate) fn command_linker_async(&self) -> &Linker<CallState> {
        &self.commands_async
    }

    /// One of the [`ASYNC_RUNS`], if one is free.
    pub(crate) fn async_permit(&self) -> Option<AsyncPermit> {
        AsyncPermit::take(&self.async_runs, ASYNC_RUNS)
    }

    pub(crate) fn known_command(&self, hash: &[u8; 32]) -> Option<Arc<LoadedCommand>> {
        self.loaded_commands
            .lock()
            .expect("command cache lock")
            .get(hash)
            .cloned()
    }

    pub(crate) fn keep_command(&self, hash: [u8; 32], loaded: Arc<LoadedCommand>) {
        self.loaded_commands
            .lock()
            .expect("command cache lock")
            .insert(hash, loaded);
    }

    /// A store around `state` with `deadline` armed and its memory cap
    /// enforced; no world's slot.
    pub(crate) fn deadline_store(&self, state: CallState, deadline: Duration) -> Store<CallState> {
        deadline_store(&self.engine, state, deadline)
    }

    /// Takes component files' stamps from `listings`, whose watches then
    /// spare a `stat` of each file on every load (the first call wins).
    pub fn share_stamps(&self, listings: Arc<ListingCache>) {
        let _ = self.stamps.set(listings);
    }

    /// The content hash of `path`, and its bytes if they had to be read.
    pub(crate) fn hash_file(
        &self,
        path: &Path,
    ) -> Result<([u8; 32], Option<Vec<u8>>), ComponentErrorKind> {
        let io = |e: std::io::Error| ComponentErrorKind::Io(e.to_string());
        let stamp = match self.stamps.get() {
            Some(listings) => listings.stamp(path),
            None => FileStamp::read(path),
        }
        .map_err(io)?;
        if let Some((known, hash)) = self.hashes.lock().expect("hash cache lock").get(path)
            && *known == stamp
        {
            return Ok((*hash, None));
        }
        let bytes = std::fs::read(path).map_err(io)?;
        let hash: [u8; 32] = Sha256::digest(&bytes).into();
        self.hashes
            .lock()
            .expect("hash cache lock")
            .insert(path.to_owned(), (stamp, hash));
        Ok((hash, Some(bytes)))
    }

    fn prepare(
        &self,
        path: &Path,
        bytes: &[u8],
        hash: [u8; 32],
        world: World,
    ) -> Result<LoadedComponent, ComponentErrorKind> {
        let (component, origin) = self.compile_bytes(path, bytes, hash)?;
        self.check_world(&component, world)?;
        check_imports(&component, &self.engine, world)?;
        let instance_pre = self.linkers[world_index(world)]
            .instantiate_pre(&component)
            .map_err(|e| ComponentErrorKind::Import(format!("{e:#}")))?;
        let pre = match world {
            World::Parser => Pre::Parser(
                bindings::parser::ParserPre::new(instance_pre)
                    .map_err(|e| ComponentErrorKind::Signature(format!("{e:#}")))?,
            ),
            World::RuntimeAdapter => Pre::Adapter(
                bindings::adapter::RuntimeAdapterPre::new(instance_pre)
                    .map_err(|e| ComponentErrorKind::Signature(format!("{e:#}")))?,
            ),
            World::Validator => Pre::Validator(
                bindings::validator::ValidatorPre::new(instance_pre)
                    .map_err(|e| ComponentErrorKind::Signature(format!("{e:#}")))?,
            ),
            World::GraphWalker => Pre::Walker(
                bindings::walker::GraphWalkerPre::new(instance_pre)
                    .map_err(|e| ComponentErrorKind::Signature(format!("{e:#}")))?,
            ),
        };
        Ok(LoadedComponent {
            path: path.to_owned(),
            hash,
            world,
            origin,
            pre,
        })
    }

    /// The component of `bytes` (whose SHA-256 is `hash`): deserialized
    /// from the on-disk cache, or compiled and stored there.
    fn compile(
        &self,
        path: &Path,
        bytes: &[u8],
        hash: [u8; 32],
    ) -> Result<(Component, Origin), ComponentErrorKind> {
        if let Some(artifact) = self.config.precompiled.and_then(|find| find(&hash)) {
            // SAFETY: the artifact is part of this binary, made by the
            // build from the component whose hash it is found under, and
            // wasmtime checks that it was compiled for this engine's
            // settings and CPU before using it.
            match unsafe { Component::deserialize(&self.engine, artifact) } {
                Ok(component) => {
                    tracing::debug!(path = %path.display(), "bundled component");
                    return Ok((component, Origin::Bundled));
                }
                Err(e) => {
                    tracing::debug!(path = %path.display(), error = %format!("{e:#}"), "bundled artifact refused; compiling");
                }
            }
        }
        if let Some(component) = self
            .cache
            .as_ref()
            .and_then(|c| c.load(&self.engine, &hash))
        {
            return Ok((component, Origin::Cache));
        }
        let started = std::time::Instant::now();
        let component = Component::new(&self.engine, bytes)
            .map_err(|e| ComponentErrorKind::Invalid(format!("{e:#}")))?;
        tracing::debug!(path = %path.display(), ms = started.elapsed().as_millis() as u64, "compiled component");
        if let Some(cache) = &self.cache {
            cache.store(&component, &hash);
        }
        Ok((component, Origin::Compiled))
    }

    fn check_world(&self, component: &Component, world: World) -> Result<(), ComponentErrorKind> {
        let ty = component.component_type();
        let exports = contract_exports(ty.exports(&self.engine).map(|(name, _)| name));
        if let Some(own) = exports.iter().find(|e| e.world == Some(world)) {
            if own.version != CONTRACT_VERSION {
                return Err(ComponentErrorKind::ContractVersion {
                    component: own.version.clone(),
                    host: CONTRACT_VERSION.to_owned(),
                });
            }
            return Ok(());
        }
        Err(ComponentErrorKind::WrongWorld {
            expected: world.name().to_owned(),
            found: exports
                .iter()
                .map(|e| match e.world {
                    Some(w) => format!("rye:plugin/{}@{} (the {w} world)", e.interface, e.version),
                    None => format!("rye:plugin/{}@{}", e.interface, e.version),
                })
                .collect(),
        })
    }

    /// A fresh store for one call of a `world` component, with that world's
    /// limits armed.
    pub(crate) fn store(&self, world: World) -> Store<CallState> {
        let limits = self.config.limits(world);
        self.store_with(world, CallState::sandboxed(limits.memory))
    }

    /// A store around `state` (built with the world's memory cap), with the
    /// world's deadline armed.
    /// The instance slots of `world`.
    pub(crate) fn slots_of(&self, world: World) -> &Arc<crate::slots::Slots> {
        &self.slots[world_index(world)]
    }

    pub(crate) fn store_with(&self, world: World, mut state: CallState) -> Store<CallState> {
        let limits = self.config.limits(world);
        state.slot = Some(self.slots[world_index(world)].take());
        state.world = Some(world);
        self.deadline_store(state, limits.deadline)
    }

    /// Turns a failed call into the error it really is.
    pub(crate) fn classify(
        &self,
        store: &Store<CallState>,
        world: World,
        error: wasmtime::Error,
    ) -> ComponentErrorKind {
        classify(store, self.config.limits(world), error)
    }

    /// A store for a graph walker: no deadline yet (each call arms its
    /// own), and a walker slot taken without waiting, since a run holds
    /// its walker for as long as it lasts.
    pub(crate) fn walker_store(&self) -> Result<Store<CallState>, ComponentErrorKind> {
        let limits = self.config.limits(World::GraphWalker);
        let mut state = CallState::sandboxed(limits.memory);
        state.slot = Some(
            self.slots[world_index(World::GraphWalker)]
                .try_take()
                .ok_or(ComponentErrorKind::Busy(self.config.max_walkers))?,
        );
        state.world = Some(World::GraphWalker);
        let mut store = Store::new(&self.engine, state);
        store.limiter(|state| &mut state.limiter);
        store.epoch_deadline_trap();
        arm_deadline(&mut store, limits);
        Ok(store)
    }
}

/// A store of `engine` around `state` with `deadline` armed and its
/// memory cap enforced.
pub(crate) fn deadline_store(
    engine: &Engine,
    state: CallState,
    deadline: Duration,
) -> Store<CallState> {
    let mut store = Store::new(engine, state);
    store.limiter(|state| &mut state.limiter);
    let ticks = deadline.as_nanos().div_ceil(EPOCH_TICK.as_nanos()) as u64;
    // One extra tick: the current one may be about to end.
    store.set_epoch_deadline(ticks + 1);
    store.epoch_deadline_trap();
    store
}

/// Arms the deadline of the next call in `store`.
pub(crate) fn arm_deadline(store: &mut Store<CallState>, limits: Limits) {
    let ticks = limits.deadline.as_nanos().div_ceil(EPOCH_TICK.as_nanos()) as u64;
    // One extra tick: the current one may be about to end.
    store.set_epoch_deadline(ticks + 1);
}

/// Turns a failed call into the error it really is.
pub(crate) fn classify(
    store: &Store<CallState>,
    limits: Limits,
    error: wasmtime::Error,
) -> ComponentErrorKind {
    {
        if store.data().limiter.exceeded {
            return ComponentErrorKind::MemoryLimit {
                limit: limits.memory,
            };
        }
        if error.downcast_ref::<wasmtime::Trap>() == Some(&wasmtime::Trap::Interrupt) {
            return ComponentErrorKind::Timeout(limits.deadline);
        }
        let message = match error.downcast_ref::<wasmtime::Trap>() {
            Some(trap) => trap.to_string(),
            None => format!("{error:#}"),
        };
        ComponentErrorKind::Trap {
            message,
            stderr: store.data().stderr_text(),
        }
    }
}

/// The linker of `world`: WASI (whose grants each call's context makes),
/// and `rye:plugin/host` only for a world the gate lets make host calls.
fn world_linker(engine: &Engine, world: World) -> Result<Linker<CallState>, wasmtime::Error> {
    let mut linker = Linker::new(engine);
    // An adapter is called asynchronously (see `ComponentHost::plan_async`),
    // and WASI's synchronous imports would block on the runtime it runs in.
    if world == World::RuntimeAdapter {
        wasmtime_wasi::p2::add_to_linker_async(&mut linker)?;
    } else {
        wasmtime_wasi::p2::add_to_linker_sync(&mut linker)?;
    }
    if world.links_host() {
        bindings::adapter::rye::plugin::host::add_to_linker::<
            CallState,
            wasmtime::component::HasSelf<CallState>,
        >(&mut linker, |state| state)?;
    }
    Ok(linker)
}

fn world_index(world: World) -> usize {
    World::ALL
        .iter()
        .position(|w| *w == world)
        .expect("every world is in World::ALL")
}

/// A clearer refusal than the linker's for a parser or validator that
/// imports `rye:plugin/host`: it wants more than its world grants.
fn check_imports(
    component: &Component,
    engine: &Engine,
    world: World,
) -> Result<(), ComponentErrorKind> {
    if world.links_host() {
        return Ok(());
    }
    let ty = component.component_type();
    let mut imports = ty.imports(engine).map(|(name, _)| name);
    match imports.find(|name| name.starts_with("rye:plugin/host")) {
        Some(name) => Err(ComponentErrorKind::Import(format!(
            "{name} is granted only to runtime adapters, not to a {world} component"
        ))),
        None => Ok(()),
    }
}

fn check_header(bytes: &[u8]) -> Result<(), ComponentErrorKind> {
    if bytes.len() < 8 || &bytes[..4] != b"\0asm" {
        return Err(ComponentErrorKind::NotWasm);
    }
    match bytes[4..8] {
        [1, 0, 0, 0] => Err(ComponentErrorKind::CoreModule),
        [_, _, 1, 0] => Ok(()),
        _ => Err(ComponentErrorKind::Invalid(format!(
            "unknown WebAssembly version/layer bytes {:02x?}",
            &bytes[4..8]
        ))),
    }
}

fn base_config() -> Config {
    let mut config = rye_engine::config();
    // `RYE_PERFMAP=1` writes /tmp/perf-<pid>.map so `perf` can name the
    // functions of guest code.
    if std::env::var_os("RYE_PERFMAP").is_some_and(|v| v == "1") {
        config.profiler(wasmtime::ProfilingStrategy::PerfMap);
    }
    config
}

/// An engine with the pooling allocator if asked for and the machine can
/// reserve its address space, else with on-demand allocation.
fn build_engine(host: &HostConfig) -> Result<(Engine, bool), wasmtime::Error> {
    if host.pooling {
        let max_memory = World::ALL
            .iter()
            .map(|w| host.limits(*w).memory)
            .max()
            .unwrap_or(0);
        if max_memory <= POOL_MAX_MEMORY {
            let mut pool = PoolingAllocationConfig::default();
            pool.total_component_instances(1000);
            pool.total_core_instances(4000);
            pool.total_memories(2000);
            pool.total_tables(4000);
            pool.max_memory_size(POOL_MAX_MEMORY);
            // Reset a freed slot's first pages with memset rather than
            // returning them to the kernel: a parser call touches a few
            // hundred KiB, and faulting them back in costs more than
            // clearing them.
            pool.linear_memory_keep_resident(KEEP_RESIDENT);
            pool.table_keep_resident(64 * 1024);
            // Where the kernel can say which pages a call touched (Linux
            // 6.7's PAGEMAP_SCAN), only those are reset, wherever they
            // lie: a component whose stack sits at the top of its first
            // mebibyte (Rust's default) no longer has half a mebibyte it
            // never touched cleared after every call, nor its stack pages
            // given back and faulted in again.
            pool.pagemap_scan(wasmtime::Enabled::Auto);
            pool.decommit_batch_size(32);
            // Async fiber stacks, which a store keeps once it has made an
            // async call: command tools on async tasks (see `ASYNC_RUNS`)
            // and adapter instances, at most one per adapter slot, the
            // spare and the spent ones (see `spare::stores_held`).
            // Preparing the default thousand (a guard page each) was most
            // of engine start.
            let adapters = instances_per_world(host) + crate::spare::stores_held();
            pool.total_stacks((ASYNC_RUNS + adapters) as u32);
            let mut config = base_config();
            config.allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
            match Engine::new(&config) {
                Ok(engine) => return Ok((engine, true)),
                Err(e) => {
                    tracing::info!(error = %e, "pooling allocator unavailable; allocating on demand")
                }
            }
        }
    }
    Ok((Engine::new(&base_config())?, false))
}

/// Instances of each world that may exist at once (see
/// [`HostConfig::instances_per_world`]).
fn instances_per_world(config: &HostConfig) -> usize {
    match config.instances_per_world {
        0 => (std::thread::available_parallelism().map_or(2, |n| n.get()) * 2).max(4),
        n => n,
    }
}

/// Polls `work` on the awaiting task until it ends or `ticked` turns true
/// (it yielded at an epoch tick); a `work` still going then goes on on a
/// blocking thread, so that it holds an async worker for one tick at
/// most. The error: its task there ended abnormally.
pub(crate) async fn on_task_until_tick<F>(
    mut work: std::pin::Pin<Box<F>>,
    ticked: &std::sync::atomic::AtomicBool,
) -> Result<F::Output, tokio::task::JoinError>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    use std::task::Poll;
    let inline = std::future::poll_fn(|cx| match work.as_mut().poll(cx) {
        Poll::Ready(done) => Poll::Ready(Some(done)),
        Poll::Pending if ticked.load(std::sync::atomic::Ordering::Acquire) => Poll::Ready(None),
        Poll::Pending => Poll::Pending,
    })
    .await;
    if let Some(done) = inline {
        return Ok(done);
    }
    let runtime = tokio::runtime::Handle::current();
    tokio::task::spawn_blocking(move || runtime.block_on(work)).await
}

/// Advances the engine's epoch every tick for as long as the engine lives.
fn start_epoch_ticker(engine: &Engine) {
    let weak = engine.weak();
    std::thread::Builder::new()
        .name("rye-epoch".into())
        .spawn(move || {
            loop {
                std::thread::sleep(EPOCH_TICK);
                match weak.upgrade() {
                    Some(engine) => engine.increment_epoch(),
                    None => return,
                }
            }
        })
        .expect("spawning the epoch thread");
}

/// What a component file is, as `rye component inspect` shows it.
#[derive(Debug, Clone)]
pub struct Inspection {
    pub path: PathBuf,
    pub size: u64,
    /// SHA-256 of the file.
    pub hash: [u8; 32],
    /// The world its exports make it, if any.
    pub world: Option<World>,
    /// What kind of tool it is, when it is one: `tool` (the `tool` world)
    /// or `command` (a `wasi:cli` command).
    pub tool: Option<&'static str>,
    /// The `rye:plugin` version of its exports.
    pub contract_version: Option<String>,
    pub exports: Vec<String>,
    pub imports: Vec<String>,
    /// Whether this host would load it as its world; the error says why not.
    pub loads: Result<(), ComponentErrorKind>,
}

impl ComponentHost {
    /// Reads what the component at `path` exports and imports, and checks
    /// that this host would load it as the world its exports name.
    pub fn inspect(&self, path: &Path) -> Result<Inspection, ComponentError> {
        let fail = |kind| ComponentError {
            path: path.to_owned(),
            kind,
        };
        let bytes = std::fs::read(path).map_err(|e| fail(ComponentErrorKind::Io(e.to_string())))?;
        check_header(&bytes).map_err(fail)?;
        let hash: [u8; 32] = Sha256::digest(&bytes).into();
        let (component, _) = self.compile(path, &bytes, hash).map_err(fail)?;
        let ty = component.component_type();
        let exports: Vec<String> = ty
            .exports(&self.engine)
            .map(|(n, _)| n.to_owned())
            .collect();
        let imports: Vec<String> = ty
            .imports(&self.engine)
            .map(|(n, _)| n.to_owned())
            .collect();
        let contract = contract_exports(exports.iter().map(String::as_str));
        let own = contract
            .iter()
            .find(|e| e.world.is_some() || e.interface == "running");
        let world = own.and_then(|e| e.world);
        let tool = match own {
            Some(e) if e.interface == "running" => Some("tool"),
            None if exports.iter().any(|e| e.starts_with("wasi:cli/run@")) => Some("command"),
            _ => None,
        };
        let loads = match (world, tool) {
            (Some(world), _) => self.load(path, world).map(|_| ()).map_err(|e| e.kind),
            (None, Some(_)) => self
                .load_command(path, |_| Ok::<(), std::convert::Infallible>(()))
                .map(|_| ())
                .map_err(|e| e.kind),
            (None, None) => Err(ComponentErrorKind::WrongWorld {
                expected: "parser, runtime-adapter, validator, graph-walker or tool".into(),
                found: contract
                    .iter()
                    .map(|e| format!("rye:plugin/{}@{}", e.interface, e.version))
                    .collect(),
            }),
        };
        Ok(Inspection {
            path: path.to_owned(),
            size: bytes.len() as u64,
            hash,
            world,
            tool,
            contract_version: own.map(|e| e.version.clone()),
            exports,
            imports,
            loads,
        })
    }
}
