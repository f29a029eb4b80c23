//! `rye node`: serve this machine as a remote node; `rye remote`: push a
//! project to a node, run items there, list its runs and history, and
//! pull what the runs changed.

use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context as _;
use clap::Subcommand;
use rye_node::client::{self, Client, ClientError};
use serde_json::{Value, json};

#[derive(Subcommand)]
pub enum NodeAction {
    /// Serve the node's HTTP API: clients push projects to it and run
    /// items on it with signed requests. The key in BOOTSTRAP_PUBLIC_KEY
    /// (ed25519:<base64 PEM>, labelled BOOTSTRAP_LABEL) is authorized on
    /// start. Replicas of one node share its database, object store and
    /// key, each with a folder of its own.
    Serve {
        #[command(flatten)]
        stores: NodeStores,
        /// Where to listen (port 0 picks one; the address is printed).
        #[arg(long, default_value = "127.0.0.1:8321", value_name = "ADDR")]
        listen: SocketAddr,
        /// The name the node answers with.
        #[arg(long, default_value = "node")]
        name: String,
        /// Runs at once; one more is answered 503.
        #[arg(long, default_value_t = 8)]
        max_concurrent: usize,
        /// Seconds a run may take before it is killed.
        #[arg(long, default_value_t = 600)]
        timeout: u64,
        /// Seconds the `rye serve` kept in a project's workspace may wait
        /// for the project's next run (each costs a process's memory
        /// meanwhile); 0 keeps none, so every run starts its own.
        #[arg(long, default_value_t = 300, value_name = "SECONDS")]
        keep_run_hosts: u64,
        /// The largest request body, in bytes.
        #[arg(long, default_value_t = 50 << 20)]
        max_request_bytes: usize,
        /// Seconds a run stays held by this replica without a renewal
        /// (renewed four times as often): a run whose replica died is
        /// marked interrupted by another this long after.
        #[arg(long, default_value_t = 60, value_name = "SECONDS")]
        lease: u64,
        /// Requests a minute each key may make of this replica on
        /// average (0: no limit); one more is answered 429.
        #[arg(long, default_value_t = 0, value_name = "PER_MINUTE")]
        rate_limit: u32,
        /// Requests a key may make at once before --rate-limit applies.
        #[arg(long, default_value_t = 100, value_name = "N")]
        rate_burst: u32,
        /// Seconds between this replica's garbage collections of every
        /// key's objects (0: only when a key asks, or passes its quota).
        #[arg(long, default_value_t = 3600, value_name = "SECONDS")]
        gc_every: u64,
        /// Seconds an object stays after it was last held or stopped
        /// being held (a push has this long from its upload to its head).
        #[arg(long, default_value_t = 3600, value_name = "SECONDS")]
        gc_grace: u64,
        /// Snapshots younger than this many days are kept.
        #[arg(long, default_value_t = 7, value_name = "DAYS")]
        gc_retention_days: u64,
        /// The last this many pushes of each project are kept, whatever
        /// their age.
        #[arg(long, default_value_t = 3, value_name = "N")]
        gc_keep_pushes: usize,
        /// How the node logs to standard error: text, or json (one object
        /// a line: timestamp, level, target and fields; requests with
        /// route, status, latency and principal, runs and collections as
        /// they end). RYE_LOG filters as for every command.
        #[arg(long, value_enum, default_value_t = LogFormat::Text, env = "RYE_LOG_FORMAT")]
        log_format: LogFormat,
    },
    /// Authorize a key to call the node (written to the node's database,
    /// signed by the node's key).
    Authorize {
        /// The public key: a PEM or trusted-key TOML file.
        key: PathBuf,
        #[command(flatten)]
        stores: NodeStores,
        #[arg(long, default_value = "")]
        label: String,
        /// A scope granted (node.push, node.execute, node.read, or *).
        /// Repeatable; none grants every scope.
        #[arg(long = "scope")]
        scopes: Vec<String>,
        /// An item namespace the key may publish under (repeatable), for
        /// a node that serves a registry.
        #[arg(long = "publish-namespace", value_name = "NAMESPACE")]
        publish_namespaces: Vec<String>,
        /// When the authorization ends (YYYY-MM-DDTHH:MM:SSZ).
        #[arg(long, value_name = "TIME")]
        expires_at: Option<String>,
    },
    /// Check what the node stands on without serving: its database (and
    /// its clock), its object store, its keys. Exits 1 when a check
    /// fails.
    Doctor {
        #[command(flatten)]
        stores: NodeStores,
    },
    /// Print the node's identity: its fingerprint and public key.
    Id {
        #[command(flatten)]
        stores: NodeStores,
    },
}

