//! The client side: which nodes a project knows (`remotes.yaml`), the
//! node's key pinned on first use, and pushing, running, listing and
//! pulling over signed requests.
//!
//! A node's key is pinned in the user space's
//! `.ai/state/remotes/known_nodes.json` (name and address to
//! fingerprint), not among the keys trusted to sign items: a node proves
//! who answers, it does not vouch for items. A changed key is a hard
//! error naming the file to edit.
//!
//! A push sends only what the node lacks. The client keeps, per remote,
//! the snapshot the node last acknowledged and the manifests it named
//! (`.ai/objects/refs/remotes/<remote>.json`); a push asks `has` only
//! about what differs from those, so an unchanged project is one request,
//! and a project with a few changed items two (a `put` of what changed,
//! the manifest as a delta, and the `push`).
//!
//! [`Client::execute_here`] is a run as a user means it: push, run, and
//! pull back what the run folded into the node's head.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use rye_cas::{Cas, ContentHash, LocalStorage};
use rye_integrity::Keypair;
use rye_sync::auth;
use rye_sync::manifest::{self, SpaceKind};
use rye_sync::merge::{Tree, three_way};
use rye_sync::policy::{Policy, merge_into};
use rye_sync::stamps::{Stamp, Stamps};
use serde_json::{Map, Value, json};

use crate::keys;

/// The remotes file, relative to a space's `.ai/`.
pub const REMOTES_FILE: &str = "config/remotes/remotes.yaml";
/// The pins of node keys, relative to the user space's `.ai/`.
pub const KNOWN_NODES: &str = "state/remotes/known_nodes.json";

/// A pull reads the head again this many times when it moved on, and
/// its objects went, while they were fetched.
const PULL_TRIES: usize = 5;

/// Why a remote call failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("{0}")]
    Config(String),
    #[error(
        "the node {name} at {url} now shows key fp:{actual}, not the pinned fp:{pinned}: if the node's key was changed on purpose, remove its entry from {file} and connect again"
    )]
    KeyChanged {
        name: String,
        url: String,
        pinned: String,
        actual: String,
        file: String,
    },
    #[error("{url}: {message}")]
    Transport { url: String, message: String },
    /// The node answered with an error status.
    #[error("the node answered {status}: {}", body.get("error").and_then(Value::as_str).map_or_else(|| body.to_string(), str::to_owned))]
    Node { status: u16, body: Value },
    #[error("{0}")]
    Local(String),
    /// A manifest names an object the project's store lacks.
    #[error("{0}: the project's store (.ai/state/objects) lacks it")]
    NotStored(String),
}

fn local(e: impl std::fmt::Display) -> ClientError {
    ClientError::Local(e.to_string())
}

/// One configured remote.
#[derive(Debug, Clone, PartialEq)]
pub struct Remote {
    pub name: String,
    pub url: String,
    /// The node's fingerprint as configured (`fp:…`), if it is.
    pub node_id: Option<String>,
    pub timeout: Duration,
    /// The environment variable holding an API key (`rye_sk_…`) to send
    /// as a bearer token instead of signing requests, if one is named.
    pub key_env: Option<String>,
}

/// The remotes of the spaces whose `.ai/` folders are `spaces` (widest
/// first), merged as policies are (maps recurse, lists union, values
/// replace), and the project's path on nodes (`project_path`, else the
/// project folder's name).
pub fn remotes(spaces: &[&Path], project: &Path) -> Result<(Vec<Remote>, String), ClientError> {
    let mut merged = json!({});
    for space in spaces {
        let path = space.join(REMOTES_FILE);
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(ClientError::Config(format!("{}: {e}", path.display()))),
        };
        let value: Value = serde_yaml_ng::from_str(&text)
            .map_err(|e| ClientError::Config(format!("{}: {e}", path.display())))?;
        match value {
            Value::Null => {}
            value @ Value::Object(_) => merge_into(&mut merged, value),
            _ => {
                return Err(ClientError::Config(format!(
                    "{}: not a map of settings",
                    path.display()
                )));
            }
        }
    }
    let default_timeout = merged.pointer("/defaults/timeout").cloned();
    let mut out = Vec::new();
    if let Some(map) = merged.get("remotes") {
        let map = map
            .as_object()
            .ok_or_else(|| ClientError::Config(format!("{REMOTES_FILE}: remotes is not a map")))?;
        for (name, entry) in map {
            let bad =
                |what: &str| ClientError::Config(format!("{REMOTES_FILE}: remote {name}: {what}"));
            let url = entry
                .get("url")
                .and_then(Value::as_str)
                .ok_or_else(|| bad("no url"))?
                .trim_end_matches('/')
                .to_owned();
            if !(url.starts_with("http://") || url.starts_with("https://")) {
                return Err(bad("the url is not http:// or https://"));
            }
            let timeout = entry
                .get("timeout")
                .or(default_timeout.as_ref())
                .ok_or_else(|| bad("no timeout, and no defaults.timeout"))?;
            let timeout = timeout
                .as_f64()
                .filter(|t| *t > 0.0 && t.is_finite())
                .ok_or_else(|| bad("the timeout is not a positive number of seconds"))?;
            let node_id = match entry.get("node_id") {
                None | Some(Value::Null) => None,
                Some(Value::String(id)) if id.starts_with("fp:") => Some(id.clone()),
                Some(_) => return Err(bad("node_id is not fp:<fingerprint>")),
            };
            let key_env = match entry.get("key_env") {
                None | Some(Value::Null) => None,
                Some(Value::String(var))
                    if !var.is_empty()
                        && !var.starts_with(|c: char| c.is_ascii_digit())
                        && var.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') =>
                {
                    Some(var.clone())
                }
                Some(_) => return Err(bad("key_env is not the name of an environment variable")),
            };
            out.push(Remote {
                name: name.clone(),
                url,
                node_id,
                timeout: Duration::from_secs_f64(timeout),
                key_env,
            });
        }
    }
    let project_path = match merged.get("project_path") {
        Some(Value::String(path)) if !path.is_empty() => path.clone(),
        Some(_) => {
            return Err(ClientError::Config(format!(
                "{REMOTES_FILE}: project_path is not text"
            )));
        }
        None => std::fs::canonicalize(project)
            .ok()
            .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
            .unwrap_or_else(|| "project".to_owned()),
    };
    Ok((out, project_path))
}

/// The remote named `name` (or `default`, else the only one).
pub fn pick<'a>(remotes: &'a [Remote], name: Option<&str>) -> Result<&'a Remote, ClientError> {
    let found = match name {
        Some(name) => remotes.iter().find(|r| r.name == name),
        None => remotes
            .iter()
            .find(|r| r.name == "default")
            .or_else(|| (remotes.len() == 1).then(|| &remotes[0])),
    };
    found.ok_or_else(|| {
        let names: Vec<&str> = remotes.iter().map(|r| r.name.as_str()).collect();
        ClientError::Config(format!(
            "no remote {} in {REMOTES_FILE}; there {}",
            name.unwrap_or("default"),
            if names.is_empty() {
                "are none".to_owned()
            } else {
                format!("are: {}", names.join(", "))
            }
        ))
    })
}

/// How a client's requests say who sends them.
pub enum Credentials {
    /// Signed with this key (spec §8).
    Key(Box<Keypair>),
    /// An API key (`rye_sk_…`) sent as a bearer token.
    ApiKey(String),
}

