//! The node's HTTP service (spec §9): JSON endpoints over the database
//! and the object store, every one but `/health`, `/status` and
//! `/public-key` signed (spec §8) by a key the node authorizes.
//!
//! Nothing a request leaves behind lives in the process: heads, user
//! spaces, nonces, runs and who holds which object are in the database,
//! bytes in the object store, so a node restarted (or another beside it)
//! answers the same.

use std::marker::PhantomData;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use axum::Json;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, FromRequest, Path as UrlPath, Request, State};
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::routing::{get, post};
use rye_cas::{Cas, ContentHash};
use rye_integrity::Keypair;
use rye_sync::auth;
use rye_sync::foldback::{self, Heads, Ran};
use rye_sync::objects::{self, Refused};
use rye_sync::snapshot::{self, NewSnapshot, Source};
use rye_sync::{SyncError, manifest, materialize, policy::Policy};
use serde_json::{Map, Value, json};
use tokio::sync::Semaphore;

use crate::bytes::ObjectBytes;
use crate::db::{Db, DbError, Delivered, Held, ThreadRow, Webhook};
use crate::keys::{self, Authorized, SCOPE_EXECUTE, SCOPE_PUSH, SCOPE_READ};
use crate::parsed::Parsed;
use crate::run::{RunError, Runner, Workspace, Workspaces};
use crate::tracked::Tracked;
use crate::watch::{Seen, Watch};
use crate::webhook;

mod api_keys;
mod gc;
mod jobs;
pub use gc::{GcSettings, Retention};

/// How a node is set up.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Where the node keeps its workspaces, and its database, objects and
    /// key unless they are set elsewhere.
    pub base: PathBuf,
    /// The database (`sqlite://PATH` or `postgres://…`); none: a SQLite
    /// file in `base`. Replicas of one node share a PostgreSQL database.
    pub database: Option<String>,
    /// The object store (`file:///PATH` or `s3://BUCKET[/PREFIX]`); none:
    /// files in `base`. Replicas share a bucket.
    pub objects: Option<String>,
    /// Settings of the object store besides the environment's `AWS_*`
    /// variables, by their lower-case names (`aws_endpoint`, ...).
    pub object_options: Vec<(String, String)>,
    /// The folder of the node's signing key; none: `base/signing`.
    /// Replicas of one node share the key, so that a client pins one.
    pub signing_key_dir: Option<PathBuf>,
    /// The name it answers with (`remote_name`).
    pub name: String,
    /// Runs at once; one more is answered 503.
    pub max_concurrent: usize,
    /// A larger request body is answered 413.
    pub max_request_bytes: usize,
    /// What one principal may store; a `put` past it is answered 507.
    pub max_user_storage_bytes: u64,
    /// The version of Rye the node runs items with.
    pub system_version: String,
    /// Requests a minute each key may make of this replica on average,
    /// and at once; 0: no limit.
    pub rate_limit: (u32, u32),
    /// How long a run stays held by its replica without a renewal; a
    /// replica renews its runs four times as often, and a run whose
    /// replica died is marked interrupted this long after.
    pub lease: std::time::Duration,
    /// When and how the node collects garbage.
    pub gc: GcSettings,
    /// A key to authorize with every scope on start (`ed25519:…`), and its
    /// label.
    pub bootstrap: Option<(String, String)>,
    pub runner: Runner,
}

impl Settings {
    /// Defaults for a node at `base` running items with `runner`.
    pub fn new(base: PathBuf, runner: Runner) -> Self {
        Settings {
            base,
            database: None,
            objects: None,
            object_options: Vec::new(),
            signing_key_dir: None,
            name: "node".into(),
            max_concurrent: 8,
            max_request_bytes: 50 << 20,
            max_user_storage_bytes: 10 << 30,
            system_version: env!("CARGO_PKG_VERSION").into(),
            lease: std::time::Duration::from_secs(60),
            rate_limit: (0, 0),
            gc: GcSettings::default(),
            bootstrap: None,
            runner,
        }
    }
}

impl Settings {
    /// The folder of the node's signing and box keys.
    pub fn key_dir(&self) -> PathBuf {
        self.signing_key_dir
            .clone()
            .unwrap_or_else(|| self.base.join("signing"))
    }

    /// The database these settings name, its schema brought up to date.
    async fn open_db(&self) -> Result<Db, DbError> {
        match &self.database {
            Some(url) => Db::connect(url).await,
            None => Db::open(&self.base.join("node.db")).await,
        }
    }

    /// The object store these settings name (not yet asked anything).
    fn object_bytes(&self) -> std::io::Result<ObjectBytes> {
        match &self.objects {
            Some(url) => ObjectBytes::connect(url, &self.object_options),
            None => ObjectBytes::local(&self.base.join("objects")),
        }
    }
}

/// A running node.
pub struct Node {
    db: Db,
    bytes: ObjectBytes,
    key: Keypair,
    settings: Settings,
    slots: Arc<Semaphore>,
    active: AtomicUsize,
    /// Told when a job is queued here or a slot frees.
    queue: Arc<tokio::sync::Notify>,
    identity: Value,
    workspaces: Workspaces,
    parsed: Parsed,
    /// This replica's name, on the runs it holds.
    replica: String,
    /// The key secrets are sealed to (X25519), beside the signing key.
    box_key: rye_seal::BoxKey,
    metrics: crate::metrics::Metrics,
    rate_limit: Option<crate::limits::RateLimit>,
}

/// A slot of this replica's taken by one run. Given back, it tells the
/// queue, so that a job waiting for a slot is claimed at once.
struct Slot {
    permit: Option<tokio::sync::OwnedSemaphorePermit>,
    queue: Arc<tokio::sync::Notify>,
    /// Whether a run held it: a slot given back unused wakes nobody (the
    /// claimer that took it would wake itself, and claim again at once).
    used: bool,
}

impl Slot {
    /// Given back without a run having held it.
    fn unused(mut self) {
        self.used = false;
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        drop(self.permit.take());
        if self.used {
            self.queue.notify_one();
        }
    }
}

/// Renews the leases of the runs this replica holds, four times a lease,
/// and marks interrupted the runs whose replica let theirs run out; ends
/// with the node.
/// Ends the workers of workspaces no run has wanted for the runner's
/// `keep_hosts`, looking a few times as often.
async fn end_idle_workers(node: std::sync::Weak<Node>) {
    loop {
        let Some(idle) = node.upgrade().map(|n| n.settings.runner.keep_hosts) else {
            return;
        };
        if idle.is_zero() {
            // None are kept.
            return;
        }
        tokio::time::sleep((idle / 4).max(std::time::Duration::from_secs(1))).await;
        let Some(node) = node.upgrade() else {
            return;
        };
        let ended = node.workspaces.end_idle_workers(idle);
        if ended > 0 {
            tracing::debug!("{ended} idle run hosts ended");
        }
    }
}

async fn keep_leases(node: std::sync::Weak<Node>) {
    loop {
        let Some(every) = node.upgrade().map(|n| n.settings.lease / 4) else {
            return;
        };
        tokio::time::sleep(every.max(std::time::Duration::from_millis(250))).await;
        let Some(node) = node.upgrade() else {
            return;
        };
        if let Err(e) = node
            .db
            .renew_leases(&node.replica, node.lease_until())
            .await
        {
            tracing::error!("renewing this replica's leases: {e}");
        }
        match node.db.requeue_orphans(now_secs() as i64, None).await {
            Ok(0) => {}
            Ok(n) => {
                tracing::warn!(
                    "{n} queued runs whose replica let their lease run out are queued again"
                );
                node.queue.notify_one();
            }
            Err(e) => tracing::error!("looking for queued runs no replica holds: {e}"),
        }
        match node.db.interrupt_running(now_secs() as i64, None).await {
            Ok(0) => {}
            Ok(n) => {
                tracing::warn!("{n} runs whose replica let their lease run out were cut short")
            }
            Err(e) => tracing::error!("looking for runs no replica holds: {e}"),
        }
    }
}

/// Why a node could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(transparent)]
    Db(#[from] DbError),
    #[error("{0}")]
    Setup(String),
}

type Reply = (StatusCode, Json<Value>);

fn reply(status: StatusCode, body: Value) -> Reply {
    (status, Json(body))
}

fn error(status: StatusCode, message: impl Into<String>) -> Reply {
    reply(status, json!({"error": message.into()}))
}

fn refused(refused: Refused) -> Reply {
    let status = StatusCode::from_u16(refused.status).unwrap_or(StatusCode::BAD_REQUEST);
    (status, Json(refused.body))
}

fn internal(e: impl std::fmt::Display) -> Reply {
    tracing::error!("{e}");
    error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string())
}

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Now as snapshots record it (ISO 8601, `+00:00`).
fn iso_now() -> String {
    let stamp = rye_integrity::utc_timestamp(SystemTime::now());
    format!("{}+00:00", stamp.trim_end_matches('Z'))
}

/// The stores and key a node's settings name, opened: what a node
/// serves from, and what its administration commands write to.
struct Opened {
    db: Db,
    bytes: ObjectBytes,
    key: Keypair,
    box_key: rye_seal::BoxKey,
    key_dir: PathBuf,
}

impl Opened {
    async fn open(settings: &Settings) -> Result<Opened, StartError> {
        let base = &settings.base;
        std::fs::create_dir_all(base)
            .map_err(|e| StartError::Setup(format!("{}: {e}", base.display())))?;
        let db = settings.open_db().await?;
        let bytes = settings
            .object_bytes()
            .map_err(|e| StartError::Setup(format!("the object store: {e}")))?;
        if let Some(url) = &settings.objects {
            bytes.check().await.map_err(|e| {
                StartError::Setup(format!("the object store {url} does not answer: {e}"))
            })?;
        }
        let key_dir = settings.key_dir();
        let key = keys::identity(&key_dir).map_err(StartError::Setup)?;
        let box_key = rye_seal::BoxKey::load_or_create(&key_dir)
            .map_err(|e| StartError::Setup(e.to_string()))?;
        Ok(Opened {
            db,
            bytes,
            key,
            box_key,
            key_dir,
        })
    }
}

/// Authorizes `key` as `grant` says on the node `settings` describe, by a
/// document signed with the node's key, without serving: safe beside the
/// node's replicas running.
pub async fn authorize_key(
    settings: &Settings,
    key: &rye_integrity::PublicKey,
    grant: &keys::Grant<'_>,
) -> Result<(), StartError> {
    let opened = Opened::open(settings).await?;
    let document = keys::authorization(&opened.key, key, grant, SystemTime::now())
        .map_err(StartError::Setup)?;
    opened
        .db
        .authorize(key.fingerprint(), &document, now_secs() as i64)
        .await?;
    Ok(())
}

/// Checks what a node on `settings` stands on, without serving: the
/// database (reached, schema applied, its clock against this machine's),
/// the object store (a key written, read back and deleted), and the keys
/// (loaded, private ones readable by their owner only). Each check's
/// name, whether it holds, and what was found.
pub async fn doctor(settings: &Settings) -> Vec<(String, bool, String)> {
    let mut checks = Vec::new();
    match settings.open_db().await {
        Ok(db) => {
            checks.push((
                "database".into(),
                true,
                format!("{} reached, schema up to date", db.kind()),
            ));
            match db.server_time().await {
                Ok(Some(theirs)) => {
                    let ours = SystemTime::now()
                        .duration_since(UNIX_EPOCH)
                        .map_or(0.0, |d| d.as_secs_f64());
                    let skew = theirs - ours;
                    // Signed requests allow 300 s, leases a fraction of
                    // their length: replicas need clocks that agree.
                    checks.push((
                        "clock".into(),
                        skew.abs() <= 5.0,
                        format!("the database's clock is {skew:+.3} s from this machine's"),
                    ));
                }
                Ok(None) => {}
                Err(e) => checks.push(("clock".into(), false, e.to_string())),
            }
        }
        Err(e) => checks.push(("database".into(), false, e.to_string())),
    }
    match settings.object_bytes() {
        Ok(bytes) => match bytes.check().await {
            Ok(()) => checks.push((
                "objects".into(),
                true,
                "a key written, read back and deleted".into(),
            )),
            Err(e) => checks.push(("objects".into(), false, e.to_string())),
        },
        Err(e) => checks.push(("objects".into(), false, e.to_string())),
    }
    let key_dir = settings.key_dir();
    match Keypair::load(&key_dir) {
        Ok(key) => checks.push((
            "signing key".into(),
            true,
            format!("fp:{}", key.fingerprint()),
        )),
        Err(e) => checks.push((
            "signing key".into(),
            false,
            format!("{}: {e}", key_dir.display()),
        )),
    }
    match std::fs::read_to_string(key_dir.join("box_key.pem")) {
        Ok(_) => match rye_seal::BoxKey::load_or_create(&key_dir) {
            Ok(key) => checks.push(("box key".into(), true, format!("fp:{}", key.fingerprint()))),
            Err(e) => checks.push(("box key".into(), false, e.to_string())),
        },
        Err(e) => checks.push((
            "box key".into(),
            false,
            format!("{}: {e}", key_dir.join("box_key.pem").display()),
        )),
    }
    for private in ["private_key.pem", "box_key.pem"] {
        use std::os::unix::fs::PermissionsExt as _;
        if let Ok(meta) = std::fs::metadata(key_dir.join(private)) {
            let mode = meta.permissions().mode() & 0o777;
            checks.push((
                format!("{private} permissions"),
                mode & 0o077 == 0,
                format!("{mode:o}"),
            ));
        }
    }
    checks
}

