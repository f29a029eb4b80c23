//! Node results kept for nodes with `cache_result: true`: a node whose
//! action, graph and runtime settings are the same as a run before
//! gets that run's result instead of running again.
//!
//! As the original keys it, a result is found by the SHA-256 of a
//! canonical `node_input` object: the hash of the graph's `config`, the
//! node's name, the action with its templates filled, and the hash of the
//! runtime settings the run had. Rye adds the integrity hash of every
//! element of the action's chain, taken from a check of the chain made
//! before each lookup: an item that changed, or no longer verifies, is
//! never answered from a result it gave before. Results are
//! `node_result` objects in the project's content-addressed store; the
//! pointer `.ai/state/objects/cache/nodes/<key>.json` names one (`{
//! node_result_hash, node_name, cached_at }`). Only successful results
//! are kept.

use std::path::{Path, PathBuf};

use rye_cas::{Cas, ContentHash, LocalStorage, object};
use rye_components::WalkAction;
use serde_json::{Map, Value, json};

pub(crate) struct NodeCache {
    cas: Cas<LocalStorage>,
    /// `.ai/state/objects/cache/nodes/`.
    dir: PathBuf,
    /// SHA-256 of the canonical graph `config`, hex.
    graph_hash: String,
    /// SHA-256 of the canonical runtime settings, hex.
    settings_hash: String,
}

fn canonical_hash(value: &Value) -> String {
    ContentHash::of(rye_cas::canonical::to_string(value).as_bytes()).hex()
}

impl NodeCache {
    pub(crate) fn new(
        cas: Cas<LocalStorage>,
        state_dir: &Path,
        config: &Value,
        settings: &Value,
    ) -> Self {
        Self {
            cas,
            dir: state_dir.join("objects/cache/nodes"),
            graph_hash: canonical_hash(config),
            settings_hash: canonical_hash(settings),
        }
    }

    /// The key of `action`'s result when its chain's elements have the
    /// integrity hashes `chain`.
    pub(crate) fn key(&self, action: &WalkAction, chain: &[String]) -> String {
        let mut fields = Map::new();
        fields.insert("graph_hash".into(), json!(self.graph_hash));
        fields.insert("node_name".into(), json!(action.node));
        fields.insert(
            "interpolated_action".into(),
            json!({"primary": action.primary, "kind": action.kind,
                   "item_id": action.item_id, "params": action.params}),
        );
        fields.insert("config_snapshot_hash".into(), json!(self.settings_hash));
        fields.insert("chain_integrity".into(), json!(chain));
        canonical_hash(&object("node_input", fields))
    }

    fn pointer(&self, key: &str) -> PathBuf {
        self.dir.join(format!("{key}.json"))
    }

    /// The result kept under `key`, if any. A pointer or object that
    /// cannot be read is a miss.
    pub(crate) async fn get(&self, key: &str) -> Option<Value> {
        let text = tokio::fs::read_to_string(self.pointer(key)).await.ok()?;
        let pointer: Value = serde_json::from_str(&text).ok()?;
        let hash: ContentHash = pointer.get("node_result_hash")?.as_str()?.parse().ok()?;
        let stored = self.cas.get_object(&hash).await.ok()??;
        stored.get("result").cloned()
    }

    /// Keeps `result`, node `node`'s, under `key`.
    pub(crate) async fn put(&self, key: &str, node: &str, result: &Value) -> Result<(), String> {
        let mut fields = Map::new();
        fields.insert("result".into(), result.clone());
        let hash = self
            .cas
            .put_object(&object("node_result", fields))
            .await
            .map_err(|e| e.to_string())?;
        let cached_at = rye_integrity::utc_timestamp(std::time::SystemTime::now());
        let pointer =
            json!({"node_result_hash": hash.hex(), "node_name": node, "cached_at": cached_at});
        let target = self.pointer(key);
        // A thread id ends in random digits.
        let random = rye_threads::new_thread_id();
        let temp = self
            .dir
            .join(format!(".{key}.json.tmp.{}", &random[random.len() - 8..]));
        let written = async {
            tokio::fs::create_dir_all(&self.dir).await?;
            tokio::fs::write(&temp, pointer.to_string()).await?;
            tokio::fs::rename(&temp, &target).await
        };
        written
            .await
            .map_err(|e| format!("{}: {e}", target.display()))
    }
}