/// A connection to one node, its key pinned.
pub struct Client {
    http: reqwest::Client,
    remote: Remote,
    credentials: Credentials,
    /// The node's fingerprint (without `fp:`).
    node: String,
    /// The node's limits, once known (from `/status`, or remembered
    /// from an earlier push).
    limits: std::sync::Mutex<Option<Limits>>,
    /// How many requests this client sent.
    pub requests: std::sync::atomic::AtomicUsize,
    /// The bytes of request bodies it sent.
    pub sent_bytes: std::sync::atomic::AtomicU64,
}

/// What a node takes in one request, as its `/status` advertises it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// The largest request body, in bytes.
    pub max_request_bytes: usize,
    /// The most hashes or entries in one request.
    pub max_batch: usize,
}

impl Limits {
    /// The limits in the `limits` of a `/status` answer (or of a ref).
    fn of(value: &Value) -> Option<Limits> {
        let number = |k: &str| value.get(k).and_then(Value::as_u64).map(|n| n as usize);
        Some(Limits {
            max_request_bytes: number("max_request_bytes")?.max(1),
            max_batch: number("max_batch")?.clamp(1, rye_sync::objects::MAX_BATCH),
        })
    }

    fn to_json(self) -> Value {
        json!({"max_request_bytes": self.max_request_bytes, "max_batch": self.max_batch})
    }

    /// Bytes of entries a body may carry: the limit less the envelope.
    fn body_budget(self) -> usize {
        self.max_request_bytes.saturating_sub(256).max(1)
    }

    /// How many hashes go in one `has` or `get` (each 67 bytes of JSON).
    fn hashes_per_request(self) -> usize {
        (self.body_budget() / 67).clamp(1, self.max_batch)
    }
}

/// 32 random hex digits, a request's nonce.
fn random_hex() -> String {
    let mut bytes = [0u8; 16];
    // Without randomness the time stands in: a nonce need only be unique.
    if getrandom::fill(&mut bytes).is_err() {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        bytes = nanos.to_le_bytes();
    }
    hex::encode(bytes)
}

/// The pinned fingerprints: `name url` to fingerprint.
fn read_pins(file: &Path) -> Result<BTreeMap<String, String>, ClientError> {
    match std::fs::read_to_string(file) {
        Ok(text) => serde_json::from_str(&text)
            .map_err(|e| ClientError::Config(format!("{}: {e}", file.display()))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(BTreeMap::new()),
        Err(e) => Err(ClientError::Config(format!("{}: {e}", file.display()))),
    }
}

fn write_json(file: &Path, value: &Value) -> Result<(), ClientError> {
    if let Some(parent) = file.parent() {
        std::fs::create_dir_all(parent).map_err(local)?;
    }
    // A name of this write's own: threads of one process (a server
    // running remote calls side by side) write the same files too.
    let temp = file.with_extension(format!("tmp.{}.{}", std::process::id(), random_hex()));
    std::fs::write(&temp, serde_json::to_vec_pretty(value).map_err(local)?).map_err(local)?;
    std::fs::rename(&temp, file).map_err(local)
}

impl Client {
    /// Connects to `remote` signing with `key`: the node's identity is
    /// fetched and checked, and pinned in `pins` (the known-nodes file)
    /// on first use; a pinned key that changed is a hard error.
    pub async fn connect(
        remote: &Remote,
        key: Keypair,
        pins: &Path,
    ) -> Result<Client, ClientError> {
        Self::connect_as(remote, Credentials::Key(Box::new(key)), pins).await
    }

    /// [`Client::connect`] sending requests with `credentials`.
    pub async fn connect_as(
        remote: &Remote,
        credentials: Credentials,
        pins: &Path,
    ) -> Result<Client, ClientError> {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let mut builder = reqwest::Client::builder()
            .timeout(remote.timeout)
            .connect_timeout(Duration::from_secs(10));
        if remote.url.starts_with("http://") {
            // No TLS to speak: the machine's certificates (milliseconds to
            // load) are not read.
            builder = builder.tls_certs_only(Vec::new());
        }
        let http = builder.build().map_err(|e| ClientError::Transport {
            url: remote.url.clone(),
            message: e.to_string(),
        })?;
        let mut client = Client {
            http,
            remote: remote.clone(),
            credentials,
            node: String::new(),
            limits: std::sync::Mutex::new(None),
            requests: Default::default(),
            sent_bytes: Default::default(),
        };
        let pin_key = format!("{} {}", remote.name, remote.url);
        let mut known = read_pins(pins)?;
        match known.get(&pin_key) {
            Some(pinned) => client.node = pinned.clone(),
            None => {
                let identity = client.identity().await?;
                if let Some(configured) = &remote.node_id
                    && configured.trim_start_matches("fp:") != identity
                {
                    return Err(ClientError::KeyChanged {
                        name: remote.name.clone(),
                        url: remote.url.clone(),
                        pinned: configured.trim_start_matches("fp:").to_owned(),
                        actual: identity,
                        file: format!("{REMOTES_FILE} (node_id)"),
                    });
                }
                known.insert(pin_key, identity.clone());
                write_json(pins, &json!(known))?;
                client.node = identity;
            }
        }
        Ok(client)
    }

    /// The node's key fingerprint, from its checked identity document.
    async fn identity(&self) -> Result<String, ClientError> {
        let (status, body) = self.send("GET", "/public-key", None, None, false).await?;
        if status != 200 {
            return Err(ClientError::Node { status, body });
        }
        let key = keys::check_public_key_document(&body).map_err(|e| ClientError::Transport {
            url: self.remote.url.clone(),
            message: e,
        })?;
        Ok(key.fingerprint().to_owned())
    }

    /// The node's box key, from its identity document checked to be
    /// signed by the key this client pinned: what secrets are sealed to.
    pub async fn box_key(&self) -> Result<[u8; 32], ClientError> {
        let (status, body) = self.send("GET", "/public-key", None, None, false).await?;
        if status != 200 {
            return Err(ClientError::Node { status, body });
        }
        let transport = |message: String| ClientError::Transport {
            url: self.remote.url.clone(),
            message,
        };
        let key = keys::check_public_key_document(&body).map_err(transport)?;
        if key.fingerprint() != self.node {
            return Err(transport(format!(
                "the node's identity is signed by fp:{}, not the pinned fp:{}",
                key.fingerprint(),
                self.node
            )));
        }
        let wire = body
            .get("box_key")
            .and_then(Value::as_str)
            .ok_or_else(|| transport("the node's identity names no box key".into()))?;
        rye_seal::read_wire(wire).map_err(|e| transport(e.to_string()))
    }

    /// `vars` sealed to the node's box key.
    pub async fn seal(
        &self,
        vars: &std::collections::BTreeMap<String, String>,
    ) -> Result<Value, ClientError> {
        let key = self.box_key().await?;
        rye_seal::seal(&key, vars).map_err(|e| ClientError::Local(e.to_string()))
    }

    /// The node's fingerprint this client signs for.
    pub fn node(&self) -> &str {
        &self.node
    }

    pub fn remote(&self) -> &Remote {
        &self.remote
    }

    /// The node's limits: as remembered, or asked of its `/status`.
    pub async fn limits(&self) -> Result<Limits, ClientError> {
        if let Some(known) = self.known_limits() {
            return Ok(known);
        }
        self.refresh_limits().await
    }

    /// The limits this client knows without asking.
    pub fn known_limits(&self) -> Option<Limits> {
        *self.limits.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Takes `limits` (remembered from an earlier push) as the node's.
    pub fn assume_limits(&self, limits: Limits) {
        *self.limits.lock().unwrap_or_else(|e| e.into_inner()) = Some(limits);
    }

    /// Asks the node's `/status` for its limits.
    async fn refresh_limits(&self) -> Result<Limits, ClientError> {
        let (status, body) = self.send("GET", "/status", None, None, false).await?;
        if status != 200 {
            return Err(ClientError::Node { status, body });
        }
        let limits = Limits::of(&body["limits"]).ok_or_else(|| ClientError::Transport {
            url: self.remote.url.clone(),
            message: "the node's /status advertises no limits".into(),
        })?;
        self.assume_limits(limits);
        Ok(limits)
    }

    async fn send(
        &self,
        method: &str,
        path: &str,
        query: Option<&str>,
        body: Option<&Value>,
        signed: bool,
    ) -> Result<(u16, Value), ClientError> {
        let bytes = body.map(|b| b.to_string().into_bytes()).unwrap_or_default();
        let url = match query {
            Some(q) => format!("{}{path}?{q}", self.remote.url),
            None => format!("{}{path}", self.remote.url),
        };
        let method_value = reqwest::Method::from_bytes(method.as_bytes()).map_err(local)?;
        let request = || {
            let mut request = self.http.request(method_value.clone(), &url);
            match &self.credentials {
                Credentials::Key(key) if signed => {
                    let now = SystemTime::now()
                        .duration_since(UNIX_EPOCH)
                        .map_or(0, |d| d.as_secs());
                    let signing = auth::Request {
                        method,
                        path,
                        query,
                        body: &bytes,
                    };
                    for (name, value) in auth::sign(key, &signing, &self.node, now, &random_hex()) {
                        request = request.header(name, value);
                    }
                }
                Credentials::ApiKey(token) if signed => {
                    request = request.bearer_auth(token);
                }
                _ => {}
            }
            if body.is_some() {
                request = request
                    .header("content-type", "application/json")
                    .body(bytes.clone());
            }
            self.requests
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            self.sent_bytes
                .fetch_add(bytes.len() as u64, std::sync::atomic::Ordering::Relaxed);
            request
        };
        let transport = |e: reqwest::Error| ClientError::Transport {
            url: url.clone(),
            message: e.to_string(),
        };
        let response = match request().send().await {
            // A kept connection the node closed meanwhile (as it does
            // after refusing a body too large) fails a request before any
            // answer; a GET changes nothing, so it goes once more, on a
            // new connection.
            Err(e) if method == "GET" && e.is_request() => request().send().await,
            sent => sent,
        }
        .map_err(transport)?;
        let status = response.status().as_u16();
        let text = response.bytes().await.map_err(transport)?;
        let value = serde_json::from_slice(&text)
            .unwrap_or_else(|_| json!({"error": String::from_utf8_lossy(&text).into_owned()}));
        Ok((status, value))
    }

    /// A signed call; an error status is an error, and a refusal of the
    /// signature checks whether the node's key changed.
    pub async fn call(
        &self,
        method: &str,
        path: &str,
        query: Option<&str>,
        body: Option<&Value>,
    ) -> Result<Value, ClientError> {
        let (status, value) = self.send(method, path, query, body, true).await?;
        if status == 401 {
            let actual = self.identity().await?;
            if actual != self.node {
                return Err(ClientError::KeyChanged {
                    name: self.remote.name.clone(),
                    url: self.remote.url.clone(),
                    pinned: self.node.clone(),
                    actual,
                    file: KNOWN_NODES.to_owned(),
                });
            }
        }
        if (200..300).contains(&status) {
            Ok(value)
        } else {
            Err(ClientError::Node {
                status,
                body: value,
            })
        }
    }
}

/// The local side of a run on a node: the project and user space as
/// they are here, the `.ai/` folders whose policy builds their manifests
/// (widest first), and the project's path on the node.
#[derive(Debug, Clone, Copy)]
pub struct Here<'a> {
    pub project: &'a Path,
    pub user: Option<&'a Path>,
    pub policy_spaces: &'a [&'a Path],
    pub project_path: &'a str,
}