/// This replica's name, kept in its folder so that a replica started again
/// knows the runs its earlier process held.
fn replica_name(base: &std::path::Path) -> Result<String, StartError> {
    let file = base.join("replica");
    let setup = |e: std::io::Error| StartError::Setup(format!("{}: {e}", file.display()));
    match std::fs::read_to_string(&file) {
        Ok(name) if !name.trim().is_empty() => return Ok(name.trim().to_owned()),
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(setup(e)),
    }
    let mut bytes = [0u8; 8];
    getrandom::fill(&mut bytes).map_err(|e| setup(std::io::Error::other(e.to_string())))?;
    let name = hex::encode(bytes);
    std::fs::write(&file, format!("{name}\n")).map_err(setup)?;
    Ok(name)
}

impl Node {
    /// Opens (creating) the node's stores, authorizes the bootstrap key,
    /// if any, marks the runs no replica holds any longer interrupted,
    /// and keeps the leases of this replica's runs for as long as the
    /// node lives.
    pub async fn open(settings: Settings) -> Result<Arc<Node>, StartError> {
        let Opened {
            db,
            bytes,
            key,
            box_key,
            key_dir,
        } = Opened::open(&settings).await?;
        let base = &settings.base;
        let replica = replica_name(base)?;
        let requeued = db
            .requeue_orphans(now_secs() as i64, Some(&replica))
            .await?;
        if requeued > 0 {
            tracing::warn!("{requeued} queued runs no replica holds any longer are queued again");
        }
        let interrupted = db
            .interrupt_running(now_secs() as i64, Some(&replica))
            .await?;
        if interrupted > 0 {
            tracing::warn!("{interrupted} runs no replica holds any longer were cut short");
        }
        // The workspaces an earlier start left (runs killed midway among
        // them) are swept: no run of this start uses them.
        let executions = base.join("executions");
        let workspaces = Workspaces::open(executions.clone(), 2 * settings.max_concurrent.max(1))
            .map_err(|e| {
            StartError::Setup(format!("sweeping {}: {e}", executions.display()))
        })?;
        if let Some((wire, label)) = &settings.bootstrap {
            let public = keys::read_wire_key(wire)
                .map_err(|e| StartError::Setup(format!("the bootstrap key: {e}")))?;
            if db.authorized_key(public.fingerprint()).await?.is_none() {
                let document = keys::authorization(
                    &key,
                    &public,
                    &keys::Grant::of(label, &[keys::ALL_SCOPES.to_owned()], "bootstrap"),
                    SystemTime::now(),
                )
                .map_err(StartError::Setup)?;
                db.authorize(public.fingerprint(), &document, now_secs() as i64)
                    .await?;
            }
        }
        let created = std::fs::metadata(&key_dir)
            .and_then(|m| m.modified())
            .unwrap_or_else(|_| SystemTime::now());
        let identity = keys::public_key_document(
            &key,
            &box_key.wire(),
            &rye_integrity::utc_timestamp(created),
        );
        let rate_limit =
            crate::limits::RateLimit::new(settings.rate_limit.0, settings.rate_limit.1);
        let node = Arc::new(Node {
            slots: Arc::new(Semaphore::new(settings.max_concurrent.max(1))),
            active: AtomicUsize::new(0),
            queue: Arc::new(tokio::sync::Notify::new()),
            db,
            bytes,
            key,
            settings,
            identity,
            workspaces,
            parsed: Parsed::default(),
            replica,
            box_key,
            metrics: crate::metrics::Metrics::default(),
            rate_limit,
        });
        tokio::spawn(keep_leases(Arc::downgrade(&node)));
        tokio::spawn(end_idle_workers(Arc::downgrade(&node)));
        tokio::spawn(jobs::keep_claiming(Arc::downgrade(&node)));
        if let Some(every) = node.settings.gc.every {
            tokio::spawn(gc::keep_collecting(Arc::downgrade(&node), every));
        }
        Ok(node)
    }

    /// One of this replica's slots to run an item in, if one is free.
    fn try_slot(&self) -> Option<Slot> {
        let permit = Arc::clone(&self.slots).try_acquire_owned().ok()?;
        Some(Slot {
            permit: Some(permit),
            queue: Arc::clone(&self.queue),
            used: true,
        })
    }

    /// A 429 when `principal` is over its rate limit.
    fn over_limit(&self, principal: &str) -> Result<(), Reply> {
        let Some(limit) = &self.rate_limit else {
            return Ok(());
        };
        limit.take(principal, std::time::Instant::now()).map_err(|wait| {
            let ms = wait.as_millis().max(1) as u64;
            reply(
                StatusCode::TOO_MANY_REQUESTS,
                json!({"error": format!("key fp:{principal} is over its rate limit; try again in {ms} ms"),
                       "retry_after_ms": ms}),
            )
        })
    }

    /// How long a run's lease lasts from its last renewal.
    fn lease_until(&self) -> i64 {
        now_secs() as i64 + self.settings.lease.as_secs().max(1) as i64
    }

    /// The node's key fingerprint.
    pub fn fingerprint(&self) -> &str {
        self.key.fingerprint()
    }

    pub fn db(&self) -> &Db {
        &self.db
    }

    /// Authorizes `key` with `scopes`, by a document this node signs.
    pub async fn authorize(
        &self,
        key: &rye_integrity::PublicKey,
        label: &str,
        scopes: &[String],
    ) -> Result<(), String> {
        let document = keys::authorization(
            &self.key,
            key,
            &keys::Grant::of(label, scopes, "admin"),
            SystemTime::now(),
        )?;
        self.db
            .authorize(key.fingerprint(), &document, now_secs() as i64)
            .await
            .map_err(|e| e.to_string())
    }

    /// The object store as requests and runs write to it: each write
    /// staged, then noted to be held.
    fn cas(&self) -> Cas<Tracked<ObjectBytes>> {
        Cas::new(Tracked::staged(
            self.bytes.clone(),
            self.db.clone(),
            self.settings.gc.staged_for.as_secs() as i64,
        ))
    }

    /// Notes what went through `cas` as `principal`'s.
    async fn hold(&self, principal: &str, cas: &Cas<Tracked<ObjectBytes>>) -> Result<(), Reply> {
        let written = cas
            .storage()
            .to_hold()
            .map_err(|e| error(StatusCode::SERVICE_UNAVAILABLE, e.to_string()))?;
        self.db
            .hold(principal, &written, now_secs() as i64)
            .await
            .map_err(internal)
    }
}

/// `POST /admin/authorized-keys {public_key, label, scopes, expires_at}`:
/// authorizes a key by a document this node signs.
async fn admin_authorize(State(node): State<Arc<Node>>, call: Signed<Manage>) -> Answer {
    let body = json_body(&call.body)?;
    let bad = |m: String| error(StatusCode::BAD_REQUEST, m);
    let wire = body
        .get("public_key")
        .and_then(Value::as_str)
        .ok_or_else(|| bad("no public_key (ed25519:<base64 PEM>)".into()))?;
    let key = keys::read_wire_key(wire).map_err(bad)?;
    let label = body.get("label").and_then(Value::as_str).unwrap_or("");
    let scopes: Vec<String> = match body.get("scopes") {
        None | Some(Value::Null) => vec![keys::ALL_SCOPES.to_owned()],
        Some(Value::Array(list)) if !list.is_empty() => list
            .iter()
            .map(|s| s.as_str().map(str::to_owned))
            .collect::<Option<_>>()
            .ok_or_else(|| bad("scopes is a list of names".into()))?,
        Some(_) => return Err(bad("scopes is a list of names, at least one".into())),
    };
    let expires_at = match body.get("expires_at") {
        None | Some(Value::Null) => None,
        Some(Value::String(at)) => Some(at.as_str()),
        Some(_) => return Err(bad("expires_at is YYYY-MM-DDTHH:MM:SSZ".into())),
    };
    let publish_namespaces: Vec<String> = match body.get("publish_namespaces") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(list)) if list.len() <= 100 => list
            .iter()
            .map(|s| s.as_str().map(str::to_owned))
            .collect::<Option<_>>()
            .ok_or_else(|| bad("publish_namespaces is a list of namespaces".into()))?,
        Some(_) => {
            return Err(bad(
                "publish_namespaces is a list of at most 100 namespaces".into(),
            ));
        }
    };
    let created_via = format!("admin:fp:{}", call.principal);
    let grant = keys::Grant {
        publish_namespaces: &publish_namespaces,
        expires_at,
        ..keys::Grant::of(label, &scopes, &created_via)
    };
    let document = keys::authorization(&node.key, &key, &grant, SystemTime::now()).map_err(bad)?;
    node.db
        .authorize(key.fingerprint(), &document, now_secs() as i64)
        .await
        .map_err(internal)?;
    ok(
        json!({"fingerprint": format!("fp:{}", key.fingerprint()), "label": label,
              "scopes": scopes, "publish_namespaces": publish_namespaces,
              "expires_at": expires_at}),
    )
}

/// `GET /admin/authorized-keys`: every key the node lets in.
async fn admin_keys(State(node): State<Arc<Node>>, _call: Signed<Manage>) -> Answer {
    let listed: Vec<Value> = node
        .db
        .authorized_keys()
        .await
        .map_err(internal)?
        .into_iter()
        .filter_map(|(fp, doc)| {
            let key = keys::read_authorization(&doc, node.key.public()).ok()?;
            Some(
                json!({"fingerprint": format!("fp:{fp}"), "label": key.label,
                        "scopes": key.scopes, "publish_namespaces": key.publish_namespaces,
                        "expires_at": key.expires_at}),
            )
        })
        .collect();
    ok(json!({"keys": listed}))
}

/// `DELETE /admin/authorized-keys/{fingerprint}`: never the last key that
/// may manage keys (409), so a node cannot lock its administrators out.
async fn admin_revoke(
    State(node): State<Arc<Node>>,
    UrlPath(fingerprint): UrlPath<String>,
    _call: Signed<Manage>,
) -> Answer {
    let fingerprint = fingerprint.trim_start_matches("fp:").to_owned();
    let public = node.key.public().clone();
    let manages = move |doc: &str| {
        keys::read_authorization(doc, &public)
            .is_ok_and(|a| a.allows(keys::SCOPE_MANAGE, SystemTime::now()))
    };
    match node
        .db
        .revoke_key(&fingerprint, manages)
        .await
        .map_err(internal)?
    {
        crate::db::Revoked::Gone => ok(json!({"revoked": format!("fp:{fingerprint}")})),
        crate::db::Revoked::NotFound => Err(error(
            StatusCode::NOT_FOUND,
            format!("fp:{fingerprint} is not authorized here"),
        )),
        crate::db::Revoked::LastManager => Err(error(
            StatusCode::CONFLICT,
            format!(
                "fp:{fingerprint} is the last key that may manage keys; authorize another first"
            ),
        )),
    }
}