/// Where a node keeps what it knows.
#[derive(clap::Args)]
pub struct NodeStores {
    /// The node's folder: its workspaces, and its database, objects and
    /// key unless set apart below.
    #[arg(long, env = "RYE_NODE_BASE", value_name = "DIR")]
    base: Option<PathBuf>,
    /// The database: sqlite://PATH, or postgres://USER:PASSWORD@HOST/NAME
    /// (shared by replicas). Default: a SQLite file in the base folder.
    #[arg(
        long,
        env = "RYE_NODE_DATABASE",
        value_name = "URL",
        hide_env_values = true
    )]
    database: Option<String>,
    /// The object store: file:///PATH, or s3://BUCKET[/PREFIX] (any S3
    /// API; endpoint and credentials from AWS_ENDPOINT_URL,
    /// AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_REGION and, for a
    /// plain-HTTP endpoint, AWS_ALLOW_HTTP=true). Default: files in the
    /// base folder.
    #[arg(long, env = "RYE_NODE_OBJECTS", value_name = "URL")]
    objects: Option<String>,
    /// The folder of the node's signing key (made on first start).
    /// Default: signing/ in the base folder.
    #[arg(long, env = "RYE_NODE_KEY_DIR", value_name = "DIR")]
    key_dir: Option<PathBuf>,
}

impl NodeStores {
    /// Settings for a node on these stores, running items with `runner`.
    fn settings(self, runner: rye_node::run::Runner) -> anyhow::Result<rye_node::Settings> {
        let mut settings = rye_node::Settings::new(node_base(self.base)?, runner);
        settings.database = self.database.filter(|d| !d.is_empty());
        settings.objects = self.objects.filter(|o| !o.is_empty());
        settings.signing_key_dir = self.key_dir;
        Ok(settings)
    }

    /// Settings for a command that administers the node and runs
    /// nothing.
    fn admin_settings(self) -> anyhow::Result<rye_node::Settings> {
        self.settings(rye_node::run::Runner {
            program: PathBuf::new(),
            env: Vec::new(),
            timeout: Duration::from_secs(1),
            keep_hosts: Duration::ZERO,
        })
    }
}

