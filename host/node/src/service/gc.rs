//! Garbage collection: what no head, kept snapshot, user space or recent
//! run of a principal reaches stops being that principal's, once it has
//! not been held anew for the grace period; bytes no principal holds go
//! from the object store a grace period after that.
//!
//! Kept: every head; the snapshots behind it (along every parent) made
//! within the retention's days, and its last pushes whatever their age;
//! the user space; and what the principal's runs under way, or ended
//! within the retention, name (the snapshot each ran on, the one it made,
//! its outputs). Everything each kept snapshot and manifest names is kept
//! with it. The sweep happens only if no head moved since the marks
//! (`Db::sweep`), so a collection and pushes may run at once on any
//! replicas; see `db::gc` for the rules that make that safe.

use std::collections::{BinaryHeap, HashMap, HashSet};
use std::time::{Duration, Instant};

use futures_util::StreamExt as _;
use rye_cas::{Cas, Class, ContentHash};
use serde_json::{Value, json};

use super::{Node, now_secs};
use crate::db::gc::{Claimed, Owned, Swept};
use crate::metrics::Collected;

/// What history a collection keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retention {
    /// Snapshots made within this many days (0: none kept for their
    /// age alone).
    pub days: u64,
    /// The last this many pushes of each project, whatever their age.
    pub pushes: usize,
}

impl Retention {
    pub const DEFAULT: Retention = Retention { days: 7, pushes: 3 };
    /// What a collection made to stay within a quota keeps: what heads,
    /// last pushes and runs under way reach.
    pub const AGGRESSIVE: Retention = Retention { days: 0, pushes: 1 };
}

/// When and how a node collects.
#[derive(Debug, Clone, Copy)]
pub struct GcSettings {
    /// How often each replica collects every principal and deletes the
    /// bytes nobody holds; none: only when asked (`POST /gc`) or when a
    /// principal passes its quota.
    pub every: Option<Duration>,
    /// How long an object stays after it was last held or stopped being
    /// held: a push has this long from uploading its objects to moving its
    /// head.
    pub grace: Duration,
    /// How long a hash being written is kept from deletion before the row
    /// that holds it is written: more than twice what any one request or
    /// run's read-back takes (a hold later than half of it is refused).
    /// Zero keeps nothing: only for one writer at a time.
    pub staged_for: Duration,
    pub retention: Retention,
}

impl Default for GcSettings {
    fn default() -> Self {
        GcSettings {
            every: Some(Duration::from_secs(3600)),
            grace: Duration::from_secs(3600),
            staged_for: Duration::from_secs(600),
            retention: Retention::DEFAULT,
        }
    }
}

/// A collection's sweep is tried this many times while heads keep moving.
const SWEEP_TRIES: usize = 3;