/// Who a request acted for, once its signature or API key was checked:
/// for the request's log line.
#[derive(Clone, Default)]
struct Caller(Arc<std::sync::OnceLock<String>>);

impl Caller {
    /// Notes `principal` as the one the request in `parts` acts for.
    fn note(parts: &axum::http::request::Parts, principal: &str) {
        if let Some(caller) = parts.extensions.get::<Caller>() {
            let _ = caller.0.set(principal.to_owned());
        }
    }
}

/// Counts every request by its route and status, with its latency, and
/// logs it (`rye_node::access`: method, route, status, milliseconds and
/// the principal, never a body or a query).
async fn counted(
    State(node): State<Arc<Node>>,
    mut request: Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    let route = request
        .extensions()
        .get::<axum::extract::MatchedPath>()
        .map_or_else(|| "unmatched".to_owned(), |p| p.as_str().to_owned());
    let method = request.method().clone();
    let caller = Caller::default();
    request.extensions_mut().insert(caller.clone());
    let started = std::time::Instant::now();
    let response = next.run(request).await;
    let (status, took) = (response.status().as_u16(), started.elapsed());
    node.metrics.request(&route, status, took);
    tracing::info!(
        target: "rye_node::access",
        method = method.as_str(),
        route,
        status,
        ms = took.as_secs_f64() * 1e3,
        principal = caller.0.get().map(|p| format!("fp:{p}")),
        "request"
    );
    response
}

/// `GET /metrics` (no auth, like `/health`): Prometheus' text format.
async fn metrics(State(node): State<Arc<Node>>) -> Result<axum::response::Response, Reply> {
    let stored = node.db.all_stored_bytes().await.map_err(internal)?;
    let queued = node.db.queued().await.map_err(internal)?;
    let text = node.metrics.render(crate::metrics::Gauges {
        active: node.active.load(Ordering::Relaxed),
        max_concurrent: node.settings.max_concurrent,
        stored_bytes: stored,
        queued,
    });
    Ok(axum::response::Response::builder()
        .header("content-type", "text/plain; version=0.0.4; charset=utf-8")
        .body(axum::body::Body::from(text))
        .expect("a valid response"))
}

/// The service's routes over `node`.
pub fn router(node: Arc<Node>) -> axum::Router {
    let limit = node.settings.max_request_bytes;
    axum::Router::new()
        .route("/health", get(health))
        .route("/status", get(status))
        .route("/public-key", get(public_key))
        .route("/objects/has", post(objects_has))
        .route("/objects/put", post(objects_put))
        .route("/objects/get", post(objects_get))
        .route("/push", post(push))
        .route("/push/user-space", post(push_user_space))
        .route("/user-space", get(user_space))
        .route("/execute", post(execute))
        .route("/webhook-bindings", post(bind_webhook).get(webhooks))
        .route("/vault/set", post(vault_set))
        .route("/vault/list", get(vault_list))
        .route("/vault/delete", post(vault_delete))
        .route(
            "/webhook-bindings/{hook_id}",
            axum::routing::delete(unbind_webhook),
        )
        .route("/threads", get(threads))
        .route("/threads/{id}", get(thread))
        .route("/history", get(history))
        .route("/api-keys", post(api_keys::create).get(api_keys::list))
        .route(
            "/api-keys/{key_id}",
            axum::routing::delete(api_keys::revoke),
        )
        .route("/gc", post(collect_garbage))
        .route("/gc/stats", get(gc_stats))
        .route("/metrics", get(metrics))
        .route(
            "/admin/authorized-keys",
            post(admin_authorize).get(admin_keys),
        )
        .route(
            "/admin/authorized-keys/{fingerprint}",
            axum::routing::delete(admin_revoke),
        )
        .layer(axum::middleware::from_fn_with_state(
            Arc::clone(&node),
            counted,
        ))
        .layer(DefaultBodyLimit::max(limit))
        .with_state(node)
}

/// Serves `node` on `listener` until the process ends.
pub async fn serve(node: Arc<Node>, listener: tokio::net::TcpListener) -> std::io::Result<()> {
    axum::serve(listener, router(node)).await
}

async fn health() -> Json<Value> {
    Json(json!({
        "status": "ok",
        "version": env!("CARGO_PKG_VERSION"),
        "engine_version": env!("CARGO_PKG_VERSION"),
    }))
}

async fn status(State(node): State<Arc<Node>>) -> Json<Value> {
    Json(json!({
        "node_id": format!("fp:{}", node.fingerprint()),
        "node_name": node.settings.name,
        "healthy": true,
        "active": node.active.load(Ordering::Relaxed),
        "max_concurrent": node.settings.max_concurrent,
        "system_version": node.settings.system_version,
        "capabilities": {"provides": ["execute", "sync"], "routes": []},
        "limits": {
            "max_request_bytes": node.settings.max_request_bytes,
            "max_batch": objects::MAX_BATCH,
            "max_user_storage_bytes": node.settings.max_user_storage_bytes,
        },
    }))
}

async fn public_key(State(node): State<Arc<Node>>) -> Json<Value> {
    Json(node.identity.clone())
}

/// The principal (key fingerprint) a signed request comes from, checked
/// for `scope`.
async fn signed(
    node: &Node,
    method: &Method,
    uri: &Uri,
    headers: &HeaderMap,
    body: &[u8],
    scope: &str,
) -> Result<String, Reply> {
    let unauthorized = |message: String| error(StatusCode::UNAUTHORIZED, message);
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let claimed = header(auth::KEY_ID)
        .and_then(|id| id.strip_prefix("fp:"))
        .unwrap_or_default()
        .to_owned();
    let authorized: Option<Authorized> = if claimed.is_empty() {
        None
    } else {
        match node.db.authorized_key(&claimed).await.map_err(internal)? {
            Some(document) => match keys::read_authorization(&document, node.key.public()) {
                Ok(authorized) => Some(authorized),
                Err(e) => {
                    tracing::warn!("the authorization of {claimed} is refused: {e}");
                    None
                }
            },
            None => None,
        }
    };
    let request = auth::Request {
        method: method.as_str(),
        path: uri.path(),
        query: uri.query(),
        body,
    };
    let now = now_secs();
    let verified = auth::verify(header, &request, node.fingerprint(), now, |fp| {
        authorized
            .as_ref()
            .filter(|a| a.fingerprint == fp)
            .map(|a| a.key.clone())
    })
    .map_err(|e| unauthorized(e.to_string()))?;
    let authorized = authorized.expect("a verified request's key is authorized");
    if !authorized.allows(scope, SystemTime::now()) {
        return Err(error(
            StatusCode::FORBIDDEN,
            format!(
                "key fp:{} may not {scope} (or its authorization expired)",
                authorized.fingerprint
            ),
        ));
    }
    node.over_limit(&verified.fingerprint)?;
    let fresh = node
        .db
        .fresh_nonce(
            &verified.nonce_key,
            now as i64,
            auth::NONCE_WINDOW_SECS as i64,
        )
        .await
        .map_err(internal)?;
    if !fresh {
        return Err(unauthorized(
            "the request was seen before (its nonce is spent)".into(),
        ));
    }
    Ok(verified.fingerprint)
}

/// What a request may do, named by its scope.
trait Scope {
    const NAME: &'static str;
}
struct Push;
impl Scope for Push {
    const NAME: &'static str = SCOPE_PUSH;
}
struct Execute;
impl Scope for Execute {
    const NAME: &'static str = SCOPE_EXECUTE;
}
struct Read;
impl Scope for Read {
    const NAME: &'static str = SCOPE_READ;
}
struct Manage;
impl Scope for Manage {
    const NAME: &'static str = keys::SCOPE_MANAGE;
}

/// A request whose signature holds, by a key allowed scope `S`, or that
/// carries an API key allowed it: who it acts for, its URI and its body.
struct Signed<S> {
    principal: String,
    uri: Uri,
    body: Bytes,
    /// The API key it came with, if it came with one.
    api_key: Option<String>,
    scope: PhantomData<S>,
}

impl<S: Scope> FromRequest<Arc<Node>> for Signed<S> {
    type Rejection = Reply;

    async fn from_request(request: Request, node: &Arc<Node>) -> Result<Self, Reply> {
        let (parts, body) = request.into_parts();
        let body = Bytes::from_request(Request::from_parts(parts.clone(), body), node)
            .await
            .map_err(|e| error(e.status(), e.body_text()))?;
        let bearing = parts
            .headers
            .contains_key(axum::http::header::AUTHORIZATION);
        let (principal, api_key) = match (bearing, parts.headers.contains_key(auth::SIGNATURE)) {
            (true, true) => {
                return Err(error(
                    StatusCode::UNAUTHORIZED,
                    "a request is signed or carries an API key, not both",
                ));
            }
            (true, false) => {
                let (principal, key_id) = api_keys::bearer(node, &parts.headers, S::NAME).await?;
                (principal, Some(key_id))
            }
            (false, _) => {
                let principal = signed(
                    node,
                    &parts.method,
                    &parts.uri,
                    &parts.headers,
                    &body,
                    S::NAME,
                )
                .await?;
                (principal, None)
            }
        };
        Caller::note(&parts, &principal);
        Ok(Signed {
            principal,
            uri: parts.uri,
            body,
            api_key,
            scope: PhantomData,
        })
    }
}

/// A handler's answer: a reply either way.
type Answer = Result<Reply, Reply>;

fn ok(body: Value) -> Answer {
    Ok(reply(StatusCode::OK, body))
}

fn json_body(body: &[u8]) -> Result<Value, Reply> {
    let value: Value = serde_json::from_slice(body).map_err(|e| {
        error(
            StatusCode::BAD_REQUEST,
            format!("the body is not JSON: {e}"),
        )
    })?;
    if !value.is_object() {
        return Err(error(
            StatusCode::BAD_REQUEST,
            "the body is not a JSON object",
        ));
    }
    Ok(value)
}

fn query(uri: &Uri, name: &str) -> Option<String> {
    auth::query_pairs(uri.query().unwrap_or_default())
        .into_iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v)
}

/// A project path as the node keys projects by: text of 1 to 512
/// characters, no control characters.
fn project_path(body: &Value) -> Result<String, Reply> {
    let path = body
        .get("project_path")
        .and_then(Value::as_str)
        .ok_or_else(|| error(StatusCode::BAD_REQUEST, "no project_path (text)"))?;
    if path.is_empty() || path.chars().count() > 512 || path.chars().any(char::is_control) {
        return Err(error(
            StatusCode::BAD_REQUEST,
            "project_path must be 1 to 512 characters, none a control character",
        ));
    }
    Ok(path.to_owned())
}

fn hash_field(body: &Value, field: &str) -> Result<Option<ContentHash>, Reply> {
    match body.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(text))
            if text.len() == 64 && text.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) =>
        {
            Ok(text.parse().ok())
        }
        Some(other) => Err(error(
            StatusCode::BAD_REQUEST,
            format!("{field} {other} is no hash (64 lowercase hex digits)"),
        )),
    }
}

async fn objects_has(State(node): State<Arc<Node>>, call: Signed<Push>) -> Answer {
    let asked = objects::hashes(&json_body(&call.body)?).map_err(refused)?;
    let hexes: Vec<String> = asked.iter().map(ContentHash::hex).collect();
    let lacking = node
        .db
        .missing(&call.principal, &hexes)
        .await
        .map_err(internal)?;
    let (missing, present): (Vec<String>, Vec<String>) =
        hexes.into_iter().partition(|h| lacking.contains(h));
    ok(json!({"present": present, "missing": missing}))
}