/// What [`Client::execute_here`] does around a run.
#[derive(Clone, PartialEq, Eq)]
pub struct Around {
    /// Push the project first.
    pub push: bool,
    /// Pull what the run folded back.
    pub pull: bool,
    /// Secrets for the run's environment, sealed to the node's box key
    /// before they leave.
    pub secrets: std::collections::BTreeMap<String, String>,
    /// Names of secrets in the caller's vault on the node to give the run.
    pub vault_keys: Vec<String>,
    /// How many more times an async run may start if the replica running
    /// it dies: for items safe to run again from the start.
    pub retries: u64,
}

impl std::fmt::Debug for Around {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Around")
            .field("push", &self.push)
            .field("pull", &self.pull)
            .field("secrets", &self.secrets.keys().collect::<Vec<_>>())
            .field("vault_keys", &self.vault_keys)
            .field("retries", &self.retries)
            .finish()
    }
}

impl Default for Around {
    fn default() -> Self {
        Around {
            push: true,
            pull: true,
            secrets: std::collections::BTreeMap::new(),
            vault_keys: Vec::new(),
            retries: 0,
        }
    }
}

/// What a client remembers of a remote: the snapshot the node last
/// acknowledged and the manifests it named.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Ref {
    pub snapshot: Option<String>,
    pub project_manifest: Option<String>,
    pub user_manifest: Option<String>,
    pub user_revision: Option<i64>,
    /// The node's limits as last advertised.
    pub limits: Option<Limits>,
}

fn ref_file(project: &Path, remote: &str) -> PathBuf {
    project
        .join(".ai/objects/refs/remotes")
        .join(format!("{remote}.json"))
}

impl Ref {
    pub fn read(project: &Path, remote: &str) -> Result<Ref, ClientError> {
        let file = ref_file(project, remote);
        let value: Value = match std::fs::read_to_string(&file) {
            Ok(text) => serde_json::from_str(&text)
                .map_err(|e| ClientError::Local(format!("{}: {e}", file.display())))?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Ref::default()),
            Err(e) => return Err(ClientError::Local(format!("{}: {e}", file.display()))),
        };
        let text = |k: &str| value.get(k).and_then(Value::as_str).map(str::to_owned);
        Ok(Ref {
            snapshot: text("snapshot_hash"),
            project_manifest: text("project_manifest_hash"),
            user_manifest: text("user_manifest_hash"),
            user_revision: value.get("user_revision").and_then(Value::as_i64),
            limits: value.get("limits").and_then(Limits::of),
        })
    }

    pub fn write(&self, project: &Path, remote: &str) -> Result<(), ClientError> {
        write_json(
            &ref_file(project, remote),
            &json!({
                "snapshot_hash": self.snapshot,
                "project_manifest_hash": self.project_manifest,
                "user_manifest_hash": self.user_manifest,
                "user_revision": self.user_revision,
                "limits": self.limits.map(Limits::to_json),
            }),
        )
    }
}

/// A space's manifest as just built, with the stamps of this build and,
/// when they were trusted, of the last one.
struct SpaceBuilt {
    built: manifest::Built,
    before: Option<Stamps>,
    after: Arc<Stamps>,
    /// The stamps being written for the next build, beside the requests
    /// that follow the build.
    saving: Option<std::thread::JoinHandle<()>>,
    /// Where the stamps are kept.
    file: PathBuf,
}

