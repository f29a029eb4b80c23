//! The host: one per process, holding the component host and every cache.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use rye_components::{ComponentError, ComponentHost, ValidatorInfo};
use rye_space::{Extractors, FileStamp, ItemKind, ListingCache, Spaces, same_dir};

use crate::cache::{ElementCache, Generational, Outcome, PARSE_CACHE_ENTRIES, ParseKey};
use crate::search_index::Index;
use crate::{HostError, RyeConfig};

/// The host. Share one per process (it is `Send + Sync`); it keeps the
/// compiled components and every cache.
pub struct Rye {
    pub(crate) components: Arc<ComponentHost>,
    system_base: PathBuf,
    pub(crate) user_base: Option<PathBuf>,
    pub(crate) parses: Mutex<Generational<ParseKey, Outcome>>,
    pub(crate) index: Mutex<Index>,
    pub(crate) listings: Arc<ListingCache>,
    pub(crate) elements: Mutex<ElementCache>,
    /// Chains and server items as last worked out, while nothing they
    /// were worked out from has changed.
    pub(crate) memos: crate::cache::Memos,
    /// Per project folder: is it the system space's source, is it the
    /// user base.
    projects: Mutex<HashMap<PathBuf, (bool, bool)>>,
    /// Extractors per set of candidate files, with the files' stamps.
    extractor_cache: Mutex<ExtractorCache>,
    /// The validator components each validators folder held when last
    /// listed.
    pub(crate) validator_listings: Mutex<ValidatorListings>,
    pub(crate) integrity: crate::trust_state::IntegrityState,
    pub(crate) key_dir: Option<PathBuf>,
    /// What each validator component says of itself, by content hash.
    pub(crate) validator_info: Mutex<HashMap<[u8; 32], Result<ValidatorInfo, ComponentError>>>,
    /// Validation results for `execute` and `sign`: by the validators'
    /// hashes and the subjects'.
    pub(crate) validations: Mutex<Generational<[u8; 32], Arc<Vec<crate::Finding>>>>,
    /// Warm sessions with MCP servers, shared by every call.
    pub(crate) mcp: rye_mcp_client::Pool,
    /// The programs stdio servers were found as on `PATH`.
    pub(crate) programs: crate::programs::Programs,
    /// This host's program, shown to adapters as `RYE_EXECUTABLE`.
    pub(crate) executable: Option<PathBuf>,
    /// The thread registries of the projects tools ran in.
    pub(crate) threads: Arc<crate::threads::Threads>,
    /// The host environment as adapters are shown it: read once, since
    /// the host never changes its own environment.
    pub(crate) adapter_env: std::sync::OnceLock<Result<Arc<AdapterEnv>, rye_gate::BadPattern>>,
}

/// The host environment less what the user withholds, with this host's
/// program as `RYE_EXECUTABLE`.
pub(crate) struct AdapterEnv {
    pub(crate) visible: Arc<Vec<(String, String)>>,
    /// The names withheld, never their values.
    pub(crate) withheld: Vec<String>,
}

/// The validator components found under a folder (name, path, sorted),
/// and every folder the search read.
#[derive(Clone, PartialEq)]
pub(crate) struct ValidatorListing {
    pub(crate) files: Arc<Vec<(String, PathBuf)>>,
    pub(crate) folders: Vec<PathBuf>,
}

/// Each validators folder's last listing, with the stamps of its folders.
type ValidatorListings = HashMap<PathBuf, (ValidatorListing, Vec<Option<FileStamp>>)>;

type ExtractorCache = HashMap<
    Vec<PathBuf>,
    (Vec<Option<FileStamp>>, Arc<Extractors>),
    foldhash::quality::RandomState,
>;

/// How long an MCP session may sit unused before it closes:
/// `RYE_MCP_IDLE_SECS`, else five minutes.
fn mcp_idle() -> std::time::Duration {
    std::env::var("RYE_MCP_IDLE_SECS")
        .ok()
        .and_then(|s| s.trim().parse::<f64>().ok())
        .filter(|s| *s >= 0.0 && s.is_finite())
        .map_or(
            std::time::Duration::from_secs(300),
            std::time::Duration::from_secs_f64,
        )
}