async fn objects_put(State(node): State<Arc<Node>>, call: Signed<Push>) -> Answer {
    let request = json_body(&call.body)?;
    let incoming = call.body.len() as u64 / 4 * 3;
    let stored = node
        .db
        .stored_bytes(&call.principal)
        .await
        .map_err(internal)?;
    let quota = node.settings.max_user_storage_bytes;
    if stored.saturating_add(incoming) > quota {
        // Past the quota: what the principal no longer reaches is let go
        // first (at most once in ten minutes), and the put tried again.
        let stored = match auto_collect(&node, &call.principal).await? {
            Some(left) => left,
            None => stored,
        };
        if stored.saturating_add(incoming) > quota {
            return Err(error(
                StatusCode::INSUFFICIENT_STORAGE,
                format!(
                    "storing {incoming} more bytes would pass this key's {quota} (it holds {stored})"
                ),
            ));
        }
    }
    let (request, manifests) = expand_deltas(&node, &call.principal, request).await?;
    // Stored and recorded in a task of its own, so a client that hangs up
    // mid-put leaves what reached the store held by it, not orphaned.
    let principal = call.principal;
    let store = tokio::spawn(async move {
        let cas = node.cas();
        // The batch's hashes are staged in one statement before any of
        // its bytes are written.
        let named: Vec<String> = request
            .get("entries")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|e| e.get("hash").and_then(Value::as_str))
            .filter(|h| h.len() == 64 && h.bytes().all(|b| b.is_ascii_hexdigit()))
            .map(str::to_owned)
            .collect();
        if let Err(e) = cas.storage().stage(&named).await {
            let refused = Refused {
                status: 500,
                body: json!({"error": format!("staging the objects: {e}")}),
            };
            return (Err(refused), Ok(()));
        }
        let mut answer = objects::put(&cas, &request).await;
        // The manifests sent as deltas were checked against their hashes
        // already; they are stored once the rest is, and a store that
        // fails them fails the put as it fails any object.
        if let Ok(stored) = &mut answer {
            for (manifest, bytes) in manifests {
                let hash = match cas.put_canonical(&bytes).await {
                    Ok(hash) => hash,
                    Err(e) => {
                        answer = Err(Refused {
                            status: 500,
                            body: json!({"error": format!("the store failed: {e}")}),
                        });
                        break;
                    }
                };
                node.parsed.keep(hash, manifest);
                if let Some(list) = stored.get_mut("stored").and_then(Value::as_array_mut) {
                    list.push(json!(hash.hex()));
                }
            }
        }
        // Whatever reached the store is the principal's, even if a later
        // entry failed to write.
        let held = node.hold(&principal, &cas).await;
        (answer, held)
    });
    let (answer, held) = store
        .await
        .map_err(|e| internal(format!("storing the objects failed: {e}")))?;
    held?;
    ok(answer.map_err(refused)?)
}

/// The aggressive collection of a principal past its quota, unless one
/// ran within ten minutes; what it holds after, if one ran.
async fn auto_collect(node: &Node, principal: &str) -> Result<Option<u64>, Reply> {
    let now = now_secs() as i64;
    let recent = node
        .db
        .gc_log(principal, 20)
        .await
        .map_err(internal)?
        .into_iter()
        .any(|(at, report)| at > now - 600 && report["reason"] == "quota");
    if recent {
        return Ok(None);
    }
    gc::collect(node, principal, Retention::AGGRESSIVE, false, "quota")
        .await
        .map_err(internal)?;
    Ok(Some(
        node.db.stored_bytes(principal).await.map_err(internal)?,
    ))
}

/// At most this many manifests may come as deltas in one `put`.
const MAX_DELTAS: usize = 4;

/// A `put`'s manifests sent as changes to one the principal holds
/// (`{hash, kind: "object", delta: {base, items: {path: hash | null},
/// files: {...}}}`, `null` removing a path) made whole again, so a push
/// of a large project with a few changes sends only the changes. Each
/// whole manifest is checked against its hash as any object is, and
/// taken out of the request: the request with the rest, and the
/// manifests to store.
async fn expand_deltas(
    node: &Node,
    principal: &str,
    mut request: Value,
) -> Result<(Value, Vec<(Arc<Value>, Vec<u8>)>), Reply> {
    let mut manifests = Vec::new();
    let Some(entries) = request.get_mut("entries").and_then(Value::as_array_mut) else {
        return Ok((request, manifests));
    };
    let bad = |message: String| error(StatusCode::BAD_REQUEST, message);
    let mut expanded = 0;
    for entry in entries.iter() {
        let Some(delta) = entry.get("delta") else {
            continue;
        };
        expanded += 1;
        if expanded > MAX_DELTAS {
            return Err(bad(format!(
                "more than {MAX_DELTAS} manifests sent as deltas"
            )));
        }
        let base = delta
            .get("base")
            .and_then(Value::as_str)
            .and_then(|h| h.parse::<ContentHash>().ok())
            .ok_or_else(|| bad("a delta names no base manifest".into()))?;
        let held = node
            .db
            .holdings(principal, &[base.hex()])
            .await
            .map_err(internal)?;
        if held.get(&base.hex()).and_then(|h| h.object_kind.as_deref()) != Some("source_manifest") {
            return Err(bad(format!(
                "a delta's base {} is no manifest this key holds",
                base.hex()
            )));
        }
        let kept = node
            .parsed
            .object(&node.cas(), &base)
            .await
            .map_err(internal)?
            .ok_or_else(|| internal(format!("manifest {} is gone from the store", base.hex())))?;
        let mut manifest = Value::clone(&kept);
        for section in ["items", "files"] {
            let Some(changes) = delta.get(section) else {
                continue;
            };
            let changes = changes
                .as_object()
                .ok_or_else(|| bad(format!("a delta's {section} is not a map")))?;
            if !manifest.get(section).is_some_and(Value::is_object) {
                manifest[section] = json!({});
            }
            let paths = manifest[section].as_object_mut().expect("made a map above");
            for (path, hash) in changes {
                match hash {
                    Value::Null => {
                        paths.remove(path);
                    }
                    Value::String(_) => {
                        paths.insert(path.clone(), hash.clone());
                    }
                    _ => {
                        return Err(bad(format!(
                            "a delta's {section}.{path} is no hash or null"
                        )));
                    }
                }
            }
        }
        // Paths were inserted out of order; the canonical form sorts them.
        let bytes = rye_cas::canonical::to_vec(&manifest);
        let actual = ContentHash::of(&bytes);
        let claimed = entry
            .get("hash")
            .and_then(Value::as_str)
            .unwrap_or_default();
        if claimed != actual.hex() {
            return Err(reply(
                StatusCode::BAD_REQUEST,
                json!({"error": "an object does not match its hash",
                       "errors": [{"hash": claimed, "error": format!("the manifest the delta gives hashes to {}", actual.hex())}]}),
            ));
        }
        manifests.push((Arc::new(manifest), bytes));
    }
    entries.retain(|e| e.get("delta").is_none());
    Ok((request, manifests))
}

async fn objects_get(State(node): State<Arc<Node>>, call: Signed<Read>) -> Answer {
    let asked = objects::hashes(&json_body(&call.body)?).map_err(refused)?;
    let hexes: Vec<String> = asked.iter().map(ContentHash::hex).collect();
    let held = node
        .db
        .held(&call.principal, &hexes)
        .await
        .map_err(internal)?;
    let mine: Vec<String> = hexes.into_iter().filter(|h| held.contains(h)).collect();
    ok(objects::get(&node.cas(), &json!({"hashes": mine}))
        .await
        .map_err(refused)?)
}

/// Checks that `principal` holds the whole closure of the manifest
/// `hash` of space `space`, answered from the database: the manifest read
/// once, then one query for its items and files and one for the items'
/// blobs.
async fn check_closure(
    node: &Node,
    principal: &str,
    hash: &ContentHash,
    space: &str,
    verified: Option<&Value>,
) -> Result<(), Reply> {
    let bad = |message: String, missing: Vec<String>| {
        reply(
            StatusCode::BAD_REQUEST,
            json!({"error": message, "missing": missing}),
        )
    };
    let held = node
        .db
        .holdings(principal, &[hash.hex()])
        .await
        .map_err(internal)?;
    if !held.contains_key(&hash.hex()) {
        return Err(bad(
            format!("manifest {} is not among this key's objects", hash.hex()),
            vec![hash.hex()],
        ));
    }
    let manifest = node
        .parsed
        .object(&node.cas(), hash)
        .await
        .map_err(internal)?
        .ok_or_else(|| internal(format!("manifest {} is gone from the store", hash.hex())))?;
    if manifest.get("kind").and_then(Value::as_str) != Some("source_manifest")
        || manifest.get("space").and_then(Value::as_str) != Some(space)
        || manifest.get("schema").and_then(Value::as_u64) != Some(rye_cas::SCHEMA)
    {
        return Err(bad(
            format!(
                "{} is no source_manifest of a {space} space (schema {})",
                hash.hex(),
                rye_cas::SCHEMA
            ),
            Vec::new(),
        ));
    }
    let named = |key: &str| -> Result<Vec<(&str, &str)>, Reply> {
        let Some(map) = manifest.get(key) else {
            return Ok(Vec::new());
        };
        let map = map.as_object().ok_or_else(|| {
            error(
                StatusCode::BAD_REQUEST,
                format!("the manifest's {key} is not a map"),
            )
        })?;
        map.iter()
            .map(|(path, h)| {
                if let Some(reason) = materialize::unsafe_path(path) {
                    return Err(error(
                        StatusCode::BAD_REQUEST,
                        format!("the manifest's path {path:?} is refused: {reason}"),
                    ));
                }
                match h.as_str() {
                    Some(h) if h.len() == 64 && h.bytes().all(|b| b.is_ascii_hexdigit()) => {
                        Ok((path.as_str(), h))
                    }
                    _ => Err(error(
                        StatusCode::BAD_REQUEST,
                        format!("the manifest's {path} names no hash"),
                    )),
                }
            })
            .collect()
    };
    let mut items = named("items")?;
    let mut files = named("files")?;
    // What a manifest whose closure was checked before (the head's) also
    // names is held already: only the rest is asked about. Objects a
    // head reaches are never let go while it does.
    if let Some(verified) = verified {
        let known = |key: &str| -> std::collections::HashSet<&str> {
            verified
                .get(key)
                .and_then(Value::as_object)
                .map(|m| m.values().filter_map(Value::as_str).collect())
                .unwrap_or_default()
        };
        let (known_items, known_files) = (known("items"), known("files"));
        items.retain(|(_, h)| !known_items.contains(h));
        files.retain(|(_, h)| !known_files.contains(h));
    }
    let first: Vec<String> = items
        .iter()
        .chain(&files)
        .map(|(_, h)| (*h).to_owned())
        .collect();
    let held = node
        .db
        .holdings(principal, &first)
        .await
        .map_err(internal)?;
    let mut missing = Vec::new();
    let mut blobs = Vec::new();
    for (path, h) in &items {
        match held.get(*h) {
            None => missing.push((*h).to_owned()),
            Some(holding) if holding.object_kind.as_deref() != Some("item_source") => {
                return Err(bad(
                    format!("item {path}: {h} is no item_source"),
                    Vec::new(),
                ));
            }
            Some(holding) => match &holding.content_blob {
                Some(blob) => blobs.push(blob.clone()),
                None => {
                    return Err(bad(
                        format!("item {path}: its item_source names no content blob"),
                        Vec::new(),
                    ));
                }
            },
        }
    }
    for (path, h) in &files {
        match held.get(*h) {
            None => missing.push((*h).to_owned()),
            Some(holding) if holding.kind != "blob" => {
                return Err(bad(format!("file {path}: {h} is no blob"), Vec::new()));
            }
            Some(_) => {}
        }
    }
    let held_blobs = node
        .db
        .holdings(principal, &blobs)
        .await
        .map_err(internal)?;
    for blob in blobs {
        match held_blobs.get(&blob) {
            Some(holding) if holding.kind == "blob" => {}
            _ => missing.push(blob),
        }
    }
    if !missing.is_empty() {
        missing.sort();
        missing.dedup();
        return Err(bad(
            "the manifest names objects this key has not stored".into(),
            missing,
        ));
    }
    Ok(())
}

/// `major.minor` of a version.
fn major_minor(version: &str) -> &str {
    let mut dots = version.match_indices('.');
    match (dots.next(), dots.next()) {
        (Some(_), Some((second, _))) => &version[..second],
        _ => version,
    }
}