#[derive(Subcommand)]
pub enum RemoteAction {
    /// The remotes of .ai/config/remotes/remotes.yaml (project, user and
    /// system spaces merged) and the node keys pinned for them.
    List,
    /// Send the project (and the user space) to the node: only what it
    /// lacks, then move the project's head there.
    Push {
        #[arg(long)]
        remote: Option<String>,
    },
    /// Run an item on the node, end to end: the project is pushed first
    /// (a head moved since the last push is merged here first), the item
    /// runs there, what the run changes is folded into the project's
    /// history on the node, and that is pulled back here.
    Execute {
        /// tool, directive or knowledge.
        kind: String,
        id: String,
        #[arg(long, default_value = "{}", value_name = "JSON")]
        params: String,
        #[arg(long)]
        remote: Option<String>,
        /// Return at once with the run's thread id (nothing is pulled).
        #[arg(long = "async")]
        run_async: bool,
        /// Run the project as last pushed, without pushing it first.
        #[arg(long)]
        no_push: bool,
        /// Leave what the run folded back on the node (`rye remote pull`
        /// brings it later).
        #[arg(long)]
        no_pull: bool,
        /// Give the run the environment variable NAME as it is set here,
        /// sealed to the node's box key on the way (repeatable).
        #[arg(long = "secret", value_name = "NAME")]
        secrets: Vec<String>,
        /// Give the run the secret NAME of this key's vault on the node
        /// (repeatable).
        #[arg(long = "vault-key", value_name = "NAME")]
        vault_keys: Vec<String>,
        /// With --async: start the run again, up to N times, if the
        /// replica running it dies (for items safe to run again).
        #[arg(long, default_value_t = 0, value_name = "N", requires = "run_async")]
        retries: u64,
    },
    /// This key's vault on the node: secrets kept sealed to the node's
    /// box key, opened only into runs that name them. `set NAME` seals the
    /// environment variable NAME as set here (or standard input when it
    /// is not set); `list`; `delete NAME`.
    Vault {
        /// set, list or delete.
        action: String,
        name: Option<String>,
        #[arg(long)]
        remote: Option<String>,
    },
    /// The node's runs of this project, or one run.
    Threads {
        thread_id: Option<String>,
        #[arg(long)]
        remote: Option<String>,
        #[arg(long, default_value_t = 20)]
        limit: u32,
    },
    /// The project's snapshots on the node, newest first.
    History {
        #[arg(long)]
        remote: Option<String>,
        #[arg(long, default_value_t = 20)]
        limit: u32,
    },
    /// Collect this key's objects on the node now: what no head, kept
    /// snapshot or recent run reaches is let go (with --dry-run, only
    /// counted). `gc stats` shows what the key holds and its last
    /// collections.
    Gc {
        /// `stats` for what the key holds and its last collections.
        #[arg(value_name = "stats")]
        what: Option<String>,
        #[arg(long)]
        remote: Option<String>,
        #[arg(long)]
        dry_run: bool,
        /// Keep only what heads, the last push and runs under way reach.
        #[arg(long)]
        aggressive: bool,
        /// Keep snapshots younger than this many days (the node's setting
        /// otherwise).
        #[arg(long, value_name = "DAYS")]
        retention_days: Option<u64>,
        /// Keep the last this many pushes of each project.
        #[arg(long, value_name = "N")]
        keep_pushes: Option<u64>,
    },
    /// Bring the node's head into the project: merged three ways with
    /// local changes; conflicting paths are left as they are and named.
    /// With --thread, only the files one run left under .ai/state/ and
    /// .ai/knowledge/state/ (also of a run whose fold-back conflicted).
    Pull {
        #[arg(long)]
        remote: Option<String>,
        /// The run whose outputs to write.
        #[arg(long = "thread", value_name = "THREAD_ID")]
        thread_id: Option<String>,
        /// With --thread: overwrite outputs changed locally since the run
        /// started (they are kept and named otherwise).
        #[arg(long, requires = "thread_id")]
        force: bool,
    },
    /// Webhook bindings on the node: `bind KIND:ID` lets a caller holding
    /// the secret it prints (once) run that item on this project by an
    /// HMAC-signed POST to /execute; `list`; `unbind HOOK_ID`.
    Webhook {
        /// bind, list or unbind.
        action: String,
        /// The item to bind (`tool:ID`), or the hook to unbind.
        target: Option<String>,
        #[arg(long)]
        description: Option<String>,
        /// bind: give its runs the environment variable NAME as it is set
        /// here, sealed to the node's box key (repeatable).
        #[arg(long = "secret", value_name = "NAME")]
        secrets: Vec<String>,
        /// bind: give its runs the secret NAME of this key's vault.
        #[arg(long = "vault-key", value_name = "NAME")]
        vault_keys: Vec<String>,
        #[arg(long)]
        remote: Option<String>,
    },
    /// API keys of this key's on the node: bearer tokens (`rye_sk_…`)
    /// for callers that cannot sign requests, within this key's scopes.
    /// `create --label L [--scope node:read]… [--expires-at T]` shows the
    /// token once; `list`; `revoke KEY_ID`. A remote whose entry names
    /// `key_env: VAR` sends the API key in VAR instead of signing.
    ApiKey {
        /// create, list or revoke.
        action: String,
        /// The key to revoke (`ak_…`).
        key_id: Option<String>,
        #[arg(long)]
        label: Option<String>,
        /// node:push, node:execute, node:read or node:* (repeatable; none:
        /// all three).
        #[arg(long = "scope", value_name = "SCOPE")]
        scopes: Vec<String>,
        /// When it stops working (YYYY-MM-DDTHH:MM:SSZ).
        #[arg(long, value_name = "TIME")]
        expires_at: Option<String>,
        #[arg(long)]
        remote: Option<String>,
    },
    /// Do what the JSON request on stdin asks ({"action": "push" |
    /// "execute" | "threads" | "history" | "pull" | "list", ...}): the
    /// system tool rye/core/remote/remote runs this.
    #[command(hide = true)]
    Manage,
}

/// How `rye node serve` writes its log.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