impl SpaceBuilt {
    /// Waits until the stamps are written.
    fn saved(&mut self) {
        if let Some(saving) = self.saving.take() {
            let _ = saving.join();
        }
    }

    /// The stamps, once written.
    fn into_stamps(mut self) -> Stamps {
        self.saved();
        Arc::try_unwrap(self.after).unwrap_or_else(|shared| (*shared).clone())
    }
}

/// The manifest of the space at `root`, reading only the files the
/// stamps of its last build (when trusted) do not vouch for. The stamps
/// live in the project's store, so removing the store takes them along;
/// objects removed from it one by one surface as
/// [`ClientError::NotStored`], and the push builds again trusting none.
async fn build_space(
    cas: &Cas<LocalStorage>,
    root: &Path,
    space: SpaceKind,
    policy: &Policy,
    trust_stamps: bool,
) -> Result<SpaceBuilt, ClientError> {
    let file = stamps_file(cas, root, space);
    let before = if trust_stamps {
        Stamps::load(&file)
    } else {
        None
    };
    let (built, after) = manifest::build_stamped(cas, root, space, policy, before.as_ref())
        .await
        .map_err(local)?;
    // Only a cache: a build that cannot keep its stamps costs the next
    // build a full read, nothing more. Stamps that would say again what
    // the file says are not written; others are written while the build
    // is sent.
    let after = Arc::new(after);
    let saving = if before.as_ref().is_some_and(|k| after.says_what(k)) {
        None
    } else {
        let (stamps, file) = (Arc::clone(&after), file.clone());
        std::thread::Builder::new()
            .name("rye-stamps".into())
            .spawn(move || {
                let _ = stamps.save(&file);
            })
            .ok()
    };
    Ok(SpaceBuilt {
        built,
        before,
        after,
        saving,
        file,
    })
}

/// Where the stamps of the space at `root` are kept.
fn stamps_file(cas: &Cas<LocalStorage>, root: &Path, space: SpaceKind) -> PathBuf {
    let at = root.canonicalize().unwrap_or_else(|_| root.to_owned());
    cas.storage().root().join("stamps").join(format!(
        "{}-{}.json",
        space.name(),
        &ContentHash::of(at.to_string_lossy().as_bytes()).hex()[..16]
    ))
}

/// The project's own store of objects.
pub fn local_cas(project: &Path) -> Cas<LocalStorage> {
    Cas::new(LocalStorage::new(project.join(".ai/state/objects")))
}

/// What a push did.
#[derive(Debug, Clone, PartialEq)]
pub struct Pushed {
    pub snapshot: String,
    pub project_manifest: String,
    pub user_manifest: Option<String>,
    /// Nothing changed since the last push: the node only confirmed it.
    pub unchanged: bool,
    /// Hashes asked about and objects sent.
    pub asked: usize,
    pub sent: usize,
    pub skipped: Vec<(String, &'static str)>,
}

/// The hashes of `space`'s manifest and of what it names that `known`
/// (the manifest the node acknowledged) does not; and when `known` is at
/// hand, the manifest as a delta from it. When the last build's stamps
/// make up `known`, the delta is read from the two sets of stamps;
/// otherwise `known` is read from the project's store.
async fn new_hashes(
    cas: &Cas<LocalStorage>,
    space: &SpaceBuilt,
    known: Option<&str>,
    out: &mut BTreeSet<String>,
) -> Result<Option<Value>, ClientError> {
    let hash = space.built.hash.hex();
    if known == Some(hash.as_str()) {
        return Ok(None);
    }
    out.insert(hash.clone());
    let read = |hash: ContentHash| async move {
        cas.get_object(&hash)
            .await
            .map_err(local)?
            .ok_or_else(|| ClientError::NotStored(format!("object {}", hash.hex())))
    };
    // What an item's hash brings: its `item_source` and that one's blob.
    let item = |hash: &str, out: &mut BTreeSet<String>| {
        let hash = hash.to_owned();
        let parsed = hash.parse::<ContentHash>().map_err(local);
        out.insert(hash);
        async move {
            let source = read(parsed?).await?;
            Ok::<_, ClientError>(
                source
                    .get("content_blob_hash")
                    .and_then(Value::as_str)
                    .map(str::to_owned),
            )
        }
    };
    if let Some(before) = &space.before
        && known.is_some()
        && before.manifest() == known
        && space.after.manifest() == Some(hash.as_str())
    {
        let changes = space.after.changes_since(before);
        let held: HashSet<&str> = if changes.is_empty() {
            HashSet::new()
        } else {
            before.entries().map(|(_, entry)| entry).collect()
        };
        let mut items = serde_json::Map::new();
        let mut files = serde_json::Map::new();
        for (path, entry) in changes {
            let is_item = path.starts_with(".ai/");
            if let Some(entry) = entry
                && !held.contains(entry)
            {
                if is_item {
                    if let Some(blob) = item(entry, out).await? {
                        out.insert(blob);
                    }
                } else {
                    out.insert(entry.to_owned());
                }
            }
            let side = if is_item { &mut items } else { &mut files };
            side.insert(path.to_owned(), entry.map_or(Value::Null, Value::from));
        }
        return Ok(Some(json!({"base": known, "items": items, "files": files})));
    }
    let new = Tree::of_manifest(&space.built.manifest);
    let known_value = match known.and_then(|k| k.parse::<ContentHash>().ok()) {
        Some(hash) => cas.get_object(&hash).await.map_err(local)?,
        None => None,
    };
    let old = known_value
        .as_ref()
        .map(Tree::of_manifest)
        .unwrap_or_default();
    let known_items: BTreeSet<&String> = old.items.values().collect();
    let known_files: BTreeSet<&String> = old.files.values().collect();
    for hash in new.items.values() {
        if !known_items.contains(hash)
            && let Some(blob) = item(hash, out).await?
        {
            out.insert(blob);
        }
    }
    for hash in new.files.values() {
        if !known_files.contains(hash) {
            out.insert(hash.clone());
        }
    }
    let delta = known_value.map(|_| {
        let changes = |old: &BTreeMap<String, String>, new: &BTreeMap<String, String>| {
            let mut changed = serde_json::Map::new();
            for (path, hash) in new {
                if old.get(path) != Some(hash) {
                    changed.insert(path.clone(), json!(hash));
                }
            }
            for path in old.keys() {
                if !new.contains_key(path) {
                    changed.insert(path.clone(), Value::Null);
                }
            }
            Value::Object(changed)
        };
        json!({"base": known, "items": changes(&old.items, &new.items),
               "files": changes(&old.files, &new.files)})
    });
    Ok(delta)
}

impl Client {
    /// Sends the hashes `wanted` the node lacks: `has` then `put`, each
    /// split to the node's limits. How many were asked about and sent.
    async fn send_missing(
        &self,
        cas: &Cas<LocalStorage>,
        wanted: &BTreeSet<String>,
        deltas: &BTreeMap<String, Value>,
        ask_first: bool,
    ) -> Result<usize, ClientError> {
        let wanted: Vec<&String> = wanted.iter().collect();
        let mut missing = Vec::new();
        if !ask_first {
            missing.extend(wanted.iter().map(|h| (*h).clone()));
        }
        let mut limits = self.limits().await?;
        for batch in wanted
            .chunks(limits.hashes_per_request())
            .filter(|_| ask_first)
        {
            let answer = self
                .call(
                    "POST",
                    "/objects/has",
                    None,
                    Some(&json!({"hashes": batch})),
                )
                .await?;
            for hash in answer
                .get("missing")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                if let Some(hash) = hash.as_str() {
                    missing.push(hash.to_owned());
                }
            }
        }
        let mut entries: Vec<(Value, usize)> = Vec::new();
        let mut size = 0usize;
        let mut sent = 0;
        for hash in &missing {
            if let Some(delta) = deltas.get(hash) {
                let entry = json!({"hash": hash, "kind": "object", "delta": delta});
                let cost = entry.to_string().len() + 1;
                self.fill(
                    &mut entries,
                    &mut size,
                    &mut sent,
                    &mut limits,
                    (entry, cost),
                )
                .await?;
                continue;
            }
            let parsed: ContentHash = hash.parse().map_err(local)?;
            let (kind, bytes) = match cas.get_blob(&parsed).await.map_err(local)? {
                Some(bytes) => ("blob", bytes),
                None => match cas.get_object(&parsed).await.map_err(local)? {
                    Some(value) => ("object", rye_cas::canonical::to_vec(&value)),
                    None => {
                        return Err(ClientError::NotStored(format!("the node lacks {hash}")));
                    }
                },
            };
            // UTF-8 goes as it is; anything else as base64.
            let (field, data) = match String::from_utf8(bytes) {
                Ok(text) => ("text", text),
                Err(e) => (
                    "data",
                    base64::engine::general_purpose::STANDARD.encode(e.as_bytes()),
                ),
            };
            let entry = json!({"hash": hash, "kind": kind, field: data});
            let cost = entry.to_string().len() + 1;
            if cost > limits.body_budget() {
                return Err(ClientError::Local(format!(
                    "{hash} ({} bytes as sent) is larger than the {} bytes {} takes in one request",
                    cost, limits.max_request_bytes, self.remote.name
                )));
            }
            self.fill(
                &mut entries,
                &mut size,
                &mut sent,
                &mut limits,
                (entry, cost),
            )
            .await?;
        }
        if !entries.is_empty() {
            sent += self
                .put_entries(std::mem::take(&mut entries), &mut limits)
                .await?;
        }
        Ok(sent)
    }