async fn push(State(node): State<Arc<Node>>, call: Signed<Push>) -> Answer {
    let principal = call.principal;
    let outcome = async {
        let body = json_body(&call.body)?;
        let project = project_path(&body)?;
        let manifest = hash_field(&body, "project_manifest_hash")?
            .ok_or_else(|| error(StatusCode::BAD_REQUEST, "no project_manifest_hash"))?;
        let expected = hash_field(&body, "expected_snapshot_hash")?;
        if let Some(version) = body.get("system_version").and_then(Value::as_str)
            && version != "unknown"
            && major_minor(version) != major_minor(&node.settings.system_version)
        {
            return Err(reply(
                StatusCode::CONFLICT,
                json!({"error": format!("the client runs Rye {version}, this node {}: their major.minor differ",
                                         node.settings.system_version)}),
            ));
        }
        let head = node
            .db
            .head(&principal, &project)
            .await
            .map_err(internal)?;
        let moved = |actual: Option<String>| {
            reply(
                StatusCode::CONFLICT,
                json!({"error": "HEAD has moved", "expected": expected.map(|h| h.hex()), "actual": actual}),
            )
        };
        if head != expected.map(|h| h.hex()) {
            return Err(moved(head));
        }
        let user = node
            .db
            .user_space(&principal)
            .await
            .map_err(internal)?
            .and_then(|u| u.manifest.parse().ok());
        let cas = node.cas();
        let current = match expected {
            Some(head) => cas.get_object(&head).await.map_err(internal)?,
            None => None,
        };
        // The head already names this project and user space: nothing to
        // record, the push is confirmed as it stands.
        if let (Some(head), Some(c)) = (expected, &current) {
            let same = c["project_manifest_hash"].as_str() == Some(manifest.hex().as_str())
                && c["user_manifest_hash"].as_str().map(str::to_owned)
                    == user.map(|u: ContentHash| u.hex());
            if same {
                return Ok(json!({
                    "status": "ok",
                    "unchanged": true,
                    "remote_name": node.settings.name,
                    "project_path": project,
                    "project_manifest_hash": manifest.hex(),
                    "snapshot_hash": head.hex(),
                }));
            }
        }
        // Anything new names only what the principal holds: checked
        // from the database before any snapshot is stored. (The head's
        // own closure was checked when it was set.)
        let verified = match current
            .as_ref()
            .and_then(|c| c["project_manifest_hash"].as_str())
            .and_then(|h| h.parse::<ContentHash>().ok())
        {
            Some(hash) => node.parsed.object(&cas, &hash).await.map_err(internal)?,
            None => None,
        };
        // A collection that took some of the objects between the check
        // and the head's move moved the principal's fence: checked again.
        let mut snapshot = None;
        for _ in 0..FENCE_TRIES {
            let epoch = node.db.fence(&principal).await.map_err(internal)?;
            check_closure(&node, &principal, &manifest, "project", verified.as_deref()).await?;
            let hash = match snapshot {
                Some(hash) => hash,
                None => {
                    let hash = snapshot::store(
                        &cas,
                        &NewSnapshot {
                            project_manifest: manifest,
                            user_manifest: user,
                            parents: expected.into_iter().collect(),
                            source: Source::Push,
                            source_detail: String::new(),
                            metadata: Map::new(),
                        },
                        &iso_now(),
                    )
                    .await
                    .map_err(internal)?;
                    node.hold(&principal, &cas).await?;
                    snapshot = Some(hash);
                    hash
                }
            };
            let expected_hex = expected.map(|h| h.hex());
            match node
                .db
                .advance_head_fenced(
                    &principal,
                    &project,
                    expected_hex.as_deref(),
                    &hash.hex(),
                    now_secs() as i64,
                    epoch,
                )
                .await
                .map_err(internal)?
            {
                None => continue,
                Some(Ok(())) => {
                    return Ok(json!({
                        "status": "ok",
                        "remote_name": node.settings.name,
                        "project_path": project,
                        "project_manifest_hash": manifest.hex(),
                        "snapshot_hash": hash.hex(),
                    }));
                }
                Some(Err(m)) => return Err(moved(m.actual)),
            }
        }
        Err(fenced_out())
    }
    .await;
    ok(outcome?)
}

/// A push's check and its head's move are tried this many times while
/// collections keep taking objects between them.
const FENCE_TRIES: usize = 3;

fn fenced_out() -> Reply {
    error(
        StatusCode::SERVICE_UNAVAILABLE,
        "garbage collection kept moving this key's objects; push again",
    )
}

async fn push_user_space(State(node): State<Arc<Node>>, call: Signed<Push>) -> Answer {
    let principal = call.principal;
    let outcome = async {
        let body = json_body(&call.body)?;
        let manifest = hash_field(&body, "user_manifest_hash")?
            .ok_or_else(|| error(StatusCode::BAD_REQUEST, "no user_manifest_hash"))?;
        let expected = match body.get("expected_revision") {
            None | Some(Value::Null) => None,
            Some(v) => Some(v.as_i64().ok_or_else(|| {
                error(
                    StatusCode::BAD_REQUEST,
                    "expected_revision is not an integer",
                )
            })?),
        };
        for _ in 0..FENCE_TRIES {
            let epoch = node.db.fence(&principal).await.map_err(internal)?;
            check_closure(&node, &principal, &manifest, "user", None).await?;
            match node
                .db
                .push_user_space_fenced(
                    &principal,
                    expected,
                    &manifest.hex(),
                    now_secs() as i64,
                    epoch,
                )
                .await
                .map_err(internal)?
            {
                None => continue,
                Some(Ok(revision)) => {
                    return Ok(json!({
                        "status": "ok",
                        "user_manifest_hash": manifest.hex(),
                        "revision": revision,
                        "remote_name": node.settings.name,
                    }));
                }
                Some(Err(moved)) => {
                    return Err(reply(
                        StatusCode::CONFLICT,
                        json!({"error": "the user space has moved", "expected": expected, "actual": moved.actual}),
                    ));
                }
            }
        }
        Err(fenced_out())
    }
    .await;
    ok(outcome?)
}

async fn user_space(State(node): State<Arc<Node>>, call: Signed<Read>) -> Answer {
    let space = node
        .db
        .user_space(&call.principal)
        .await
        .map_err(internal)?
        .ok_or_else(|| error(StatusCode::NOT_FOUND, "no user space was pushed"))?;
    ok(json!({
        "user_manifest_hash": space.manifest,
        "revision": space.revision,
        "pushed_at": space.pushed_at,
        "remote_name": node.settings.name,
    }))
}

/// A project's head in the database, as the fold-back of a run moves it:
/// what the fold-back wrote is held as the run's before the head can name
/// it, so a reader never finds the head naming what its principal does
/// not hold.
struct DbHeads<'a> {
    node: &'a Node,
    cas: &'a Cas<Tracked<ObjectBytes>>,
    job: &'a Job,
    /// What was held on the way.
    held: std::sync::Mutex<Vec<Held>>,
}

impl Heads for DbHeads<'_> {
    async fn head(&self) -> Result<Option<ContentHash>, SyncError> {
        let head = self
            .node
            .db
            .head(&self.job.principal, &self.job.project)
            .await
            .map_err(|e| SyncError::Manifest(e.to_string()))?;
        head.map(|h| {
            h.parse()
                .map_err(|_| SyncError::Manifest(format!("the head {h:?} is no hash")))
        })
        .transpose()
    }

    async fn advance(
        &self,
        expected: Option<ContentHash>,
        new: ContentHash,
    ) -> Result<bool, SyncError> {
        let held = hold_run_writes(self.node, self.cas, self.job)
            .await
            .map_err(SyncError::Manifest)?;
        self.held.lock().expect("fold-back holds").extend(held);
        let expected = expected.map(|h| h.hex());
        Ok(self
            .node
            .db
            .advance_head(
                &self.job.principal,
                &self.job.project,
                expected.as_deref(),
                &new.hex(),
                now_secs() as i64,
            )
            .await
            .map_err(|e| SyncError::Manifest(e.to_string()))?
            .is_ok())
    }
}

/// The kind and id of an `item_id`: `tool:demo/wc`, or a bare id for a
/// tool.
fn item(item_id: &str) -> Result<(&str, &str), String> {
    let (kind, id) = item_id.split_once(':').unwrap_or(("tool", item_id));
    if !matches!(kind, "tool" | "directive" | "knowledge") {
        return Err(format!(
            "item kind {kind:?} is not tool, directive or knowledge"
        ));
    }
    let plain = !id.is_empty()
        && id.len() <= 256
        && !id.starts_with(['-', '/'])
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.' | b'/'))
        && id
            .split('/')
            .all(|part| !part.is_empty() && part != "." && part != "..");
    if !plain {
        return Err(format!("item id {id:?} is not a path of plain names"));
    }
    Ok((kind, id))
}

/// One run as the execute endpoint starts it.
struct Job {
    principal: String,
    project: String,
    kind: String,
    id: String,
    item_id: String,
    parameters: Value,
    base: ContentHash,
    thread_id: String,
    /// What the run's environment gets besides the node's own: the vault
    /// secrets it names, then the envelope's (which win). Kept in memory
    /// only, never in a record.
    secrets: std::collections::BTreeMap<String, String>,
    /// Names an envelope held that a run may not take.
    skipped: Vec<String>,
    /// A queued run's attempt (the first is 1); none for a run waited
    /// for.
    attempts: Option<i64>,
}

/// Opens the secrets `body` asks for (`vault_keys`, then
/// `secret_envelope`) for `principal`'s run; refused (400) with what is
/// wrong before anything runs.
async fn secrets_of(
    node: &Node,
    principal: &str,
    body: &Value,
) -> Result<(std::collections::BTreeMap<String, String>, Vec<String>), Reply> {
    let bad = |m: String| error(StatusCode::BAD_REQUEST, m);
    let mut vars = std::collections::BTreeMap::new();
    let mut skipped = Vec::new();
    let names: Vec<String> = match body.get("vault_keys") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(list)) if list.len() <= rye_seal::MAX_VARS => list
            .iter()
            .map(|n| n.as_str().map(str::to_owned))
            .collect::<Option<_>>()
            .ok_or_else(|| bad("vault_keys is a list of names".into()))?,
        Some(_) => return Err(bad("vault_keys is a list of at most 256 names".into())),
    };
    let kept = node
        .db
        .vault_get(principal, &names)
        .await
        .map_err(internal)?;
    if kept.len() != names.len() {
        let missing: Vec<&String> = names
            .iter()
            .filter(|n| !kept.iter().any(|(k, _)| k == *n))
            .collect();
        return Err(bad(format!("no secret {missing:?} in this key's vault")));
    }
    for (name, envelope) in kept {
        let envelope: Value = serde_json::from_str(&envelope).map_err(internal)?;
        let opened = node
            .box_key
            .open(&envelope)
            .map_err(|e| internal(format!("the vault's {name}: {e}")))?;
        vars.extend(opened.vars);
    }
    match body.get("secret_envelope") {
        None | Some(Value::Null) => {}
        Some(envelope) => {
            let opened = node
                .box_key
                .open(envelope)
                .map_err(|e| bad(format!("secret_envelope: {e}")))?;
            vars.extend(opened.vars);
            skipped = opened.skipped;
        }
    }
    Ok((vars, skipped))
}

/// `POST /vault/set {name, envelope}`: the envelope must hold exactly
/// `{name: value}`, sealed to this node.
async fn vault_set(State(node): State<Arc<Node>>, call: Signed<Execute>) -> Answer {
    let body = json_body(&call.body)?;
    let bad = |m: String| error(StatusCode::BAD_REQUEST, m);
    let name = body
        .get("name")
        .and_then(Value::as_str)
        .ok_or_else(|| bad("no name (text)".into()))?;
    rye_seal::name_allowed(name).map_err(|why| bad(format!("{name:?}: {why}")))?;
    let envelope = body
        .get("envelope")
        .ok_or_else(|| bad("no envelope".into()))?;
    let opened = node
        .box_key
        .open(envelope)
        .map_err(|e| bad(format!("envelope: {e}")))?;
    if opened.vars.len() != 1 || !opened.vars.contains_key(name) || !opened.skipped.is_empty() {
        return Err(bad(format!(
            "the envelope must hold exactly {{{name:?}: value}}"
        )));
    }
    node.db
        .vault_set(
            &call.principal,
            name,
            &envelope.to_string(),
            now_secs() as i64,
        )
        .await
        .map_err(internal)?;
    ok(json!({"stored": name}))
}