/// The request `rye remote manage` reads.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct ManageRequest {
    action: String,
    #[serde(default)]
    remote: Option<String>,
    #[serde(default)]
    item_type: Option<String>,
    #[serde(default)]
    item_id: Option<String>,
    #[serde(default)]
    parameters: Option<Value>,
    #[serde(default, rename = "async")]
    run_async: bool,
    #[serde(default)]
    thread_id: Option<String>,
    #[serde(default)]
    limit: Option<u32>,
    #[serde(default)]
    force: bool,
    #[serde(default)]
    push: Option<bool>,
    #[serde(default)]
    pull: Option<bool>,
    /// Secrets of the caller's vault on the node to give the run.
    #[serde(default)]
    vault_keys: Vec<String>,
    /// With async: how many more times the run may start if its replica
    /// dies.
    #[serde(default)]
    retries: u64,
}

/// At most this much of a request is read from stdin.
const MANAGE_REQUEST_BYTES: u64 = 16 << 20;

impl ManageRequest {
    fn read(input: impl std::io::Read) -> anyhow::Result<RemoteAction> {
        use std::io::Read as _;
        let mut text = String::new();
        input
            .take(MANAGE_REQUEST_BYTES + 1)
            .read_to_string(&mut text)
            .context("reading the request on stdin")?;
        if text.len() as u64 > MANAGE_REQUEST_BYTES {
            anyhow::bail!("the request is larger than {MANAGE_REQUEST_BYTES} bytes");
        }
        let request: ManageRequest =
            serde_json::from_str(&text).context("the request is not a remote request")?;
        let remote = request.remote;
        let limit = request.limit.unwrap_or(20);
        Ok(match request.action.as_str() {
            "list" => RemoteAction::List,
            "push" => RemoteAction::Push { remote },
            "pull" => RemoteAction::Pull {
                remote,
                thread_id: request.thread_id,
                force: request.force,
            },
            "history" => RemoteAction::History { remote, limit },
            "threads" => RemoteAction::Threads {
                thread_id: request.thread_id,
                remote,
                limit,
            },
            "execute" => RemoteAction::Execute {
                kind: request.item_type.unwrap_or_else(|| "tool".into()),
                id: request.item_id.context("execute needs an item_id")?,
                params: request.parameters.unwrap_or_else(|| json!({})).to_string(),
                remote,
                run_async: request.run_async,
                no_push: !request.push.unwrap_or(true),
                no_pull: !request.pull.unwrap_or(true),
                secrets: Vec::new(),
                vault_keys: request.vault_keys,
                retries: request.retries,
            },
            other => anyhow::bail!(
                "action {other:?} is not push, execute, threads, history, pull or list"
            ),
        })
    }
}

/// What a node command needs of the host's settings.
pub struct Settings<'a> {
    pub cache_dir: &'a Path,
    pub user_base: Option<&'a Path>,
    pub system_base: &'a Path,
    pub key_dir: Option<&'a Path>,
    pub project: &'a Path,
}

fn node_base(base: Option<PathBuf>) -> anyhow::Result<PathBuf> {
    match base {
        Some(base) => Ok(base),
        None => rye_host::state_dir_from_env()
            .map(|d| d.join("node"))
            .context("no --base, RYE_NODE_BASE or state folder for the node"),
    }
}

/// The variables a node's runs see of the node's own environment.
const PASSED: [&str; 10] = [
    "PATH",
    "LANG",
    "TMPDIR",
    "RYE_CACHE_KEY",
    "RYE_PRECOMPILED",
    "RYE_POOLING",
    "RYE_SYSTEM_SPACE",
    "RYE_LOG",
    "RYE_ALLOW_UNSIGNED_PROJECT",
    "RYE_THREADS",
];