    /// Adds `entry` (with its cost in bytes) to the body being gathered,
    /// first sending what it holds when the entry would take it past the
    /// node's limits.
    async fn fill(
        &self,
        entries: &mut Vec<(Value, usize)>,
        size: &mut usize,
        sent: &mut usize,
        limits: &mut Limits,
        entry: (Value, usize),
    ) -> Result<(), ClientError> {
        let full = *size + entry.1 > limits.body_budget() || entries.len() >= limits.max_batch;
        if !entries.is_empty() && full {
            *sent += self.put_entries(std::mem::take(entries), limits).await?;
            *size = 0;
        }
        *size += entry.1;
        entries.push(entry);
        Ok(())
    }

    /// Sends `entries` in one `put`. A node that refuses the body as too
    /// large (413, or a connection it closed mid-body) has its limits
    /// asked again; when they shrank, the entries go again split to them.
    /// How many were sent.
    async fn put_entries(
        &self,
        entries: Vec<(Value, usize)>,
        limits: &mut Limits,
    ) -> Result<usize, ClientError> {
        let body = |part: &[(Value, usize)]| json!({"entries": part.iter().map(|(e, _)| e).collect::<Vec<_>>()});
        let refused = match self
            .call("POST", "/objects/put", None, Some(&body(&entries)))
            .await
        {
            Ok(_) => return Ok(entries.len()),
            Err(e @ (ClientError::Node { status: 413, .. } | ClientError::Transport { .. })) => e,
            Err(e) => return Err(e),
        };
        let fresh = self.refresh_limits().await?;
        if fresh.body_budget() >= limits.body_budget() && fresh.max_batch >= limits.max_batch {
            return Err(refused);
        }
        *limits = fresh;
        let mut parts: Vec<Vec<(Value, usize)>> = vec![Vec::new()];
        let mut size = 0;
        for (entry, cost) in entries {
            if cost > fresh.body_budget() {
                return Err(ClientError::Local(format!(
                    "{} ({cost} bytes as sent) is larger than the {} bytes {} takes in one request",
                    entry["hash"].as_str().unwrap_or_default(),
                    fresh.max_request_bytes,
                    self.remote.name
                )));
            }
            let last = parts.last_mut().expect("one part at least");
            if !last.is_empty()
                && (size + cost > fresh.body_budget() || last.len() >= fresh.max_batch)
            {
                parts.push(Vec::new());
                size = 0;
            }
            size += cost;
            parts
                .last_mut()
                .expect("one part at least")
                .push((entry, cost));
        }
        let mut sent = 0;
        for part in parts {
            self.call("POST", "/objects/put", None, Some(&body(&part)))
                .await?;
            sent += part.len();
        }
        Ok(sent)
    }

    /// Sends what the node lacks of the manifests `built` and `user` and
    /// all they name, knowing it holds `known_project` and `known_user`
    /// and all they name; how many hashes were asked about and sent.
    async fn send_content(
        &self,
        cas: &Cas<LocalStorage>,
        project: &SpaceBuilt,
        user: Option<&SpaceBuilt>,
        known_project: Option<&str>,
        known_user: Option<&str>,
    ) -> Result<(usize, usize), ClientError> {
        let mut wanted = BTreeSet::new();
        let mut deltas = BTreeMap::new();
        let delta = new_hashes(cas, project, known_project, &mut wanted).await?;
        // What changed since the node's acknowledgement is sent without
        // asking first: the node lacks it, but for a rare revert.
        let mut ask_first = true;
        if let Some(delta) = delta {
            deltas.insert(project.built.hash.hex(), delta);
            ask_first = false;
        }
        if let Some(u) = user {
            let delta = new_hashes(cas, u, known_user, &mut wanted).await?;
            let hash = u.built.hash.hex();
            match delta {
                Some(delta) => {
                    deltas.insert(hash, delta);
                }
                None if known_user != Some(hash.as_str()) => {
                    ask_first = true;
                }
                None => {}
            }
        }
        let asked = if ask_first { wanted.len() } else { 0 };
        let sent = if wanted.is_empty() {
            0
        } else {
            self.send_missing(cas, &wanted, &deltas, ask_first).await?
        };
        Ok((asked, sent))
    }

    /// Pushes the project at `project` (and the user space at `user`)
    /// under `project_path`, its manifests built with the policy of
    /// `policy_spaces` (`.ai/` folders, widest first).
    pub async fn push(
        &self,
        project: &Path,
        user: Option<&Path>,
        policy_spaces: &[&Path],
        project_path: &str,
    ) -> Result<Pushed, ClientError> {
        match self
            .push_built(project, user, policy_spaces, project_path, true)
            .await
        {
            // Stamps vouched for files whose objects have since left the
            // project's store: every file is read again.
            Err(ClientError::NotStored(_)) => {
                self.push_built(project, user, policy_spaces, project_path, false)
                    .await
            }
            other => other,
        }
    }