/// `GET /vault/list`: the names in the caller's vault.
async fn vault_list(State(node): State<Arc<Node>>, call: Signed<Read>) -> Answer {
    let names = node
        .db
        .vault_names(&call.principal)
        .await
        .map_err(internal)?;
    ok(json!({"names": names}))
}

/// `POST /vault/delete {name}`.
async fn vault_delete(State(node): State<Arc<Node>>, call: Signed<Execute>) -> Answer {
    let body = json_body(&call.body)?;
    let name = body
        .get("name")
        .and_then(Value::as_str)
        .ok_or_else(|| error(StatusCode::BAD_REQUEST, "no name (text)"))?;
    if node
        .db
        .vault_delete(&call.principal, name)
        .await
        .map_err(internal)?
    {
        ok(json!({"deleted": name}))
    } else {
        Err(error(
            StatusCode::NOT_FOUND,
            format!("no secret {name:?} in this key's vault"),
        ))
    }
}

/// `POST /webhook-bindings`: a new binding of an item and a project of
/// the caller's; its secret is in this answer and never again.
async fn bind_webhook(State(node): State<Arc<Node>>, call: Signed<Execute>) -> Answer {
    let body = json_body(&call.body)?;
    let project = project_path(&body)?;
    let item_id = body
        .get("item_id")
        .and_then(Value::as_str)
        .ok_or_else(|| error(StatusCode::BAD_REQUEST, "no item_id (text)"))?;
    item(item_id).map_err(|e| error(StatusCode::BAD_REQUEST, e))?;
    let description = match body.get("description") {
        None | Some(Value::Null) => None,
        Some(Value::String(text)) if text.chars().count() <= 1_000 => Some(text.clone()),
        Some(_) => {
            return Err(error(
                StatusCode::BAD_REQUEST,
                "description is text of at most 1,000 characters",
            ));
        }
    };
    // Secrets for its runs, checked now: they open for this node and
    // name secrets the key's vault has.
    let mut secrets = Map::new();
    for field in ["secret_envelope", "vault_keys"] {
        if let Some(value) = body.get(field).filter(|v| !v.is_null()) {
            secrets.insert(field.to_owned(), value.clone());
        }
    }
    let secrets = if secrets.is_empty() {
        None
    } else {
        let secrets = Value::Object(secrets);
        secrets_of(&node, &call.principal, &secrets).await?;
        Some(secrets)
    };
    let (hook_id, secret) = webhook::new_binding();
    let hook = Webhook {
        hook_id: hook_id.clone(),
        item_id: item_id.to_owned(),
        project_path: project.clone(),
        description,
        secret: secret.clone(),
        created_at: now_secs() as i64,
        secrets,
    };
    node.db
        .bind_webhook(&call.principal, &hook, hook.created_at)
        .await
        .map_err(internal)?;
    ok(
        json!({"hook_id": hook_id, "hmac_secret": secret, "item_id": item_id,
              "project_path": project, "description": hook.description,
              "has_secret_envelope": has_envelope(&hook), "vault_keys": vault_keys(&hook)}),
    )
}

fn has_envelope(hook: &Webhook) -> bool {
    hook.secrets
        .as_ref()
        .is_some_and(|s| s.get("secret_envelope").is_some())
}

fn vault_keys(hook: &Webhook) -> Value {
    hook.secrets
        .as_ref()
        .and_then(|s| s.get("vault_keys").cloned())
        .unwrap_or_else(|| json!([]))
}

/// `GET /webhook-bindings`: the caller's bindings, without their secrets.
async fn webhooks(State(node): State<Arc<Node>>, call: Signed<Read>) -> Answer {
    let hooks = node.db.webhooks(&call.principal).await.map_err(internal)?;
    let listed: Vec<Value> = hooks
        .iter()
        .map(|h| {
            json!({"hook_id": h.hook_id, "item_id": h.item_id, "project_path": h.project_path,
                   "description": h.description, "created_at": h.created_at,
                   "has_secret_envelope": has_envelope(h), "vault_keys": vault_keys(h)})
        })
        .collect();
    ok(json!({"bindings": listed, "remote_name": node.settings.name}))
}

/// `DELETE /webhook-bindings/{hook_id}`.
async fn unbind_webhook(
    State(node): State<Arc<Node>>,
    UrlPath(hook_id): UrlPath<String>,
    call: Signed<Execute>,
) -> Answer {
    if node
        .db
        .unbind_webhook(&call.principal, &hook_id)
        .await
        .map_err(internal)?
    {
        ok(json!({"deleted": hook_id}))
    } else {
        Err(error(
            StatusCode::NOT_FOUND,
            format!("no binding {hook_id} of this key's"),
        ))
    }
}

/// `/execute`: a signed request, or a webhook delivery; never both.
async fn execute(State(node): State<Arc<Node>>, request: Request) -> Answer {
    let hooked = webhook::present(request.headers());
    if hooked
        && (request.headers().contains_key(auth::SIGNATURE)
            || request
                .headers()
                .contains_key(axum::http::header::AUTHORIZATION))
    {
        return Err(error(
            StatusCode::UNAUTHORIZED,
            "a request is either signed (or carries an API key) or a webhook delivery, not both",
        ));
    }
    if hooked {
        return delivered(node, request).await;
    }
    let call = Signed::<Execute>::from_request(request, &node).await?;
    let body = json_body(&call.body)?;
    execute_as(node, call.principal, body).await
}

/// The one answer to every webhook delivery that may not run, whatever
/// the reason, so that a caller learns nothing of the bindings.
fn invalid_webhook(reason: &str) -> Reply {
    tracing::info!("webhook delivery refused: {reason}");
    error(StatusCode::UNAUTHORIZED, "Invalid webhook auth")
}

/// The answer to a delivery its headers or signature refuse.
fn webhook_refused(refusal: webhook::Refusal) -> Reply {
    match refusal {
        webhook::Refusal::Unauthorized(reason) => invalid_webhook(reason),
        webhook::Refusal::BadRequest(message) => error(StatusCode::BAD_REQUEST, message),
    }
}

/// A webhook delivery: the binding's item run on its project, as its
/// principal, once per delivery.
async fn delivered(node: Arc<Node>, request: Request) -> Answer {
    let (parts, body) = request.into_parts();
    let body = Bytes::from_request(Request::from_parts(parts.clone(), body), &node)
        .await
        .map_err(|e| error(e.status(), e.body_text()))?;
    let delivery = webhook::read(&parts.headers).map_err(webhook_refused)?;
    let sent = json_body(&body)?;
    let hook_id = sent
        .get("hook_id")
        .and_then(Value::as_str)
        .ok_or_else(|| invalid_webhook("no hook_id"))?;
    let (principal, binding) = node
        .db
        .webhook(hook_id)
        .await
        .map_err(internal)?
        .ok_or_else(|| invalid_webhook("no such binding"))?;
    let now = now_secs() as i64;
    let signature = delivery
        .verify(&binding.secret, &body, now)
        .map_err(webhook_refused)?;
    Caller::note(&parts, &principal);
    // The binding runs as its principal for as long as that key may run
    // items here.
    let allowed = match node.db.authorized_key(&principal).await.map_err(internal)? {
        Some(document) => keys::read_authorization(&document, node.key.public())
            .is_ok_and(|a| a.allows(SCOPE_EXECUTE, SystemTime::now())),
        None => false,
    };
    if !allowed {
        return Err(invalid_webhook("the binding's key may no longer run items"));
    }
    node.over_limit(&principal)?;
    match node
        .db
        .delivered(
            hook_id,
            &delivery.delivery_id,
            &signature,
            now,
            webhook::REMEMBER_SECS,
        )
        .await
        .map_err(internal)?
    {
        Delivered::New => {}
        Delivered::SameId => {
            return ok(json!({"status": "already processed", "hook_id": hook_id,
                              "delivery_id": delivery.delivery_id}));
        }
        Delivered::SameSignature => return Err(invalid_webhook("a replayed signature")),
    }
    let mut body = json!({
        "item_id": binding.item_id,
        "project_path": binding.project_path,
        "parameters": sent.get("parameters").cloned().unwrap_or(Value::Null),
    });
    if let Some(run_async) = sent.get("async") {
        body["async"] = run_async.clone();
    }
    if let Some(Value::Object(secrets)) = &binding.secrets {
        for (field, value) in secrets {
            body[field.as_str()] = value.clone();
        }
    }
    let answer = execute_as(Arc::clone(&node), principal, body).await;
    if let Err((status, _)) = &answer
        && *status == StatusCode::SERVICE_UNAVAILABLE
    {
        // Nothing ran: the sender's retry of this delivery is let in.
        if let Err(e) = node
            .db
            .forget_delivery(hook_id, &delivery.delivery_id)
            .await
        {
            tracing::error!("forgetting a delivery that did not run: {e}");
        }
    }
    answer
}

/// Runs what `body` asks (`item_id`, `project_path`, `parameters`,
/// `async`, `retries`) on `principal`'s project: at once, answered when
/// it ends, or queued for whichever replica has a slot first.
async fn execute_as(node: Arc<Node>, principal: String, body: Value) -> Answer {
    let project = project_path(&body)?;
    let item_id = body
        .get("item_id")
        .and_then(Value::as_str)
        .ok_or_else(|| error(StatusCode::BAD_REQUEST, "no item_id (text)"))?
        .to_owned();
    let (kind, id) = item(&item_id).map_err(|e| error(StatusCode::BAD_REQUEST, e))?;
    let parameters = match body.get("parameters") {
        None | Some(Value::Null) => json!({}),
        Some(p @ Value::Object(_)) => p.clone(),
        Some(_) => {
            return Err(error(
                StatusCode::BAD_REQUEST,
                "parameters is not a JSON object",
            ));
        }
    };
    let run_async = match body.get("async") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(run_async)) => *run_async,
        Some(_) => return Err(error(StatusCode::BAD_REQUEST, "async is true or false")),
    };
    let retries = jobs::retries(&body, run_async)?;
    let (secrets, skipped) = secrets_of(&node, &principal, &body).await?;
    let at_capacity = || {
        error(
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "the node runs {} items already",
                node.settings.max_concurrent
            ),
        )
    };
    // An async run takes a slot on whichever replica claims it; the
    // queue it waits in is bounded instead.
    let slot = if run_async {
        None
    } else {
        Some(node.try_slot().ok_or_else(at_capacity)?)
    };
    let base = node
        .db
        .head(&principal, &project)
        .await
        .map_err(internal)?
        .and_then(|h| h.parse::<ContentHash>().ok())
        .ok_or_else(|| {
            error(
                StatusCode::NOT_FOUND,
                format!("project {project:?} was never pushed to this node"),
            )
        })?;
    let Some(slot) = slot else {
        drop(secrets);
        let thread_id =
            jobs::enqueue(&node, &principal, &body, &item_id, id, &base, retries).await?;
        return Ok(reply(
            StatusCode::ACCEPTED,
            json!({"status": "accepted", "thread_id": thread_id, "async": true,
                   "message": "the run goes on; ask GET /threads/{thread_id} for how it ended"}),
        ));
    };
    let thread_id = start_thread(&node, &principal, &project, &item_id, id, &base).await?;
    let job = Job {
        principal,
        project,
        kind: kind.to_owned(),
        id: id.to_owned(),
        item_id,
        parameters,
        base,
        thread_id,
        secrets,
        skipped,
        attempts: None,
    };
    // The run is a task of its own, so a caller that hangs up does not cut
    // it short: it finishes, folds back and is recorded all the same.
    let run = tokio::spawn(async move {
        let _slot = slot;
        finish(&node, job).await
    });
    match run.await {
        Ok((status, record)) => Ok(reply(status, record)),
        Err(e) => Err(internal(format!("the run's task failed: {e}"))),
    }
}

