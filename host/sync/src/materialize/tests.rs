//! Manifests made into files, and manifests that try to write elsewhere.

use super::*;
use rye_cas::LocalStorage;
use serde_json::json;

struct Fixture {
    _store: tempfile::TempDir,
    project: tempfile::TempDir,
    cas: Cas<LocalStorage>,
}

fn fixture() -> Fixture {
    let store = tempfile::tempdir().unwrap();
    let project = tempfile::tempdir().unwrap();
    let cas = Cas::new(LocalStorage::new(store.path()));
    for (rel, text) in [
        (".ai/tools/demo/wc.yaml", "tool\n"),
        (".ai/knowledge/k.md", "knowledge\n"),
        (".ai/config/cas/manifest.yaml", "sync: {include: [docs/]}\n"),
        ("docs/a.txt", "a\n"),
    ] {
        let path = project.path().join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }
    Fixture {
        _store: store,
        project,
        cas,
    }
}

async fn built(f: &Fixture) -> crate::manifest::Built {
    let policy = crate::policy::Policy::load(&[&f.project.path().join(".ai")]).unwrap();
    crate::manifest::build(
        &f.cas,
        f.project.path(),
        crate::manifest::SpaceKind::Project,
        &policy,
    )
    .await
    .unwrap()
}

fn listing(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    fn walk(root: &Path, dir: &Path, out: &mut Vec<String>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(root, &path, out);
            } else {
                let rel = path
                    .strip_prefix(root)
                    .unwrap()
                    .to_str()
                    .unwrap()
                    .to_owned();
                let text = std::fs::read_to_string(&path).unwrap_or_default();
                out.push(format!("{rel}={}", text.trim()));
            }
        }
    }
    if dir.exists() {
        walk(dir, dir, &mut out);
    }
    out.sort();
    out
}

#[tokio::test]
async fn a_manifest_comes_back_as_the_files_it_was_made_from() {
    let f = fixture();
    let built = built(&f).await;
    let target = tempfile::tempdir().unwrap();
    let written = materialize(&f.cas, &built.manifest, target.path())
        .await
        .unwrap();
    assert_eq!(written, 4);
    assert_eq!(
        listing(target.path()),
        [
            ".ai/config/cas/manifest.yaml=sync: {include: [docs/]}",
            ".ai/knowledge/k.md=knowledge",
            ".ai/tools/demo/wc.yaml=tool",
            "docs/a.txt=a",
        ]
    );
}

#[tokio::test]
async fn paths_that_leave_the_target_are_refused_and_nothing_is_written() {
    let f = fixture();
    let blob = f.cas.put_blob(b"evil\n").await.unwrap().hex();
    let target = tempfile::tempdir().unwrap();
    let inside = target.path().join("space");
    for path in [
        "../escape.txt",
        "/tmp/abs.txt",
        "a/../../x",
        "a/./b",
        "a//b",
        "",
        "a\\..\\b",
    ] {
        let manifest = json!({"items": {}, "files": {"ok.txt": blob, path: blob}});
        let error = materialize(&f.cas, &manifest, &inside)
            .await
            .unwrap_err()
            .to_string();
        assert!(error.contains("which is not written"), "{path:?}: {error}");
        assert!(
            listing(target.path()).is_empty(),
            "{path:?}: something was written"
        );
    }
    assert!(!target.path().join("escape.txt").exists());
}

#[tokio::test]
async fn a_link_planted_in_the_target_is_not_followed() {
    let f = fixture();
    let blob = f.cas.put_blob(b"evil\n").await.unwrap().hex();
    let outside = tempfile::tempdir().unwrap();
    let target = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(outside.path(), target.path().join("docs")).unwrap();
    std::os::unix::fs::symlink(outside.path().join("f.txt"), target.path().join("f.txt")).unwrap();
    for path in ["docs/a.txt", "docs/sub/b.txt"] {
        let manifest = json!({"files": {path: blob}});
        let error = materialize(&f.cas, &manifest, target.path())
            .await
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("could not be written inside"),
            "{path}: {error}"
        );
    }
    assert!(
        listing(outside.path()).is_empty(),
        "a write went through the link"
    );
    // A link to a file is replaced by the file, not written through.
    let manifest = json!({"files": {"f.txt": blob}});
    materialize(&f.cas, &manifest, target.path()).await.unwrap();
    assert!(!outside.path().join("f.txt").exists());
    assert_eq!(
        std::fs::read_to_string(target.path().join("f.txt")).unwrap(),
        "evil\n"
    );
}

#[tokio::test]
async fn a_missing_object_writes_nothing() {
    let f = fixture();
    let built = built(&f).await;
    let mut manifest = built.manifest.clone();
    manifest["files"]["docs/gone.txt"] = json!(ContentHash::of(b"never stored").hex());
    let target = tempfile::tempdir().unwrap();
    let error = materialize(&f.cas, &manifest, target.path())
        .await
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("docs/gone.txt: blob") && error.contains("is missing"),
        "{error}"
    );
    assert!(listing(target.path()).is_empty());
}

#[tokio::test]
async fn a_snapshot_is_checked_out_once_and_marked_complete() {
    let f = fixture();
    let built = built(&f).await;
    let mut fields = serde_json::Map::new();
    fields.insert("project_manifest_hash".into(), json!(built.hash.hex()));
    fields.insert("user_manifest_hash".into(), Value::Null);
    fields.insert("parent_hashes".into(), json!([]));
    fields.insert("source".into(), json!("push"));
    let snapshot = f
        .cas
        .put_object(&rye_cas::object("project_snapshot", fields))
        .await
        .unwrap();
    let cache = tempfile::tempdir().unwrap();
    let folder = checkout(&f.cas, &snapshot, cache.path()).await.unwrap();
    assert_eq!(folder, cache.path().join("snapshots").join(snapshot.hex()));
    assert_eq!(
        std::fs::read_to_string(folder.join(COMPLETE_MARKER)).unwrap(),
        snapshot.hex()
    );
    assert_eq!(
        std::fs::read_to_string(folder.join("project/docs/a.txt")).unwrap(),
        "a\n"
    );
    assert!(!folder.join("user").exists());
    // The second checkout is the first one's folder, not built again.
    std::fs::write(folder.join("project/touched"), "").unwrap();
    let again = checkout(&f.cas, &snapshot, cache.path()).await.unwrap();
    assert_eq!(again, folder);
    assert!(again.join("project/touched").exists());
    let staging: Vec<_> = std::fs::read_dir(cache.path().join("snapshots"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(staging.len(), 1, "no staging folder is left: {staging:?}");

    let error = checkout(&f.cas, &built.hash, cache.path())
        .await
        .unwrap_err()
        .to_string();
    assert!(error.contains("is no project_snapshot"), "{error}");
    let error = checkout(&f.cas, &ContentHash::of(b"x"), cache.path())
        .await
        .unwrap_err()
        .to_string();
    assert!(error.contains("is not in the store"), "{error}");
}