    /// [`Client::push`], the manifests built trusting the stamps of the
    /// last build or not.
    async fn push_built(
        &self,
        project: &Path,
        user: Option<&Path>,
        policy_spaces: &[&Path],
        project_path: &str,
        trust_stamps: bool,
    ) -> Result<Pushed, ClientError> {
        let policy = Policy::load(policy_spaces).map_err(local)?;
        let cas = local_cas(project);
        let mut last = Ref::read(project, &self.remote.name)?;
        if let Some(limits) = last.limits
            && self.known_limits().is_none()
        {
            self.assume_limits(limits);
        }
        let mut space =
            build_space(&cas, project, SpaceKind::Project, &policy, trust_stamps).await?;
        let built = &space.built;
        let mut skipped = built.skipped.clone();
        let mut user_built = match user.filter(|u| u.join(".ai").is_dir()) {
            Some(user) => {
                Some(build_space(&cas, user, SpaceKind::User, &policy, trust_stamps).await?)
            }
            None => None,
        };
        if let Some(u) = &user_built {
            skipped.extend(u.built.skipped.iter().cloned());
        }
        let (asked, sent) = match self
            .send_content(
                &cas,
                &space,
                user_built.as_ref(),
                last.project_manifest.as_deref(),
                last.user_manifest.as_deref(),
            )
            .await
        {
            // The node no longer holds what it acknowledged: everything is
            // offered again.
            Err(ClientError::Node { status: 400, .. })
                if last.project_manifest.is_some() || last.user_manifest.is_some() =>
            {
                last.project_manifest = None;
                last.user_manifest = None;
                self.send_content(&cas, &space, user_built.as_ref(), None, None)
                    .await?
            }
            other => other?,
        };
        if let Some(u) = user_built.as_ref().map(|u| &u.built)
            && last.user_manifest.as_deref() != Some(u.hash.hex().as_str())
        {
            let body = |expected: Option<i64>| json!({"user_manifest_hash": u.hash.hex(), "expected_revision": expected});
            let answer = match self
                .call(
                    "POST",
                    "/push/user-space",
                    None,
                    Some(&body(last.user_revision)),
                )
                .await
            {
                Err(ClientError::Node { status: 409, .. }) => {
                    // Another client pushed the user space: it is this
                    // user's own, so the newest push wins.
                    let now = self.call("GET", "/user-space", None, None).await.ok();
                    let revision = now.as_ref().and_then(|n| n["revision"].as_i64());
                    self.call("POST", "/push/user-space", None, Some(&body(revision)))
                        .await?
                }
                other => other?,
            };
            last.user_manifest = Some(u.hash.hex());
            last.user_revision = answer["revision"].as_i64();
        }
        let answer = self
            .call(
                "POST",
                "/push",
                None,
                Some(&json!({
                    "project_path": project_path,
                    "project_manifest_hash": built.hash.hex(),
                    "system_version": env!("CARGO_PKG_VERSION"),
                    "expected_snapshot_hash": last.snapshot,
                })),
            )
            .await?;
        let snapshot = answer["snapshot_hash"]
            .as_str()
            .ok_or_else(|| {
                ClientError::Local(format!("the node's push answer has no snapshot: {answer}"))
            })?
            .to_owned();
        let unchanged = answer["unchanged"].as_bool().unwrap_or(false);
        last.snapshot = Some(snapshot.clone());
        last.project_manifest = Some(built.hash.hex());
        last.limits = self.known_limits().or(last.limits);
        last.write(project, &self.remote.name)?;
        let pushed = Pushed {
            snapshot,
            project_manifest: built.hash.hex(),
            user_manifest: user_built.as_ref().map(|u| u.built.hash.hex()),
            unchanged,
            asked,
            sent,
            skipped,
        };
        space.saved();
        if let Some(u) = user_built.as_mut() {
            u.saved();
        }
        // A large space's manifest and stamps take milliseconds to free:
        // not on the way to the answer.
        let _ = std::thread::Builder::new().spawn(move || drop((space, user_built)));
        Ok(pushed)
    }

    /// Runs `item_id` on the node in the project `project_path`.
    pub async fn execute(
        &self,
        project_path: &str,
        item_id: &str,
        parameters: &Value,
        run_async: bool,
    ) -> Result<Value, ClientError> {
        self.execute_with(project_path, item_id, parameters, run_async, Map::new())
            .await
    }

    /// [`Client::execute`] with more fields of the request
    /// (`secret_envelope`, `vault_keys`).
    async fn execute_with(
        &self,
        project_path: &str,
        item_id: &str,
        parameters: &Value,
        run_async: bool,
        more: Map<String, Value>,
    ) -> Result<Value, ClientError> {
        let mut body = json!({"item_id": item_id, "project_path": project_path,
                              "parameters": parameters, "async": run_async});
        if let Value::Object(fields) = &mut body {
            fields.extend(more);
        }
        self.call("POST", "/execute", None, Some(&body)).await
    }

    /// Runs `item_id` on the node end to end, as the seed's `execute`
    /// does: the project pushed first (with `around.push`), so the run
    /// sees it as it is here; the run; and what the run folded into the
    /// node's head pulled back (with `around.pull`, for a run waited for
    /// whose outputs moved the head). A head that moved since this client
    /// last saw it (another client's push, an earlier run) is pulled and
    /// merged here before the push, never overwritten; a merge that
    /// conflicts stops before anything runs. The node's record of the
    /// run, with what the push and the pull did as `pushed` and `pulled`.
    pub async fn execute_here(
        &self,
        here: &Here<'_>,
        item_id: &str,
        parameters: &Value,
        run_async: bool,
        around: Around,
    ) -> Result<Value, ClientError> {
        let started = std::time::Instant::now();
        let ms =
            |from: std::time::Instant| (from.elapsed().as_secs_f64() * 10_000.0).round() / 10.0;
        let mut laps = serde_json::Map::new();
        let mut pushed = Value::Null;
        if around.push {
            let push = || {
                self.push(
                    here.project,
                    here.user,
                    here.policy_spaces,
                    here.project_path,
                )
            };
            let done = match push().await {
                Err(ClientError::Node { status: 409, body }) if body.get("actual").is_some() => {
                    let merged = self
                        .pull(here.project, here.policy_spaces, here.project_path)
                        .await?;
                    if merged["status"] == "conflict" {
                        return Err(ClientError::Local(format!(
                            "the node's head moved since this project last pushed, and merging it here conflicts ({}): resolve the paths named and run again",
                            merged["conflicts"]
                        )));
                    }
                    push().await?
                }
                other => other?,
            };
            pushed = json!({
                "status": if done.unchanged { "unchanged" } else { "pushed" },
                "snapshot_hash": done.snapshot,
                "sent": done.sent,
            });
            laps.insert("push".into(), json!(ms(started)));
        }
        let mut more = Map::new();
        if !around.secrets.is_empty() {
            more.insert("secret_envelope".into(), self.seal(&around.secrets).await?);
        }
        if !around.vault_keys.is_empty() {
            more.insert("vault_keys".into(), json!(around.vault_keys));
        }
        if around.retries > 0 {
            more.insert("retries".into(), json!(around.retries));
        }
        let running = std::time::Instant::now();
        let mut record = self
            .execute_with(here.project_path, item_id, parameters, run_async, more)
            .await?;
        laps.insert("execute".into(), json!(ms(running)));
        let moved = matches!(
            record.get("merge_type").and_then(Value::as_str),
            Some("fast-forward" | "merge")
        );
        if around.pull && !run_async && moved {
            let pulling = std::time::Instant::now();
            let pulled = self
                .pull(here.project, here.policy_spaces, here.project_path)
                .await?;
            record["pulled"] = pulled;
            laps.insert("pull".into(), json!(ms(pulling)));
        }
        if around.push {
            record["pushed"] = pushed;
        }
        laps.insert("total".into(), json!(ms(started)));
        record["client_ms"] = Value::Object(laps);
        Ok(record)
    }