pub fn node(action: NodeAction, cx: &Settings<'_>, out: &mut impl Write) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    match action {
        NodeAction::Serve {
            stores,
            listen,
            name,
            max_concurrent,
            timeout,
            keep_run_hosts,
            max_request_bytes,
            lease,
            rate_limit,
            rate_burst,
            gc_every,
            gc_grace,
            gc_retention_days,
            gc_keep_pushes,
            log_format,
        } => {
            let mut env: Vec<(String, String)> = PASSED
                .iter()
                .filter_map(|n| std::env::var(n).ok().map(|v| ((*n).to_owned(), v)))
                .collect();
            env.push((
                "RYE_CACHE_DIR".into(),
                cx.cache_dir.to_string_lossy().into_owned(),
            ));
            if let Some(state) = rye_host::state_dir_from_env() {
                env.push(("RYE_STATE_DIR".into(), state.to_string_lossy().into_owned()));
            }
            let runner = rye_node::run::Runner {
                program: std::env::current_exe().context("this program's path")?,
                env,
                timeout: Duration::from_secs(timeout.max(1)),
                keep_hosts: Duration::from_secs(keep_run_hosts),
            };
            let mut settings = stores.settings(runner)?;
            settings.name = name;
            settings.max_concurrent = max_concurrent.max(1);
            settings.max_request_bytes = max_request_bytes.max(1 << 20);
            settings.lease = Duration::from_secs(lease.max(1));
            settings.rate_limit = (rate_limit, rate_burst);
            settings.gc.every = (gc_every > 0).then(|| Duration::from_secs(gc_every));
            settings.gc.grace = Duration::from_secs(gc_grace);
            settings.gc.retention = rye_node::service::Retention {
                days: gc_retention_days,
                pushes: gc_keep_pushes,
            };
            settings.bootstrap = std::env::var("BOOTSTRAP_PUBLIC_KEY")
                .ok()
                .filter(|k| !k.is_empty())
                .map(|key| {
                    let label = std::env::var("BOOTSTRAP_LABEL")
                        .ok()
                        .filter(|l| !l.is_empty())
                        .unwrap_or_else(|| "bootstrap".into());
                    (key, label)
                });
            let runs = rye_host::state_dir_from_env().map(|d| d.join("runs"));
            rye_host::runs::init(runs);
            runtime.block_on(async {
                let node = rye_node::Node::open(settings).await?;
                let listener = tokio::net::TcpListener::bind(listen)
                    .await
                    .with_context(|| format!("binding {listen}"))?;
                let bound = listener.local_addr()?;
                match log_format {
                    LogFormat::Text => {
                        eprintln!("serving node fp:{} at http://{bound}", node.fingerprint())
                    }
                    LogFormat::Json => tracing::info!(
                        node = format!("fp:{}", node.fingerprint()),
                        url = format!("http://{bound}"),
                        "serving node"
                    ),
                }
                tokio::select! {
                    served = rye_node::serve(node, listener) => served?,
                    _ = tokio::signal::ctrl_c() => {}
                }
                anyhow::Ok(())
            })?;
            rye_host::runs::stop_all();
            Ok(())
        }
        NodeAction::Authorize {
            key,
            stores,
            label,
            scopes,
            publish_namespaces,
            expires_at,
        } => {
            let text = std::fs::read_to_string(&key)
                .with_context(|| format!("reading {}", key.display()))?;
            let public = match text.trim().strip_prefix("ed25519:") {
                Some(_) => {
                    rye_node::keys::read_wire_key(text.trim()).map_err(anyhow::Error::msg)?
                }
                None => {
                    rye_integrity::read_public_key(&text)
                        .with_context(|| key.display().to_string())?
                        .0
                }
            };
            let scopes = if scopes.is_empty() {
                vec![rye_node::keys::ALL_SCOPES.to_owned()]
            } else {
                scopes
            };
            let settings = stores.admin_settings()?;
            let grant = rye_node::keys::Grant {
                publish_namespaces: &publish_namespaces,
                expires_at: expires_at.as_deref(),
                ..rye_node::keys::Grant::of(&label, &scopes, "admin")
            };
            runtime.block_on(rye_node::authorize_key(&settings, &public, &grant))?;
            writeln!(
                out,
                "authorized fp:{} ({})",
                public.fingerprint(),
                scopes.join(", ")
            )?;
            Ok(())
        }
        NodeAction::Doctor { stores } => {
            let settings = stores.admin_settings()?;
            let checks = runtime.block_on(rye_node::doctor(&settings));
            let healthy = checks.iter().all(|(_, ok, _)| *ok);
            let listed: Vec<Value> = checks
                .into_iter()
                .map(|(name, ok, detail)| json!({"check": name, "ok": ok, "detail": detail}))
                .collect();
            writeln!(
                out,
                "{}",
                serde_json::to_string_pretty(&json!({"healthy": healthy, "checks": listed}))?
            )?;
            if !healthy {
                anyhow::bail!("the node's checks did not all hold");
            }
            Ok(())
        }
        NodeAction::Id { stores } => {
            let dir = stores.admin_settings()?.key_dir();
            let key = rye_node::keys::identity(&dir).map_err(anyhow::Error::msg)?;
            let box_key = rye_seal::BoxKey::load_or_create(&dir)?;
            writeln!(
                out,
                "{}",
                serde_json::to_string_pretty(&json!({
                    "node_id": format!("fp:{}", key.fingerprint()),
                    "signing_key": rye_node::keys::wire_key(key.public()),
                    "box_key": box_key.wire(),
                }))?
            )?;
            Ok(())
        }
    }
}

