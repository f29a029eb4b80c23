//! Fold-backs against a head kept in real ref files, moved by
//! compare-and-swap.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};

use super::*;
use rye_cas::{LocalRefs, LocalStorage};

const REF: &str = "projects/p/head";

struct RefHeads {
    refs: LocalRefs,
    /// Advances still to lose; each loss first moves the head to the next
    /// of `intruders`, as another writer would (with none left, it is
    /// lost without a trace).
    losses: AtomicU32,
    intruders: Mutex<Vec<ContentHash>>,
}

impl Heads for RefHeads {
    async fn head(&self) -> Result<Option<ContentHash>, SyncError> {
        self.refs
            .get(REF)
            .map_err(|e| SyncError::Manifest(e.to_string()))
    }

    async fn advance(
        &self,
        expected: Option<ContentHash>,
        new: ContentHash,
    ) -> Result<bool, SyncError> {
        if self.losses.load(Ordering::SeqCst) > 0 {
            self.losses.fetch_sub(1, Ordering::SeqCst);
            let intruder = self.intruders.lock().unwrap().pop();
            match intruder {
                Some(intruder) => {
                    let now = self.refs.get(REF).unwrap();
                    self.refs.compare_and_swap(REF, now, intruder).unwrap();
                }
                // A writer that came and went: the swap is lost all the same.
                None => return Ok(false),
            }
        }
        match self.refs.compare_and_swap(REF, expected, new) {
            Ok(()) => Ok(true),
            Err(rye_cas::RefError::Conflict { .. }) => Ok(false),
            Err(e) => Err(SyncError::Manifest(e.to_string())),
        }
    }
}

struct World {
    _dir: tempfile::TempDir,
    cas: Cas<LocalStorage>,
    heads: RefHeads,
}

fn world() -> World {
    let dir = tempfile::tempdir().unwrap();
    let cas = Cas::new(LocalStorage::new(dir.path().join("objects")));
    let heads = RefHeads {
        refs: LocalRefs::new(dir.path().join("refs")),
        losses: AtomicU32::new(0),
        intruders: Mutex::new(Vec::new()),
    };
    World {
        _dir: dir,
        cas,
        heads,
    }
}

impl World {
    /// A manifest of `files` (path, text).
    async fn manifest(&self, files: &[(&str, &str)]) -> ContentHash {
        let mut map = Map::new();
        for (path, text) in files {
            map.insert(
                (*path).into(),
                json!(self.cas.put_blob(text.as_bytes()).await.unwrap().hex()),
            );
        }
        let mut fields = Map::new();
        fields.insert("space".into(), json!("project"));
        fields.insert("items".into(), json!({}));
        fields.insert("files".into(), Value::Object(map));
        self.cas
            .put_object(&object("source_manifest", fields))
            .await
            .unwrap()
    }

    async fn snapshot(&self, manifest: ContentHash, parents: Vec<ContentHash>) -> ContentHash {
        let new = NewSnapshot {
            project_manifest: manifest,
            user_manifest: None,
            parents,
            source: Source::Push,
            source_detail: String::new(),
            metadata: Map::new(),
        };
        store(&self.cas, &new, "2026-11-24T00:00:00+00:00")
            .await
            .unwrap()
    }

    async fn files_at(&self, snapshot: ContentHash) -> Vec<(String, String)> {
        let snapshot = self.cas.get_object(&snapshot).await.unwrap().unwrap();
        let manifest: ContentHash = snapshot["project_manifest_hash"]
            .as_str()
            .unwrap()
            .parse()
            .unwrap();
        let tree = tree_of(&self.cas, &manifest).await.unwrap();
        let mut out = Vec::new();
        for (path, hash) in tree.files {
            let bytes = self
                .cas
                .get_blob(&hash.parse().unwrap())
                .await
                .unwrap()
                .unwrap();
            out.push((path, String::from_utf8(bytes).unwrap()));
        }
        out
    }

    fn ran(&self, base: ContentHash, manifest: ContentHash) -> Ran {
        Ran {
            base,
            manifest,
            item: "tool:demo/write".into(),
            thread_id: "t-1".into(),
            now: "2026-11-24T00:00:01+00:00".into(),
        }
    }
}

fn owned(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(a, b)| ((*a).into(), (*b).into()))
        .collect()
}

#[tokio::test]
async fn an_unchanged_project_is_a_no_op_and_a_still_head_fast_forwards() {
    let w = world();
    let manifest = w.manifest(&[("notes.txt", "a\n")]).await;
    let base = w.snapshot(manifest, vec![]).await;
    w.heads.refs.compare_and_swap(REF, None, base).unwrap();

    let folded = fold_back(&w.cas, &w.heads, &w.ran(base, manifest))
        .await
        .unwrap();
    assert_eq!(folded.merge_type, MergeType::NoOp);
    assert_eq!(w.heads.refs.get(REF).unwrap(), Some(base));

    let changed = w
        .manifest(&[("notes.txt", "a\n"), ("state.txt", "ran\n")])
        .await;
    let folded = fold_back(&w.cas, &w.heads, &w.ran(base, changed))
        .await
        .unwrap();
    assert_eq!(folded.merge_type, MergeType::FastForward);
    let run = folded.run_snapshot.unwrap();
    assert_eq!(folded.head, Some(run));
    assert_eq!(w.heads.refs.get(REF).unwrap(), Some(run));
    let snapshot = w.cas.get_object(&run).await.unwrap().unwrap();
    assert_eq!(snapshot["source"], "execution");
    assert_eq!(snapshot["source_detail"], "tool:demo/write");
    assert_eq!(snapshot["parent_hashes"], json!([base.hex()]));
    assert_eq!(snapshot["metadata"], json!({"thread_id": "t-1"}));
}