    /// Fetches from the node the objects of `hashes` the project's store
    /// lacks. Those the node did not send are left for the caller to
    /// notice.
    async fn fetch(&self, cas: &Cas<LocalStorage>, hashes: &[String]) -> Result<(), ClientError> {
        self.fetched(cas, hashes).await.map(drop)
    }

    /// Fetches as `fetch` does; the hashes the node did not send (it no
    /// longer holds them, or never did).
    async fn fetched(
        &self,
        cas: &Cas<LocalStorage>,
        hashes: &[String],
    ) -> Result<Vec<String>, ClientError> {
        let mut lacking = Vec::new();
        for hash in hashes {
            let parsed: ContentHash = hash.parse().map_err(local)?;
            if cas.has(&parsed).await.map_err(local)?.is_none() {
                lacking.push(hash.clone());
            }
        }
        if lacking.is_empty() {
            return Ok(Vec::new());
        }
        let per_request = self.limits().await?.hashes_per_request();
        let mut missing: BTreeSet<&str> = lacking.iter().map(String::as_str).collect();
        for batch in lacking.chunks(per_request) {
            let answer = self
                .call(
                    "POST",
                    "/objects/get",
                    None,
                    Some(&json!({"hashes": batch})),
                )
                .await?;
            for entry in answer["entries"].as_array().into_iter().flatten() {
                let data = base64::engine::general_purpose::STANDARD
                    .decode(entry["data"].as_str().unwrap_or_default())
                    .map_err(local)?;
                let stored = match entry["kind"].as_str() {
                    Some("blob") => cas.put_blob(&data).await.map_err(local)?,
                    Some("object") => {
                        let value: Value = serde_json::from_slice(&data).map_err(local)?;
                        cas.put_object(&value).await.map_err(local)?
                    }
                    _ => continue,
                };
                if entry["hash"].as_str() != Some(stored.hex().as_str()) {
                    return Err(ClientError::Local(format!(
                        "the node sent {} for {}",
                        stored.hex(),
                        entry["hash"]
                    )));
                }
                missing.remove(stored.hex().as_str());
            }
        }
        Ok(missing.into_iter().map(str::to_owned).collect())
    }

    /// Brings the node's head of `project_path` into the project at
    /// `project`: merged three ways against what was last pushed or
    /// pulled, so local changes stay; conflicted paths are left as they
    /// are locally and reported.
    pub async fn pull(
        &self,
        project: &Path,
        policy_spaces: &[&Path],
        project_path: &str,
    ) -> Result<Value, ClientError> {
        let cas = local_cas(project);
        let mut last = Ref::read(project, &self.remote.name)?;
        if let Some(limits) = last.limits
            && self.known_limits().is_none()
        {
            self.assume_limits(limits);
        }
        let base = match last
            .project_manifest
            .as_deref()
            .and_then(|h| h.parse().ok())
        {
            Some(hash) => cas
                .get_object(&hash)
                .await
                .map_err(local)?
                .map(|v| Tree::of_manifest(&v))
                .unwrap_or_default(),
            None => Tree::default(),
        };
        // The head and what it changed since the base, all fetched before
        // the project is touched. A head that moves on meanwhile may have
        // had its objects collected; it is read again, and what the node
        // names as its head it holds whole.
        let mut gone: Option<(String, String)> = None;
        let mut tries = 0;
        let (head, theirs_hash, theirs) = loop {
            tries += 1;
            let history = self
                .call(
                    "GET",
                    "/history",
                    Some(&format!("limit=1&project_path={}", encode(project_path))),
                    None,
                )
                .await?;
            let head = history["head"]
                .as_str()
                .ok_or_else(|| ClientError::Local("the node names no head".into()))?
                .to_owned();
            let theirs_hash = history["snapshots"][0]["project_manifest_hash"]
                .as_str()
                .ok_or_else(|| ClientError::Local("the head names no project manifest".into()))?
                .to_owned();
            if last.snapshot.as_deref() == Some(head.as_str()) {
                return Ok(json!({"status": "up-to-date", "head": head}));
            }
            if let Some((before, hash)) = gone.take() {
                if before == head {
                    return Err(ClientError::Local(format!(
                        "the node's head {head} of {project_path} names object {hash}, \
                         which the node does not hold"
                    )));
                }
                if tries > PULL_TRIES {
                    return Err(ClientError::Local(format!(
                        "the head of {project_path} moved on {PULL_TRIES} times while it \
                         was fetched; pull again"
                    )));
                }
            }
            match self.head_closure(&cas, &theirs_hash, &base).await? {
                Ok(theirs) => break (head, theirs_hash, theirs),
                Err(hash) => gone = Some((head, hash)),
            }
        };
        let policy = Policy::load(policy_spaces).map_err(local)?;
        let ours_space = build_space(&cas, project, SpaceKind::Project, &policy, true).await?;
        let ours = Tree::of_manifest(&ours_space.built.manifest);
        let merged = three_way(&cas, &base, &ours, &theirs)
            .await
            .map_err(local)?;
        // What changes locally: every merged path whose hash differs from
        // ours, and every path of ours the merge dropped.
        let mut writes = Vec::new();
        let mut removals = Vec::new();
        for (section, mine, result) in [
            ("items", &ours.items, &merged.tree.items),
            ("files", &ours.files, &merged.tree.files),
        ] {
            for (path, hash) in result {
                if mine.get(path) == Some(hash) {
                    continue;
                }
                let mut blob: ContentHash = hash.parse().map_err(local)?;
                if section == "items" {
                    let source = cas.get_object(&blob).await.map_err(local)?.ok_or_else(|| {
                        ClientError::Local(format!("{path}: its source is missing"))
                    })?;
                    blob = source["content_blob_hash"]
                        .as_str()
                        .and_then(|h| h.parse().ok())
                        .ok_or_else(|| ClientError::Local(format!("{path}: no content blob")))?;
                }
                let bytes = cas
                    .get_blob(&blob)
                    .await
                    .map_err(local)?
                    .ok_or_else(|| ClientError::Local(format!("{path}: blob missing")))?;
                writes.push((path.clone(), bytes));
            }
            for path in mine.keys() {
                if !result.contains_key(path) && !merged.conflicts.contains_key(path) {
                    removals.push(path.clone());
                }
            }
        }
        rye_sync::materialize::apply(project, &writes, &removals).map_err(local)?;
        // The stamps of the project as the pull leaves it. When that is
        // the head's manifest exactly, they say so, and the next push
        // reads its delta from them.
        let file = ours_space.file.clone();
        let mut stamps = ours_space.into_stamps();
        for (path, _) in &writes {
            let entry = merged.tree.items.get(path).or(merged.tree.files.get(path));
            match (entry, std::fs::symlink_metadata(project.join(path))) {
                (Some(entry), Ok(meta)) => {
                    stamps.insert(path.clone(), Stamp::of(&meta, entry.clone()))
                }
                _ => stamps.remove(path),
            }
        }
        for path in &removals {
            stamps.remove(path);
        }
        if merged.conflicts.is_empty() && merged.tree == theirs {
            stamps.make_up(theirs_hash.clone());
        }
        let _ = stamps.save(&file);
        last.snapshot = Some(head.clone());
        last.project_manifest = Some(theirs_hash);
        last.limits = self.known_limits().or(last.limits);
        last.write(project, &self.remote.name)?;
        let conflicts = merged.to_json()["conflicts"].clone();
        Ok(json!({
            "status": if merged.conflicts.is_empty() { "merged" } else { "conflict" },
            "head": head,
            "written": writes.iter().map(|(p, _)| p).collect::<Vec<_>>(),
            "removed": removals,
            "conflicts": conflicts,
        }))
    }
}