/// A thread id for a run of `id` (`rye-remote-<id>-<ms>`), bumped by
/// `bump` ms to make it unique.
fn thread_id_of(id: &str, bump: i64) -> String {
    let ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64);
    format!("rye-remote-{}-{}", id.replace('/', "-"), ms + bump)
}

/// A new run's row, recorded as `status`.
fn thread_row(
    thread_id: &str,
    project: &str,
    item_id: &str,
    base: &ContentHash,
    status: &str,
) -> ThreadRow {
    ThreadRow {
        thread_id: thread_id.to_owned(),
        project_path: project.to_owned(),
        item_id: item_id.to_owned(),
        status: status.to_owned(),
        created_at: now_secs() as i64,
        finished_at: None,
        record: json!({"status": status, "thread_id": thread_id, "item_id": item_id,
                       "project_path": project, "snapshot_hash": base.hex()}),
    }
}

/// Records a run of `id` with `record` under a thread id of its own
/// (`rye-remote-<id>-<ms>`, bumped until it is new); the id and what
/// `record` answered.
async fn under_new_id<T, F, Fut>(id: &str, mut record: F) -> Result<(String, T), Reply>
where
    F: FnMut(String) -> Fut,
    Fut: std::future::Future<Output = Result<T, DbError>>,
{
    let mut last = None;
    for bump in 0..20 {
        let thread_id = thread_id_of(id, bump);
        match record(thread_id.clone()).await {
            Ok(answer) => return Ok((thread_id, answer)),
            Err(e) => last = Some(e),
        }
    }
    Err(internal(last.map_or_else(
        || "no thread id".to_owned(),
        |e| e.to_string(),
    )))
}

/// Records a new run, held by this replica; its thread id.
async fn start_thread(
    node: &Node,
    principal: &str,
    project: &str,
    item_id: &str,
    id: &str,
    base: &ContentHash,
) -> Result<String, Reply> {
    let (thread_id, ()) = under_new_id(id, |thread_id| async move {
        let row = thread_row(&thread_id, project, item_id, base, "running");
        node.db
            .start_thread(principal, &row, &node.replica, node.lease_until())
            .await
    })
    .await?;
    Ok(thread_id)
}

/// Runs `job` to its end and records how it ended; the answer. A run
/// answered before its workspace was read back in full is read back
/// after, its workspace given back only then.
async fn finish(node: &Arc<Node>, job: Job) -> (StatusCode, Value) {
    node.active.fetch_add(1, Ordering::Relaxed);
    let started = std::time::Instant::now();
    let outcome = run_job(node, &job).await;
    node.active.fetch_sub(1, Ordering::Relaxed);
    let (status, mut record, state, later) = match outcome {
        Ok((record, later)) => {
            let state = record["status"].as_str().unwrap_or("completed").to_owned();
            (StatusCode::OK, record, state, later)
        }
        Err((phase, message)) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            json!({"status": "error", "error": message, "thread_id": job.thread_id,
                   "item_id": job.item_id, "phase": phase, "snapshot_hash": job.base.hex()}),
            "error".to_owned(),
            None,
        ),
    };
    node.metrics.run_ended(&state);
    record["replica"] = json!(node.replica);
    if let Some(attempts) = job.attempts {
        record["attempts"] = json!(attempts);
    }
    tracing::info!(
        target: "rye_node::runs",
        thread_id = job.thread_id,
        principal = format!("fp:{}", job.principal),
        item_id = job.item_id,
        project_path = job.project,
        status = state,
        merge_type = record["merge_type"].as_str(),
        attempts = job.attempts,
        ms = started.elapsed().as_secs_f64() * 1e3,
        "run ended"
    );
    if !job.secrets.is_empty() || !job.skipped.is_empty() {
        // The names the run was given, never their values.
        record["secrets"] = json!({"names": job.secrets.keys().collect::<Vec<_>>(),
                                   "skipped": job.skipped});
    }
    if let Err(e) = node
        .db
        .finish_thread(&job.thread_id, &state, &record, now_secs() as i64)
        .await
    {
        tracing::error!("recording how {} ended: {e}", job.thread_id);
    }
    if let Some(later) = later {
        let node = Arc::clone(node);
        let pending = node.workspaces.reading(&later.space);
        let answered = record.clone();
        tokio::spawn(async move {
            let _reading = node.workspaces.read_by(pending);
            read_back_later(&node, &job, later, answered, &state).await;
        });
    }
    (status, record)
}