impl Rye {
    /// Closes the MCP sessions unused for longer than the idle time.
    pub fn close_idle_mcp_sessions(&self) {
        self.mcp.close_idle();
    }

    pub fn new(config: RyeConfig) -> Result<Self, HostError> {
        let key_dir = config.key_dir();
        let system_base = match config.system_base {
            Some(base) => base,
            None => rye_system::materialize(&config.cache_dir)
                .map_err(|e| HostError::io(&config.cache_dir, e))?,
        };
        let components = ComponentHost::new(config.components)
            .map_err(|e| HostError::Engine(format!("{e:#}")))?;
        let listings = Arc::new(if config.watch {
            ListingCache::new()
        } else if config.snapshot {
            ListingCache::snapshot()
        } else {
            ListingCache::unwatched()
        });
        components.share_stamps(listings.clone());
        Ok(Self {
            components: Arc::new(components),
            system_base,
            user_base: config.user_base,
            parses: Mutex::new(Generational::new(PARSE_CACHE_ENTRIES)),
            index: Mutex::default(),
            listings,
            elements: Mutex::default(),
            memos: crate::cache::Memos::default(),
            projects: Mutex::default(),
            extractor_cache: Mutex::default(),
            validator_listings: Mutex::default(),
            integrity: crate::trust_state::IntegrityState::new(
                config.integrity,
                config.trusted_keys,
            ),
            key_dir,
            validator_info: Mutex::default(),
            validations: Mutex::new(Generational::new(crate::cache::VALIDATION_CACHE_ENTRIES)),
            mcp: rye_mcp_client::Pool::new(mcp_idle()),
            programs: crate::programs::Programs::default(),
            executable: config.executable,
            threads: Arc::new(crate::threads::Threads::new(config.record_threads)),
            adapter_env: std::sync::OnceLock::new(),
        })
    }

    /// The base of the system space in use.
    pub fn system_base(&self) -> &Path {
        &self.system_base
    }

    /// The component host, for callers that load components directly.
    pub fn components(&self) -> &ComponentHost {
        &self.components
    }

    /// The spaces for a request about `project` (a folder holding `.ai/`).
    ///
    /// A project whose `.ai/` is the system space's own (or the folder the
    /// embedded system space was built from, i.e. the Rye repository) has
    /// no separate project space: its items are the system items.
    pub fn spaces(&self, project: Option<&Path>) -> Spaces {
        let Some(project) = project else {
            return Spaces::from_bases(None, self.user_base.as_deref(), &self.system_base);
        };
        let known = self
            .projects
            .lock()
            .expect("project cache lock")
            .get(project)
            .copied();
        let (is_system, is_user) = known.unwrap_or_else(|| {
            let is_system = same_dir(&project.join(".ai"), &self.system_base.join(".ai"))
                || same_dir(&project.join(".ai"), rye_system::source_dir());
            let is_user = self
                .user_base
                .as_deref()
                .is_some_and(|user| same_dir(project, user));
            // Only answers about folders that exist are kept: a project
            // folder may be created later.
            if project.is_dir() {
                self.projects
                    .lock()
                    .expect("project cache lock")
                    .insert(project.to_owned(), (is_system, is_user));
            }
            (is_system, is_user)
        });
        let user = self.user_base.as_deref().filter(|_| !is_user);
        Spaces::from_bases((!is_system).then_some(project), user, &self.system_base)
    }

    /// The extractors in effect for `spaces`, re-read only when one of
    /// their files appeared, changed or went away.
    pub(crate) fn extractors(&self, spaces: &Spaces) -> Result<Arc<Extractors>, HostError> {
        let candidates: Vec<PathBuf> = spaces
            .roots()
            .iter()
            .flat_map(|root| ItemKind::PRIMARY.map(|kind| Extractors::path_in(&root.ai_dir, kind)))
            .collect();
        let stamps = self.listings.stamps(&candidates);
        if let Some((known, extractors)) = self
            .extractor_cache
            .lock()
            .expect("extractor cache lock")
            .get(&candidates)
            && **known == *stamps
        {
            return Ok(extractors.clone());
        }
        let extractors = Arc::new(Extractors::load(spaces)?);
        self.extractor_cache
            .lock()
            .expect("extractor cache lock")
            .insert(candidates, (stamps.to_vec(), extractors.clone()));
        Ok(extractors)
    }
}