/// Collects `principal`'s objects under `retention`, or only counts what
/// it would (`dry_run`); the report, also kept in the database.
pub(super) async fn collect(
    node: &Node,
    principal: &str,
    retention: Retention,
    dry_run: bool,
    reason: &str,
) -> Result<Value, String> {
    let started = Instant::now();
    let grace = node.settings.gc.grace.as_secs() as i64;
    let mut tries = 0;
    let mut report = loop {
        tries += 1;
        let now = now_secs() as i64;
        let roots = node.db.roots(principal).await.map_err(|e| e.to_string())?;
        let rows: HashMap<String, Owned> = node
            .db
            .rows_of(principal)
            .await
            .map_err(|e| e.to_string())?
            .into_iter()
            .map(|row| (row.hash.clone(), row))
            .collect();
        let records = node
            .db
            .thread_records(principal, now - (retention.days * 86_400) as i64)
            .await
            .map_err(|e| e.to_string())?;
        let mut marks = Marks::new(node, &rows);
        let kept_snapshots = marks.history(&roots.heads, retention).await?;
        if let Some(user) = roots.user_space.as_deref().and_then(|h| h.parse().ok()) {
            marks.manifest(&user).await?;
        }
        for record in &records {
            marks.run(record).await?;
        }
        let marked = marks.kept.len();
        let cutoff = now - grace;
        let mut swept: Vec<(String, String)> = rows
            .values()
            .filter(|row| row.stored_at <= cutoff && !marks.kept.contains(&row.hash))
            .map(|row| (row.hash.clone(), row.kind.clone()))
            .collect();
        swept.sort();
        let swept_bytes: u64 = swept.iter().map(|(h, _)| rows[h].size).sum();
        let mut report = json!({
            "reason": reason,
            "dry_run": dry_run,
            "retention": {"days": retention.days, "pushes": retention.pushes},
            "grace_seconds": grace,
            "held_objects": rows.len(),
            "kept_snapshots": kept_snapshots,
            "marked": marked,
            "swept_objects": swept.len(),
            "swept_bytes": swept_bytes,
        });
        if dry_run || swept.is_empty() {
            break report;
        }
        match node
            .db
            .sweep(principal, &roots, &swept, cutoff, now)
            .await
            .map_err(|e| e.to_string())?
        {
            Swept::Done { rows, doomed } => {
                report["swept_objects"] = json!(rows);
                report["doomed"] = json!(doomed);
                node.metrics.collected(Collected {
                    runs: 1,
                    rows,
                    row_bytes: swept_bytes,
                    deleted: 0,
                });
                break report;
            }
            Swept::Moved if tries < SWEEP_TRIES => continue,
            Swept::Moved => {
                report["swept_objects"] = json!(0);
                report["swept_bytes"] = json!(0);
                report["moved"] = json!(true);
                report["message"] =
                    json!("heads kept moving while the marks were made; nothing swept this time");
                break report;
            }
        }
    };
    report["took_ms"] = json!(started.elapsed().as_millis() as u64);
    tracing::info!(
        target: "rye_node::gc",
        principal = format!("fp:{principal}"),
        dry_run,
        swept_objects = report["swept_objects"].as_u64(),
        swept_bytes = report["swept_bytes"].as_u64(),
        ms = started.elapsed().as_millis() as u64,
        "collected"
    );
    if !dry_run && let Err(e) = node.db.log_gc(principal, now_secs() as i64, &report).await {
        tracing::warn!("keeping a collection's report: {e}");
    }
    Ok(report)
}

/// What a collection marks, as it walks.
struct Marks<'a> {
    node: &'a Node,
    rows: &'a HashMap<String, Owned>,
    cas: Cas<crate::bytes::ObjectBytes>,
    kept: HashSet<String>,
    manifests: HashSet<ContentHash>,
}

impl<'a> Marks<'a> {
    fn new(node: &'a Node, rows: &'a HashMap<String, Owned>) -> Self {
        Marks {
            node,
            rows,
            cas: Cas::new(node.bytes.clone()),
            kept: HashSet::new(),
            manifests: HashSet::new(),
        }
    }

    async fn object(&self, hash: &ContentHash) -> Result<Option<Value>, String> {
        self.cas.get_object(hash).await.map_err(|e| e.to_string())
    }

    /// Keeps what `heads` reach under `retention`; how many snapshots.
    async fn history(
        &mut self,
        heads: &HashMap<String, String>,
        retention: Retention,
    ) -> Result<usize, String> {
        let cutoff = iso_days_ago(retention.days);
        let mut kept = 0;
        let mut seen = HashSet::new();
        for head in heads.values() {
            let Ok(head) = head.parse::<ContentHash>() else {
                continue;
            };
            // Newest first, so a project's last pushes are counted in the
            // order they were made, across merges.
            let mut queue = BinaryHeap::new();
            let mut loaded = HashMap::new();
            if seen.insert(head) {
                self.load(head, &mut queue, &mut loaded).await?;
            }
            let mut pushes = 0;
            while let Some((stamp, hex)) = queue.pop() {
                let Some((hash, snapshot)) = loaded.remove(&hex) else {
                    continue;
                };
                let push = snapshot.get("source").and_then(Value::as_str) == Some("push");
                let keep = hash == head
                    || (retention.days > 0 && stamp >= cutoff)
                    || (push && pushes < retention.pushes);
                if push {
                    pushes += 1;
                }
                if keep {
                    kept += 1;
                    self.snapshot_parts(&hash, &snapshot).await?;
                }
                // Older snapshots are looked at while one may still be
                // kept: within the days, or a push not yet counted.
                if keep || pushes < retention.pushes {
                    let parents: Vec<ContentHash> = snapshot
                        .get("parent_hashes")
                        .and_then(Value::as_array)
                        .into_iter()
                        .flatten()
                        .filter_map(Value::as_str)
                        .filter_map(|h| h.parse::<ContentHash>().ok())
                        .collect();
                    for parent in parents {
                        if seen.insert(parent) {
                            self.load(parent, &mut queue, &mut loaded).await?;
                        }
                    }
                }
            }
        }
        Ok(kept)
    }