#[tokio::test]
async fn a_head_that_moved_is_merged_with_when_the_changes_do_not_touch() {
    let w = world();
    let base_manifest = w.manifest(&[("notes.txt", "line1\nline2\nline3\n")]).await;
    let base = w.snapshot(base_manifest, vec![]).await;
    let pushed = w
        .manifest(&[
            ("notes.txt", "LINE1\nline2\nline3\n"),
            ("pushed.txt", "p\n"),
        ])
        .await;
    let head = w.snapshot(pushed, vec![base]).await;
    w.heads.refs.compare_and_swap(REF, None, head).unwrap();
    let ran = w
        .manifest(&[("notes.txt", "line1\nline2\nLINE3\n"), ("state.txt", "s\n")])
        .await;

    let folded = fold_back(&w.cas, &w.heads, &w.ran(base, ran))
        .await
        .unwrap();
    assert_eq!(folded.merge_type, MergeType::Merge);
    let merged = folded.head.unwrap();
    assert_eq!(w.heads.refs.get(REF).unwrap(), Some(merged));
    assert_eq!(
        w.files_at(merged).await,
        owned(&[
            ("notes.txt", "LINE1\nline2\nLINE3\n"),
            ("pushed.txt", "p\n"),
            ("state.txt", "s\n")
        ])
    );
    let snapshot = w.cas.get_object(&merged).await.unwrap().unwrap();
    assert_eq!(snapshot["source"], "merge");
    assert_eq!(
        snapshot["parent_hashes"],
        json!([head.hex(), folded.run_snapshot.unwrap().hex()])
    );
    assert_eq!(
        snapshot["metadata"],
        json!({"base": base.hex(), "thread_id": "t-1"})
    );
}

#[tokio::test]
async fn a_conflict_leaves_the_head_where_it_was() {
    let w = world();
    let base = w
        .snapshot(w.manifest(&[("notes.txt", "one\n")]).await, vec![])
        .await;
    let head = w
        .snapshot(w.manifest(&[("notes.txt", "pushed\n")]).await, vec![base])
        .await;
    w.heads.refs.compare_and_swap(REF, None, head).unwrap();
    let ran = w.manifest(&[("notes.txt", "ran\n")]).await;

    let folded = fold_back(&w.cas, &w.heads, &w.ran(base, ran))
        .await
        .unwrap();
    assert_eq!(folded.merge_type, MergeType::Conflict);
    assert_eq!(folded.head, None);
    assert_eq!(w.heads.refs.get(REF).unwrap(), Some(head));
    let conflicts = folded.conflicts.unwrap();
    assert_eq!(
        conflicts.to_json()["conflicts"]["notes.txt"]["type"],
        "content"
    );
    // The run's own snapshot is kept, for whoever resolves it.
    assert!(
        w.cas
            .get_object(&folded.run_snapshot.unwrap())
            .await
            .unwrap()
            .is_some()
    );
}

#[tokio::test]
async fn a_lost_race_is_tried_again_and_five_lost_give_up() {
    let w = world();
    let base = w
        .snapshot(w.manifest(&[("a.txt", "a\n")]).await, vec![])
        .await;
    w.heads.refs.compare_and_swap(REF, None, base).unwrap();
    // Another writer pushes between the read and the swap, once.
    let pushed = w
        .snapshot(
            w.manifest(&[("a.txt", "a\n"), ("b.txt", "b\n")]).await,
            vec![base],
        )
        .await;
    w.heads.losses.store(1, Ordering::SeqCst);
    w.heads.intruders.lock().unwrap().push(pushed);
    let ran = w.manifest(&[("a.txt", "a\n"), ("c.txt", "c\n")]).await;
    let folded = fold_back(&w.cas, &w.heads, &w.ran(base, ran))
        .await
        .unwrap();
    assert_eq!(folded.merge_type, MergeType::Merge, "{folded:?}");
    assert_eq!(
        w.files_at(folded.head.unwrap()).await,
        owned(&[("a.txt", "a\n"), ("b.txt", "b\n"), ("c.txt", "c\n")]),
        "the push that won the race is not lost"
    );

    // Losing every time: the head is never moved by this fold-back.
    let before = w.heads.refs.get(REF).unwrap();
    w.heads.losses.store(ATTEMPTS, Ordering::SeqCst);
    let ran = w.manifest(&[("a.txt", "a\n"), ("d.txt", "d\n")]).await;
    let started = std::time::Instant::now();
    let folded = fold_back(&w.cas, &w.heads, &w.ran(base, ran))
        .await
        .unwrap();
    assert_eq!(folded.merge_type, MergeType::RetryExhausted);
    assert_eq!(w.heads.refs.get(REF).unwrap(), before);
    // 50, 100, 200, 400 and 800 ms at least.
    assert!(started.elapsed() >= Duration::from_millis(1550));
}