impl Client {
    /// Writes into the project at `project` the files one run of the
    /// node (`thread_id`) left under `.ai/state/` and
    /// `.ai/knowledge/state/`, whatever became of its fold-back: a file
    /// is written where the project has none or still has the version
    /// the run started from; one changed locally since is kept (and
    /// named) unless `force`.
    pub async fn pull_outputs(
        &self,
        project: &Path,
        thread_id: &str,
        force: bool,
    ) -> Result<Value, ClientError> {
        let record = self
            .call(
                "GET",
                &format!("/threads/{}", encode(thread_id)),
                None,
                None,
            )
            .await?;
        let status = record["status"].as_str().unwrap_or_default();
        if matches!(status, "running" | "queued") {
            return Err(ClientError::Local(format!(
                "the run {thread_id} is still {status}; pull its outputs once it has ended"
            )));
        }
        let outputs = record["runtime_output_files"].as_object().ok_or_else(|| {
            ClientError::Local(format!(
                "the run {thread_id} ({status}) left no outputs to pull"
            ))
        })?;
        let mut wanted = BTreeMap::new();
        for (path, hash) in outputs {
            let under = crate::run::OUTPUT_FOLDERS
                .iter()
                .any(|folder| path.starts_with(&format!("{folder}/")));
            let hash: ContentHash = hash
                .as_str()
                .and_then(|h| h.parse().ok())
                .ok_or_else(|| ClientError::Local(format!("{path}: the node named no hash")))?;
            if !under {
                return Err(ClientError::Local(format!(
                    "the node names {path:?} as an output of {thread_id}, which is outside .ai/state/ and .ai/knowledge/state/; nothing was written"
                )));
            }
            wanted.insert(path.clone(), hash);
        }
        let cas = local_cas(project);
        // What the run started from, to tell a local change from a file
        // the run changed.
        let base = match record["snapshot_hash"].as_str() {
            Some(snapshot) => self.tree_of_snapshot(&cas, snapshot).await?,
            None => Tree::default(),
        };
        let mut hexes: Vec<String> = wanted.values().map(ContentHash::hex).collect();
        hexes.extend(
            wanted
                .keys()
                .filter_map(|path| base.items.get(path).cloned()),
        );
        self.fetch(&cas, &hexes).await?;
        let (mut writes, mut kept, mut unchanged) = (Vec::new(), Vec::new(), Vec::new());
        for (path, hash) in &wanted {
            let here = match std::fs::read(project.join(path)) {
                Ok(bytes) => Some(ContentHash::of(&bytes)),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
                Err(e) => return Err(ClientError::Local(format!("{path}: {e}"))),
            };
            if here.as_ref() == Some(hash) {
                unchanged.push(path.clone());
                continue;
            }
            let started = base_blob(&cas, &base, path).await?;
            if !force && here.is_some() && here != started {
                kept.push(path.clone());
                continue;
            }
            let bytes =
                cas.get_blob(hash).await.map_err(local)?.ok_or_else(|| {
                    ClientError::Local(format!("{path}: its bytes did not arrive"))
                })?;
            writes.push((path.clone(), bytes));
        }
        rye_sync::materialize::apply(project, &writes, &[]).map_err(local)?;
        Ok(json!({
            "status": if kept.is_empty() { "pulled" } else { "kept" },
            "thread_id": thread_id,
            "written": writes.iter().map(|(p, _)| p).collect::<Vec<_>>(),
            "kept": kept,
            "unchanged": unchanged,
        }))
    }

    /// Fetches the project manifest `manifest` and, of what it names,
    /// what differs from `base` (items with their blobs): its tree, or
    /// the first hash the node did not send.
    async fn head_closure(
        &self,
        cas: &Cas<LocalStorage>,
        manifest: &str,
        base: &Tree,
    ) -> Result<Result<Tree, String>, ClientError> {
        if let Some(hash) = self.fetched(cas, &[manifest.to_owned()]).await?.pop() {
            return Ok(Err(hash));
        }
        let value = cas
            .get_object(&manifest.parse().map_err(local)?)
            .await
            .map_err(local)?
            .ok_or_else(|| ClientError::Local(format!("manifest {manifest} was not kept")))?;
        let theirs = Tree::of_manifest(&value);
        // Only what the head changed since the base is needed here; the
        // base's own objects are in the project's store (it was pushed
        // from here or pulled into it).
        let changed = |mine: &BTreeMap<String, String>, base: &BTreeMap<String, String>| {
            mine.iter()
                .filter(|(path, hash)| base.get(*path) != Some(*hash))
                .map(|(_, hash)| hash.clone())
                .collect::<Vec<_>>()
        };
        let changed_items = changed(&theirs.items, &base.items);
        let mut needed = changed_items.clone();
        needed.extend(changed(&theirs.files, &base.files));
        if let Some(hash) = self.fetched(cas, &needed).await?.pop() {
            return Ok(Err(hash));
        }
        let mut blobs = Vec::new();
        for hash in &changed_items {
            let source = cas
                .get_object(&hash.parse().map_err(local)?)
                .await
                .map_err(local)?;
            if let Some(blob) = source
                .as_ref()
                .and_then(|s| s["content_blob_hash"].as_str())
            {
                blobs.push(blob.to_owned());
            }
        }
        if let Some(hash) = self.fetched(cas, &blobs).await?.pop() {
            return Ok(Err(hash));
        }
        Ok(Ok(theirs))
    }

    /// The paths of the project manifest of `snapshot`, fetched as needed.
    async fn tree_of_snapshot(
        &self,
        cas: &Cas<LocalStorage>,
        snapshot: &str,
    ) -> Result<Tree, ClientError> {
        self.fetch(cas, &[snapshot.to_owned()]).await?;
        let object = |hash: String| async move {
            let parsed: ContentHash = hash.parse().map_err(local)?;
            cas.get_object(&parsed)
                .await
                .map_err(local)?
                .ok_or_else(|| ClientError::Local(format!("object {hash} did not arrive")))
        };
        let snapshot = object(snapshot.to_owned()).await?;
        let manifest = snapshot["project_manifest_hash"]
            .as_str()
            .ok_or_else(|| ClientError::Local("the snapshot names no project manifest".into()))?
            .to_owned();
        self.fetch(cas, std::slice::from_ref(&manifest)).await?;
        Ok(Tree::of_manifest(&object(manifest).await?))
    }
}

/// The blob `path` had in `tree` (an item's through its source, fetched
/// beforehand or absent), if any.
async fn base_blob(
    cas: &Cas<LocalStorage>,
    tree: &Tree,
    path: &str,
) -> Result<Option<ContentHash>, ClientError> {
    if let Some(hash) = tree.files.get(path) {
        return Ok(hash.parse().ok());
    }
    let Some(source) = tree.items.get(path).and_then(|h| h.parse().ok()) else {
        return Ok(None);
    };
    Ok(cas
        .get_object(&source)
        .await
        .map_err(local)?
        .and_then(|s| s["content_blob_hash"].as_str().and_then(|h| h.parse().ok())))
}

/// `text` URL-encoded for a query.
pub fn encode(text: &str) -> String {
    let mut out = String::new();
    for &b in text.as_bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}