    /// Reads the snapshot `hash` into the walk, unless it was collected
    /// before (nothing behind it is then kept by it).
    async fn load(
        &self,
        hash: ContentHash,
        queue: &mut BinaryHeap<(String, String)>,
        loaded: &mut HashMap<String, (ContentHash, Value)>,
    ) -> Result<(), String> {
        let Some(snapshot) = self.object(&hash).await? else {
            return Ok(());
        };
        if snapshot.get("kind").and_then(Value::as_str) != Some("project_snapshot") {
            return Ok(());
        }
        let stamp = snapshot
            .get("timestamp")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned();
        queue.push((stamp, hash.hex()));
        loaded.insert(hash.hex(), (hash, snapshot));
        Ok(())
    }

    /// Keeps a snapshot and its manifests.
    async fn snapshot_parts(&mut self, hash: &ContentHash, snapshot: &Value) -> Result<(), String> {
        self.kept.insert(hash.hex());
        for field in ["project_manifest_hash", "user_manifest_hash"] {
            if let Some(manifest) = snapshot
                .get(field)
                .and_then(Value::as_str)
                .and_then(|h| h.parse::<ContentHash>().ok())
            {
                self.manifest(&manifest).await?;
            }
        }
        Ok(())
    }

    /// Keeps a snapshot named by a run, if it is still there.
    async fn snapshot(&mut self, hash: &ContentHash) -> Result<(), String> {
        if let Some(snapshot) = self.object(hash).await? {
            self.snapshot_parts(hash, &snapshot).await?;
        }
        Ok(())
    }

    /// Keeps a manifest and what it names: item sources and their
    /// content blobs, files.
    async fn manifest(&mut self, hash: &ContentHash) -> Result<(), String> {
        if !self.manifests.insert(*hash) {
            return Ok(());
        }
        self.kept.insert(hash.hex());
        let Some(manifest) = self
            .node
            .parsed
            .object(&self.cas, hash)
            .await
            .map_err(|e| e.to_string())?
        else {
            return Ok(());
        };
        let named = |key: &str| -> Vec<String> {
            manifest
                .get(key)
                .and_then(Value::as_object)
                .map(|m| {
                    m.values()
                        .filter_map(Value::as_str)
                        .map(str::to_owned)
                        .collect()
                })
                .unwrap_or_default()
        };
        for item in named("items") {
            let blob = match self.rows.get(&item) {
                Some(row) => row.content_blob.clone(),
                // Not the principal's (so not swept): its blob is read
                // from the object, if it is there.
                None => match item.parse::<ContentHash>() {
                    Ok(hash) => self.object(&hash).await?.and_then(|source| {
                        source
                            .get("content_blob_hash")
                            .and_then(Value::as_str)
                            .map(str::to_owned)
                    }),
                    Err(_) => None,
                },
            };
            self.kept.extend(blob);
            self.kept.insert(item);
        }
        self.kept.extend(named("files"));
        Ok(())
    }