type Failed = (&'static str, String);

/// A run answered on what its watch saw, its workspace still to be read
/// back in full.
struct Later {
    space: Workspace,
    /// The hash of the project manifest the answer was given on: the
    /// snapshot's, or that one patched where the watch saw the run
    /// touch it.
    manifest_hash: ContentHash,
}

/// Reads back `space` after the run `job` was answered (as `answered`)
/// on what its watch saw. What the watch did not see (a file written
/// through a memory map, or through a hard link from a folder not
/// watched) is folded back now, and the thread's record says so; the
/// workspace then goes back for the next run.
async fn read_back_later(node: &Node, job: &Job, later: Later, mut answered: Value, state: &str) {
    let Later {
        space,
        manifest_hash,
    } = later;
    let cas = node.cas();
    let (built, stamps) = match read_back(&cas, &space).await {
        Ok(read) => read,
        Err((_, e)) => {
            // The workspace is dropped, and removed with it.
            tracing::warn!("reading back {} after its answer: {e}", job.thread_id);
            return;
        }
    };
    if built.hash != manifest_hash {
        tracing::warn!(
            "{} changed items its watch did not see; folded back after its answer",
            job.thread_id
        );
        let late = fold(node, &cas, job, built.hash).await;
        answered["late_fold_back"] = match &late {
            Ok((folded, _)) => json!({
                "merge_type": folded.merge_type.name(),
                "head": folded.head.map(|h| h.hex()),
                "run_snapshot_hash": folded.run_snapshot.map(|h| h.hex()),
                "conflicts": folded.conflicts.as_ref().map(|m| m.to_json()["conflicts"].clone()),
            }),
            Err(e) => json!({"error": e.to_string()}),
        };
        if let Err(e) = hold_run_writes(node, &cas, job).await {
            tracing::error!(
                "{}: holding what its late fold-back stored: {e}",
                job.thread_id
            );
        }
        if let Err(e) = node
            .db
            .finish_thread(&job.thread_id, state, &answered, now_secs() as i64)
            .await
        {
            tracing::error!("recording {}'s late fold-back: {e}", job.thread_id);
        }
    } else {
        if let Err(e) = hold_run_writes(node, &cas, job).await {
            tracing::error!(
                "{}: holding what its reading back stored: {e}",
                job.thread_id
            );
        }
    }
    settle(node, space, built, stamps, &job.thread_id);
}

/// Holds what the run `job` wrote through `cas` as its principal's, each
/// hash named in the run's record first: a collection that sees the rows
/// reads the record after them, and keeps them however long the run
/// takes to fold back. What was held.
async fn hold_run_writes(
    node: &Node,
    cas: &Cas<Tracked<ObjectBytes>>,
    job: &Job,
) -> Result<Vec<Held>, String> {
    let written = cas.storage().to_hold().map_err(|e| e.to_string())?;
    let hashes: Vec<&str> = written.iter().map(|h| h.hash.as_str()).collect();
    node.db
        .note_run_objects(&job.thread_id, &hashes)
        .await
        .map_err(|e| e.to_string())?;
    node.db
        .hold(&job.principal, &written, now_secs() as i64)
        .await
        .map_err(|e| e.to_string())?;
    Ok(written)
}

/// How a run's project was read back for its answer.
enum ReadBack {
    /// As the watch saw it: its items as they were.
    Unchanged,
    /// Patched where the watch saw it touched: that manifest's hash.
    Patched(ContentHash),
    /// Walked in full: the manifest and the stamps of its files.
    Walked(manifest::Built, rye_sync::stamps::Stamps),
}

/// The manifest policy of the spaces in `space`.
fn policy_of(space: &Workspace) -> Result<Policy, Failed> {
    Policy::load(&[&space.user().join(".ai"), &space.project().join(".ai")])
        .map_err(|e| ("outputs", e.to_string()))
}

/// Folds the run `job`, whose project's manifest it left as `manifest`,
/// back into its project's history; what it wrote, held as the run's.
async fn fold(
    node: &Node,
    cas: &Cas<Tracked<ObjectBytes>>,
    job: &Job,
    manifest: ContentHash,
) -> Result<(foldback::Folded, Vec<Held>), SyncError> {
    let heads = DbHeads {
        node,
        cas,
        job,
        held: std::sync::Mutex::new(Vec::new()),
    };
    let ran = Ran {
        base: job.base,
        manifest,
        item: job.item_id.clone(),
        thread_id: job.thread_id.clone(),
        now: iso_now(),
    };
    let folded = foldback::fold_back(cas, &heads, &ran).await?;
    // What the last tries wrote without moving the head (a conflict's
    // snapshot, one whose head moved on) is the run's too.
    let mut held = heads.held.into_inner().expect("fold-back holds");
    held.extend(
        hold_run_writes(node, cas, job)
            .await
            .map_err(SyncError::Manifest)?,
    );
    Ok((folded, held))
}

/// Reads the project in `space` back: its manifest, stored, and the
/// stamps of its files.
async fn read_back(
    cas: &Cas<Tracked<ObjectBytes>>,
    space: &Workspace,
) -> Result<(manifest::Built, rye_sync::stamps::Stamps), Failed> {
    let policy = policy_of(space)?;
    manifest::build_stamped(
        cas,
        &space.project(),
        manifest::SpaceKind::Project,
        &policy,
        space.project_stamps(),
    )
    .await
    .map_err(|e| ("outputs", e.to_string()))
}

/// Clears `space` to the manifest just read back from it and gives it
/// back for the next run of its project.
fn settle(
    node: &Node,
    mut space: Workspace,
    built: manifest::Built,
    stamps: rye_sync::stamps::Stamps,
    thread_id: &str,
) {
    let manifest = Arc::new(built.manifest);
    let ran = space.ran(Arc::clone(&manifest), &built.passed, stamps);
    // The next push on top of this run's snapshot checks against it.
    node.parsed.keep(built.hash, manifest);
    match ran {
        Ok(()) => node.workspaces.give_back(space),
        Err(e) => tracing::warn!("a workspace could not be cleared after {thread_id}: {e}"),
    }
}

async fn run_job(node: &Node, job: &Job) -> Result<(Value, Option<Later>), Failed> {
    let cas = node.cas();
    let mut laps = Laps::start();
    let (project_hash, project_manifest, user_manifest) = snapshot_manifests(node, &cas, &job.base)
        .await
        .map_err(|e| ("checkout", e))?;
    let mut space = node.workspaces.take(&job.principal, &job.project).await;
    let mut synced = space
        .prepare(&cas, &project_manifest, user_manifest.as_deref())
        .await;
    if let Err(e) = &synced
        && space.reused()
    {
        // Whatever the last run left that could not be cleared goes with
        // its folder; a new one is made from nothing.
        tracing::warn!(
            "a kept workspace could not be brought to {}: {e}",
            job.base.hex()
        );
        space = node.workspaces.fresh(&job.principal, &job.project);
        synced = space
            .prepare(&cas, &project_manifest, user_manifest.as_deref())
            .await;
    }
    let synced = synced.map_err(|e| ("checkout", format!("the execution space: {e}")))?;
    laps.lap("checkout");
    let trusted = space.root.join("principal.pem");
    let key = node
        .db
        .authorized_key(&job.principal)
        .await
        .map_err(|e| ("run", e.to_string()))?
        .and_then(|doc| keys::read_authorization(&doc, node.key.public()).ok())
        .ok_or(("run", "the caller's key is no longer authorized".to_owned()))?;
    std::fs::write(&trusted, key.key.pem()).map_err(|e| ("run", e.to_string()))?;
    // What the run touches among the project's items, seen as it
    // happens: a run that leaves them as they were is answered without
    // a walk of every file.
    let watch = space.watch(&project_manifest);
    let result = node
        .settings
        .runner
        .run(
            &mut space,
            &job.kind,
            &job.id,
            &job.parameters,
            &trusted,
            &job.secrets,
        )
        .await;
    let seen = watch.map(Watch::seen);
    let result = match result {
        Ok(result) => result,
        Err(e @ RunError::TimedOut(_)) => json!({"status": "error", "error": e.to_string()}),
        Err(e) => return Err(("run", e.to_string())),
    };
    laps.lap("run");
    let (files, skipped) = crate::run::outputs(&cas, &space.project())
        .await
        .map_err(|e| ("outputs", e.to_string()))?;
    let mut bundle = Map::new();
    bundle.insert("remote_thread_id".into(), json!(job.thread_id));
    bundle.insert("execution_snapshot_hash".into(), Value::Null);
    bundle.insert(
        "files".into(),
        json!(
            files
                .iter()
                .map(|(k, v)| (k.clone(), json!(v.hex())))
                .collect::<Map<_, _>>()
        ),
    );
    let bundle = cas
        .put_object(&rye_cas::object("runtime_outputs_bundle", bundle))
        .await
        .map_err(|e| ("outputs", e.to_string()))?;
    // The manifest after the run: the snapshot's when the watch saw the
    // items left alone, patched where it saw them touched, else read by a
    // walk. The first two answer now and are walked after the answer.
    let read = match &seen {
        Some(seen) if seen.leaves_items() => ReadBack::Unchanged,
        Some(Seen::Paths(touched)) => {
            let root = space.project();
            let policy = policy_of(&space)?;
            let patched = match space.project_stamps_mut() {
                Some(stamps) => manifest::build_patched(
                    &cas,
                    &root,
                    &policy,
                    &project_manifest,
                    stamps,
                    touched,
                )
                .await
                .map_err(|e| ("outputs", e.to_string()))?,
                None => None,
            };
            match patched {
                Some(built) => ReadBack::Patched(built.hash),
                None => {
                    let (built, stamps) = read_back(&cas, &space).await?;
                    ReadBack::Walked(built, stamps)
                }
            }
        }
        _ => {
            let (built, stamps) = read_back(&cas, &space).await?;
            ReadBack::Walked(built, stamps)
        }
    };
    let run_manifest = match &read {
        ReadBack::Unchanged => project_hash,
        ReadBack::Patched(hash) => *hash,
        ReadBack::Walked(built, _) => built.hash,
    };
    laps.lap("outputs");
    // What the run wrote is held before a head can name it; the
    // fold-back holds what it writes before each move of the head.
    let mut written = hold_run_writes(node, &cas, job)
        .await
        .map_err(|e| ("outputs", e))?;
    let (folded, fold_writes) = fold(node, &cas, job, run_manifest)
        .await
        .map_err(|e| ("fold-back", e.to_string()))?;
    written.extend(fold_writes);
    let new_objects: Vec<&str> = written.iter().map(|h| h.hash.as_str()).collect();
    let new_objects = json!(new_objects);
    laps.lap("fold_back");
    let later = match read {
        ReadBack::Walked(built, stamps) => {
            settle(node, space, built, stamps, &job.thread_id);
            None
        }
        ReadBack::Unchanged | ReadBack::Patched(_) => Some(Later {
            space,
            manifest_hash: run_manifest,
        }),
    };
    let status = if result.get("status").and_then(Value::as_str) == Some("error") {
        "error"
    } else {
        "completed"
    };
    let mut record = json!({
        "status": status,
        "thread_id": job.thread_id,
        "item_id": job.item_id,
        "project_path": job.project,
        "snapshot_hash": job.base.hex(),
        "merge_type": folded.merge_type.name(),
        "head": folded.head.map(|h| h.hex()),
        "run_snapshot_hash": folded.run_snapshot.map(|h| h.hex()),
        "execution_snapshot_hash": Value::Null,
        "runtime_outputs_bundle_hash": bundle.hex(),
        "runtime_output_files": files.iter().map(|(k, v)| (k.clone(), json!(v.hex()))).collect::<Map<_, _>>(),
        "new_object_hashes": new_objects,
        "result": result,
        "system_version": node.settings.system_version,
        "workspace": {"kept": synced.kept, "written": synced.written, "removed": synced.removed},
        "timings_ms": laps.into_json(),
        "read_back": if later.is_some() { "watched" } else { "walked" },
    });
    if !skipped.is_empty() {
        record["skipped_outputs"] = json!(
            skipped
                .iter()
                .map(|(p, why)| json!({"path": p, "why": why}))
                .collect::<Vec<_>>()
        );
    }
    if let Some(merged) = &folded.conflicts {
        record["conflicts"] = merged.to_json()["conflicts"].clone();
        record["unmerged_snapshot"] = json!(folded.run_snapshot.map(|h| h.hex()));
    }
    Ok((record, later))
}

/// The project and user manifests of the snapshot `base`.
async fn snapshot_manifests(
    node: &Node,
    cas: &Cas<Tracked<ObjectBytes>>,
    base: &ContentHash,
) -> Result<(ContentHash, Arc<Value>, Option<Arc<Value>>), String> {
    let object = |hash: ContentHash| async move {
        node.parsed
            .object(cas, &hash)
            .await
            .map_err(|e| e.to_string())?
            .ok_or_else(|| format!("object {} is not in the store", hash.hex()))
    };
    let snapshot = object(*base).await?;
    if snapshot.get("kind").and_then(Value::as_str) != Some("project_snapshot") {
        return Err(format!("{} is no project_snapshot", base.hex()));
    }
    let mut manifests = Vec::new();
    for key in ["project_manifest_hash", "user_manifest_hash"] {
        manifests.push(match snapshot.get(key).and_then(Value::as_str) {
            Some(hash) => {
                let hash: ContentHash = hash
                    .parse()
                    .map_err(|_| format!("{key} of {} is no hash", base.hex()))?;
                Some((hash, object(hash).await?))
            }
            None => None,
        });
    }
    let user = manifests.pop().flatten().map(|(_, m)| m);
    let (hash, project) = manifests
        .pop()
        .flatten()
        .ok_or_else(|| format!("{} names no project manifest", base.hex()))?;
    Ok((hash, project, user))
}

/// How long each phase of a run took, in milliseconds.
struct Laps {
    last: std::time::Instant,
    laps: Map<String, Value>,
}

impl Laps {
    fn start() -> Laps {
        Laps {
            last: std::time::Instant::now(),
            laps: Map::new(),
        }
    }

    fn lap(&mut self, name: &str) {
        let now = std::time::Instant::now();
        let ms = (now - self.last).as_secs_f64() * 1000.0;
        self.laps
            .insert(name.to_owned(), json!((ms * 10.0).round() / 10.0));
        self.last = now;
    }

    fn into_json(self) -> Value {
        Value::Object(self.laps)
    }
}

fn limit(uri: &Uri, default: i64, max: i64) -> Result<i64, Reply> {
    match query(uri, "limit") {
        None => Ok(default),
        Some(text) => match text.parse::<i64>() {
            Ok(n) if (1..=max).contains(&n) => Ok(n),
            _ => Err(error(
                StatusCode::BAD_REQUEST,
                format!("limit {text:?} is not a number from 1 to {max}"),
            )),
        },
    }
}

async fn threads(State(node): State<Arc<Node>>, call: Signed<Read>) -> Answer {
    let limit = limit(&call.uri, 20, 200)?;
    let project = query(&call.uri, "project_path");
    let rows = node
        .db
        .threads(&call.principal, project.as_deref(), limit)
        .await
        .map_err(internal)?;
    ok(json!({
        "threads": rows.iter().map(|r| json!({
            "thread_id": r.thread_id,
            "item_id": r.item_id,
            "project_path": r.project_path,
            "status": r.status,
            "created_at": r.created_at,
            "finished_at": r.finished_at,
            "merge_type": r.record.get("merge_type"),
        })).collect::<Vec<_>>(),
        "remote_name": node.settings.name,
    }))
}

async fn thread(
    State(node): State<Arc<Node>>,
    UrlPath(id): UrlPath<String>,
    call: Signed<Read>,
) -> Answer {
    let row = node
        .db
        .thread(&call.principal, &id)
        .await
        .map_err(internal)?
        .ok_or_else(|| error(StatusCode::NOT_FOUND, format!("no thread {id:?} here")))?;
    let mut record = row.record;
    record["status"] = json!(row.status);
    record["created_at"] = json!(row.created_at);
    record["finished_at"] = json!(row.finished_at);
    ok(record)
}

async fn history(State(node): State<Arc<Node>>, call: Signed<Read>) -> Answer {
    let limit = limit(&call.uri, 20, 200)?;
    let project = query(&call.uri, "project_path")
        .ok_or_else(|| error(StatusCode::BAD_REQUEST, "no project_path in the query"))?;
    let head = node
        .db
        .head(&call.principal, &project)
        .await
        .map_err(internal)?
        .ok_or_else(|| {
            error(
                StatusCode::NOT_FOUND,
                format!("project {project:?} was never pushed to this node"),
            )
        })?;
    let hash: ContentHash = head
        .parse()
        .map_err(|_| internal(format!("the head {head:?} is no hash")))?;
    let snapshots = snapshot::history(&node.cas(), &hash, limit as usize)
        .await
        .map_err(internal)?;
    ok(
        json!({"project_path": project, "head": head, "snapshots": snapshots,
              "remote_name": node.settings.name}),
    )
}

/// `POST /gc {dry_run, aggressive, retention_days, max_manual_pushes}`:
/// collects the caller's objects now (or counts what it would).
async fn collect_garbage(State(node): State<Arc<Node>>, call: Signed<Push>) -> Answer {
    let body = if call.body.is_empty() {
        json!({})
    } else {
        json_body(&call.body)?
    };
    let flag = |name: &str| -> Result<bool, Reply> {
        match body.get(name) {
            None | Some(Value::Null) => Ok(false),
            Some(Value::Bool(b)) => Ok(*b),
            Some(_) => Err(error(
                StatusCode::BAD_REQUEST,
                format!("{name} is not true or false"),
            )),
        }
    };
    let (dry_run, aggressive) = (flag("dry_run")?, flag("aggressive")?);
    let base = if aggressive {
        Retention::AGGRESSIVE
    } else {
        node.settings.gc.retention
    };
    let number = |name: &str, default: u64, max: u64| -> Result<u64, Reply> {
        match body.get(name) {
            None | Some(Value::Null) => Ok(default),
            Some(v) => v.as_u64().filter(|n| *n <= max).ok_or_else(|| {
                error(
                    StatusCode::BAD_REQUEST,
                    format!("{name} is not a whole number from 0 to {max}"),
                )
            }),
        }
    };
    let retention = Retention {
        days: number("retention_days", base.days, 36_500)?,
        pushes: number("max_manual_pushes", base.pushes as u64, 10_000)? as usize,
    };
    let mut report = gc::collect(&node, &call.principal, retention, dry_run, "asked")
        .await
        .map_err(internal)?;
    // Bytes nobody has held for the grace period go too (anyone's: the
    // caller frees nothing of others' by it).
    if !dry_run {
        report["deleted_from_store"] = json!(gc::delete_doomed(&node).await.map_err(internal)?);
    }
    report["status"] = json!("ok");
    report["remote_name"] = json!(node.settings.name);
    ok(report)
}

/// `GET /gc/stats`: what the caller holds and its last collections.
async fn gc_stats(State(node): State<Arc<Node>>, call: Signed<Read>) -> Answer {
    let stored = node
        .db
        .stored_bytes(&call.principal)
        .await
        .map_err(internal)?;
    let last: Vec<Value> = node
        .db
        .gc_log(&call.principal, 20)
        .await
        .map_err(internal)?
        .into_iter()
        .map(|(at, mut report)| {
            report["at"] = json!(at);
            report
        })
        .collect();
    let settings = &node.settings.gc;
    ok(json!({
        "stored_bytes": stored,
        "quota_bytes": node.settings.max_user_storage_bytes,
        "doomed_objects": node.db.doomed_count().await.map_err(internal)?,
        "every_seconds": settings.every.map(|d| d.as_secs()),
        "grace_seconds": settings.grace.as_secs(),
        "retention": {"days": settings.retention.days, "pushes": settings.retention.pushes},
        "last": last,
        "remote_name": node.settings.name,
    }))
}