fn spaces<'a>(cx: &'a Settings<'_>, user: &'a Option<PathBuf>) -> Vec<PathBuf> {
    let mut list = vec![cx.system_base.join(".ai")];
    if let Some(user) = user {
        list.push(user.join(".ai"));
    }
    list.push(cx.project.join(".ai"));
    list
}

fn print(out: &mut impl Write, value: &Value) -> anyhow::Result<()> {
    writeln!(out, "{}", serde_json::to_string_pretty(value)?)?;
    Ok(())
}

fn failed(e: ClientError) -> anyhow::Error {
    anyhow::Error::msg(e.to_string())
}

pub fn remote(action: RemoteAction, cx: &Settings<'_>, out: &mut impl Write) -> anyhow::Result<()> {
    let action = match action {
        RemoteAction::Manage => ManageRequest::read(std::io::stdin().lock())?,
        action => action,
    };
    let user = cx.user_base.map(Path::to_owned);
    // The user space is the project itself when they are one folder.
    let user =
        user.filter(|u| std::fs::canonicalize(u).ok() != std::fs::canonicalize(cx.project).ok());
    let space_dirs = spaces(cx, &user);
    let space_refs: Vec<&Path> = space_dirs.iter().map(PathBuf::as_path).collect();
    let (remotes, project_path) = client::remotes(&space_refs, cx.project).map_err(failed)?;
    let pins = cx
        .user_base
        .unwrap_or(cx.project)
        .join(".ai")
        .join(client::KNOWN_NODES);
    if let RemoteAction::List = action {
        let known: Value = std::fs::read_to_string(&pins)
            .ok()
            .and_then(|t| serde_json::from_str(&t).ok())
            .unwrap_or(json!({}));
        let listed: Vec<Value> = remotes
            .iter()
            .map(|r| {
                json!({
                    "name": r.name,
                    "url": r.url,
                    "node_id": r.node_id,
                    "timeout": r.timeout.as_secs_f64(),
                    "key_env": r.key_env,
                    "pinned": known.get(format!("{} {}", r.name, r.url)).map(|fp| format!("fp:{}", fp.as_str().unwrap_or_default())),
                })
            })
            .collect();
        return print(
            out,
            &json!({"project_path": project_path, "remotes": listed}),
        );
    }
    let name = match &action {
        RemoteAction::Push { remote }
        | RemoteAction::Execute { remote, .. }
        | RemoteAction::Threads { remote, .. }
        | RemoteAction::History { remote, .. }
        | RemoteAction::Gc { remote, .. }
        | RemoteAction::Webhook { remote, .. }
        | RemoteAction::Vault { remote, .. }
        | RemoteAction::ApiKey { remote, .. }
        | RemoteAction::Pull { remote, .. } => remote.clone(),
        RemoteAction::List | RemoteAction::Manage => None,
    };
    if let RemoteAction::Webhook { action, target, .. } = &action {
        match (action.as_str(), target) {
            ("bind" | "unbind", Some(_)) | ("list", None) => {}
            _ => anyhow::bail!("rye remote webhook bind KIND:ID | list | unbind HOOK_ID"),
        }
    }
    if let RemoteAction::ApiKey {
        action,
        key_id,
        label,
        ..
    } = &action
    {
        match (action.as_str(), key_id, label) {
            ("create", None, Some(_)) | ("list", None, None) | ("revoke", Some(_), None) => {}
            _ => anyhow::bail!(
                "rye remote api-key create --label LABEL [--scope S]… [--expires-at T] | list | revoke KEY_ID"
            ),
        }
    }
    if let RemoteAction::Vault { action, name, .. } = &action {
        match (action.as_str(), name) {
            ("set" | "delete", Some(_)) | ("list", None) => {}
            _ => anyhow::bail!("rye remote vault set NAME | list | delete NAME"),
        }
    }
    // Secrets are read here, before anything is sent: a name not set is
    // an error, never an empty value.
    let sealed: std::collections::BTreeMap<String, String> = match &action {
        RemoteAction::Execute { secrets, .. } | RemoteAction::Webhook { secrets, .. } => secrets
            .iter()
            .map(|name| {
                std::env::var(name)
                    .map(|value| (name.clone(), value))
                    .with_context(|| format!("--secret {name}: no such variable is set here"))
            })
            .collect::<anyhow::Result<_>>()?,
        RemoteAction::Vault {
            action,
            name: Some(name),
            ..
        } if action == "set" => {
            let value = match std::env::var(name) {
                Ok(value) => value,
                Err(_) => {
                    let mut text = String::new();
                    std::io::Read::read_to_string(&mut std::io::stdin(), &mut text)
                        .context("reading the secret from standard input")?;
                    text.strip_suffix('\n').unwrap_or(&text).to_owned()
                }
            };
            std::collections::BTreeMap::from([(name.clone(), value)])
        }
        _ => std::collections::BTreeMap::new(),
    };
    let remote = client::pick(&remotes, name.as_deref()).map_err(failed)?;
    let credentials = match &remote.key_env {
        Some(var) => client::Credentials::ApiKey(std::env::var(var).with_context(|| {
            format!(
                "remote {} sends the API key in {var} (key_env), which is not set here",
                remote.name
            )
        })?),
        None => {
            let key_dir = cx
                .key_dir
                .context("no signing key folder (set RYE_SIGNING_KEY_DIR)")?;
            let key = rye_integrity::Keypair::load(key_dir).with_context(|| {
                format!("the signing key that signs requests to {}", remote.name)
            })?;
            client::Credentials::Key(Box::new(key))
        }
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let answer = runtime.block_on(async {
        let client = Client::connect_as(remote, credentials, &pins).await?;
        match action {
            RemoteAction::Push { .. } => {
                let pushed = client
                    .push(cx.project, user.as_deref(), &space_refs, &project_path)
                    .await?;
                Ok(json!({
                    "status": if pushed.unchanged { "unchanged" } else { "pushed" },
                    "remote": remote.name,
                    "project_path": project_path,
                    "snapshot_hash": pushed.snapshot,
                    "project_manifest_hash": pushed.project_manifest,
                    "user_manifest_hash": pushed.user_manifest,
                    "asked": pushed.asked,
                    "sent": pushed.sent,
                    "requests": client.requests.load(std::sync::atomic::Ordering::Relaxed),
                    "sent_bytes": client.sent_bytes.load(std::sync::atomic::Ordering::Relaxed),
                    "skipped": pushed.skipped.iter().map(|(p, why)| json!({"path": p, "why": why})).collect::<Vec<_>>(),
                }))
            }
            RemoteAction::Execute {
                kind,
                id,
                params,
                run_async,
                no_push,
                no_pull,
                vault_keys,
                retries,
                ..
            } => {
                let parameters: Value = serde_json::from_str(&params)
                    .map_err(|e| ClientError::Local(format!("--params is not JSON: {e}")))?;
                let here = client::Here {
                    project: cx.project,
                    user: user.as_deref(),
                    policy_spaces: &space_refs,
                    project_path: &project_path,
                };
                let around = client::Around {
                    push: !no_push,
                    pull: !no_pull,
                    secrets: sealed,
                    vault_keys,
                    retries,
                };
                client
                    .execute_here(&here, &format!("{kind}:{id}"), &parameters, run_async, around)
                    .await
            }
            RemoteAction::Threads {
                thread_id, limit, ..
            } => match thread_id {
                Some(id) => {
                    client
                        .call("GET", &format!("/threads/{}", client::encode(&id)), None, None)
                        .await
                }
                None => {
                    let query = format!(
                        "limit={limit}&project_path={}",
                        client::encode(&project_path)
                    );
                    client.call("GET", "/threads", Some(&query), None).await
                }
            },
            RemoteAction::Vault { action, name, .. } => match (action.as_str(), name) {
                ("set", Some(name)) => match client.seal(&sealed).await {
                    Ok(envelope) => {
                        let body = json!({"name": name, "envelope": envelope});
                        client.call("POST", "/vault/set", None, Some(&body)).await
                    }
                    Err(e) => Err(e),
                },
                ("list", None) => client.call("GET", "/vault/list", None, None).await,
                ("delete", Some(name)) => {
                    let body = json!({"name": name});
                    client.call("POST", "/vault/delete", None, Some(&body)).await
                }
                _ => unreachable!("checked before"),
            },
            RemoteAction::Webhook {
                action,
                target,
                description,
                vault_keys,
                ..
            } => match (action.as_str(), target) {
                ("bind", Some(item_id)) => {
                    let mut body = json!({"item_id": item_id, "project_path": project_path,
                                          "description": description});
                    if !vault_keys.is_empty() {
                        body["vault_keys"] = json!(vault_keys);
                    }
                    let sealing = if sealed.is_empty() {
                        Ok(None)
                    } else {
                        client.seal(&sealed).await.map(Some)
                    };
                    match sealing {
                        Ok(envelope) => {
                            if let Some(envelope) = envelope {
                                body["secret_envelope"] = envelope;
                            }
                            client
                                .call("POST", "/webhook-bindings", None, Some(&body))
                                .await
                        }
                        Err(e) => Err(e),
                    }
                }
                ("list", None) => client.call("GET", "/webhook-bindings", None, None).await,
                ("unbind", Some(hook_id)) => {
                    client
                        .call(
                            "DELETE",
                            &format!("/webhook-bindings/{}", client::encode(&hook_id)),
                            None,
                            None,
                        )
                        .await
                }
                _ => unreachable!("checked before"),
            },
            RemoteAction::History { limit, .. } => {
                let query = format!(
                    "limit={limit}&project_path={}",
                    client::encode(&project_path)
                );
                client.call("GET", "/history", Some(&query), None).await
            }
            RemoteAction::Gc {
                what: Some(what), ..
            } if what == "stats" => client.call("GET", "/gc/stats", None, None).await,
            RemoteAction::Gc { what: Some(what), .. } => Err(client::ClientError::Local(format!(
                "rye remote gc [stats]: {what:?} is not stats"
            ))),
            RemoteAction::Gc {
                dry_run,
                aggressive,
                retention_days,
                keep_pushes,
                ..
            } => {
                let body = json!({"dry_run": dry_run, "aggressive": aggressive,
                                  "retention_days": retention_days, "max_manual_pushes": keep_pushes});
                client.call("POST", "/gc", None, Some(&body)).await
            }
            RemoteAction::Pull {
                thread_id: Some(thread_id),
                force,
                ..
            } => client.pull_outputs(cx.project, &thread_id, force).await,
            RemoteAction::Pull { .. } => {
                client.pull(cx.project, &space_refs, &project_path).await
            }
            RemoteAction::ApiKey {
                action,
                key_id,
                label,
                scopes,
                expires_at,
                ..
            } => match (action.as_str(), key_id) {
                ("create", _) => {
                    let mut body = json!({"label": label, "expires_at": expires_at});
                    if !scopes.is_empty() {
                        body["scopes"] = json!(scopes);
                    }
                    client.call("POST", "/api-keys", None, Some(&body)).await
                }
                ("revoke", Some(id)) => {
                    client
                        .call("DELETE", &format!("/api-keys/{}", client::encode(&id)), None, None)
                        .await
                }
                _ => client.call("GET", "/api-keys", None, None).await,
            },
            RemoteAction::List | RemoteAction::Manage => unreachable!("answered above"),
        }
    });
    match answer {
        Ok(value) => {
            print(out, &value)?;
            let failed_run = value.get("status").and_then(Value::as_str) == Some("error")
                || value.get("status").and_then(Value::as_str) == Some("conflict");
            if failed_run {
                return Err(crate::Failed.into());
            }
            Ok(())
        }
        Err(ClientError::Node { status, body }) => {
            print(out, &body)?;
            out.flush()?;
            anyhow::bail!(
                "the node answered {status}: {}",
                body.get("error")
                    .and_then(Value::as_str)
                    .unwrap_or("(no reason given)")
            )
        }
        Err(e) => Err(failed(e)),
    }
}