    /// Keeps what a run's record names.
    async fn run(&mut self, record: &Value) -> Result<(), String> {
        let hash = |field: &str| {
            record
                .get(field)
                .and_then(Value::as_str)
                .and_then(|h| h.parse::<ContentHash>().ok())
        };
        for field in [
            "snapshot_hash",
            "head",
            "run_snapshot_hash",
            "unmerged_snapshot",
            "execution_snapshot_hash",
        ] {
            if let Some(snapshot) = hash(field) {
                self.snapshot(&snapshot).await?;
            }
        }
        if let Some(bundle) = hash("runtime_outputs_bundle_hash") {
            self.kept.insert(bundle.hex());
            if let Some(bundle) = self.object(&bundle).await? {
                self.kept.extend(
                    bundle
                        .get("files")
                        .and_then(Value::as_object)
                        .into_iter()
                        .flat_map(|m| m.values())
                        .filter_map(Value::as_str)
                        .map(str::to_owned),
                );
            }
        }
        self.kept.extend(
            record
                .get("new_object_hashes")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .map(str::to_owned),
        );
        Ok(())
    }
}

/// The time `days` ago as snapshots write times, for comparing as text.
fn iso_days_ago(days: u64) -> String {
    let then = std::time::SystemTime::now() - Duration::from_secs(days * 86_400);
    let stamp = rye_integrity::utc_timestamp(then);
    format!("{}+00:00", stamp.trim_end_matches('Z'))
}

/// Deletes the bytes of what no principal has held for the grace period,
/// in rounds of a few hundred; how many were deleted.
pub(super) async fn delete_doomed(node: &Node) -> Result<u64, String> {
    let grace = node.settings.gc.grace.as_secs() as i64;
    let cas = Cas::new(node.bytes.clone());
    let mut deleted = 0;
    loop {
        let now = now_secs() as i64;
        let claimed = node
            .db
            .claim_doomed(now - grace, now, 500)
            .await
            .map_err(|e| e.to_string())?;
        if claimed.is_empty() {
            break;
        }
        let round = claimed.len();
        let gone: Vec<String> = futures_util::stream::iter(claimed)
            .map(|Claimed { hash, kind }| {
                let cas = &cas;
                async move {
                    let parsed = hash.parse::<ContentHash>().ok()?;
                    let class = if kind == "blob" {
                        Class::Blob
                    } else {
                        Class::Object
                    };
                    match cas.delete(class, &parsed).await {
                        Ok(()) => Some(hash),
                        Err(e) => {
                            tracing::warn!("deleting {hash}: {e}");
                            None
                        }
                    }
                }
            })
            .buffer_unordered(32)
            .filter_map(|h| async move { h })
            .collect()
            .await;
        node.db.deleted(&gone).await.map_err(|e| e.to_string())?;
        deleted += gone.len() as u64;
        if gone.len() < round || round < 500 {
            break;
        }
    }
    if deleted > 0 {
        node.metrics.collected(Collected {
            deleted,
            ..Collected::default()
        });
        tracing::info!(target: "rye_node::gc", deleted, "deleted what nobody holds");
        let report = json!({"reason": "sweep", "deleted": deleted});
        if let Err(e) = node.db.log_gc("*", now_secs() as i64, &report).await {
            tracing::warn!("keeping a sweep's report: {e}");
        }
    }
    Ok(deleted)
}

/// Collects every principal and deletes what nobody holds, every
/// `every`, for as long as the node lives.
pub(super) async fn keep_collecting(node: std::sync::Weak<Node>, every: Duration) {
    loop {
        tokio::time::sleep(every).await;
        let Some(node) = node.upgrade() else {
            return;
        };
        let principals = match node.db.principals().await {
            Ok(principals) => principals,
            Err(e) => {
                tracing::warn!("garbage collection: {e}");
                continue;
            }
        };
        let retention = node.settings.gc.retention;
        for principal in principals {
            if let Err(e) = collect(&node, &principal, retention, false, "scheduled").await {
                tracing::warn!("garbage collection of fp:{principal}: {e}");
            }
        }
        if let Err(e) = delete_doomed(&node).await {
            tracing::warn!("deleting what nobody holds: {e}");
        }
    }
}
