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
    let (done, _) = sync(&f.cas, &built.manifest, target.path(), None)
        .await
        .unwrap();
    assert_eq!(done.written, 4);
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
        let error = sync(&f.cas, &manifest, &inside, None)
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
async fn a_link_planted_in_the_target_is_removed_not_followed() {
    let f = fixture();
    let blob = f.cas.put_blob(b"evil\n").await.unwrap().hex();
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("f.txt"), "outside\n").unwrap();
    let target = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(outside.path(), target.path().join("docs")).unwrap();
    std::os::unix::fs::symlink(outside.path().join("f.txt"), target.path().join("f.txt")).unwrap();
    let manifest = json!({"files": {"docs/a.txt": blob, "docs/sub/b.txt": blob, "f.txt": blob}});
    sync(&f.cas, &manifest, target.path(), None).await.unwrap();
    assert_eq!(
        listing(outside.path()),
        ["f.txt=outside"],
        "a write went through a link"
    );
    for rel in ["docs", "f.txt"] {
        let meta = std::fs::symlink_metadata(target.path().join(rel)).unwrap();
        assert!(!meta.file_type().is_symlink(), "{rel} is still a link");
    }
    assert_eq!(
        listing(target.path()),
        ["docs/a.txt=evil", "docs/sub/b.txt=evil", "f.txt=evil"]
    );
}

#[tokio::test]
async fn a_missing_object_is_named() {
    let f = fixture();
    let built = built(&f).await;
    let mut manifest = built.manifest.clone();
    manifest["files"]["docs/gone.txt"] = json!(ContentHash::of(b"never stored").hex());
    let target = tempfile::tempdir().unwrap();
    let error = sync(&f.cas, &manifest, target.path(), None)
        .await
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("docs/gone.txt: blob") && error.contains("is missing"),
        "{error}"
    );
}

#[tokio::test]
async fn a_kept_folder_is_brought_to_a_manifest_by_writing_only_what_differs() {
    let f = fixture();
    let first = built(&f).await;
    let target = tempfile::tempdir().unwrap();
    let space = target.path().join("space");
    // Into an empty folder: everything written.
    let (done, stamps) = sync(&f.cas, &first.manifest, &space, None).await.unwrap();
    assert_eq!((done.kept, done.written, done.removed), (0, 4, 0));
    assert_eq!(stamps.len(), 4);
    assert_eq!(listing(&space), listing(f.project.path()));

    // What a run leaves: a changed item, a new file, a link out, a folder
    // of its own, a file where a folder of the manifest is.
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(space.join(".ai/knowledge/k.md"), "changed by the run\n").unwrap();
    std::fs::create_dir_all(space.join(".ai/state/threads")).unwrap();
    std::fs::write(space.join(".ai/state/threads/t.json"), "{}").unwrap();
    std::os::unix::fs::symlink(outside.path(), space.join("docs/out")).unwrap();
    std::fs::write(outside.path().join("keep.txt"), "outside\n").unwrap();
    std::fs::remove_dir_all(space.join(".ai/tools/demo")).unwrap();
    std::fs::write(space.join(".ai/tools/demo"), "a file in a folder's place").unwrap();

    // The next snapshot changes one file and adds one.
    std::fs::write(f.project.path().join("docs/a.txt"), "a, changed\n").unwrap();
    std::fs::write(f.project.path().join("docs/b.txt"), "b\n").unwrap();
    let second = built(&f).await;
    let (done, _) = sync(&f.cas, &second.manifest, &space, Some(&stamps))
        .await
        .unwrap();
    assert_eq!(listing(&space), listing(f.project.path()));
    // Kept: the config (k.md was changed, so rewritten); written: k.md,
    // the tool, a.txt and b.txt; removed: .ai/state, the link and the
    // file in the tool folder's place.
    assert_eq!(
        (done.kept, done.written, done.removed),
        (1, 4, 3),
        "{done:?}"
    );
    assert_eq!(
        std::fs::read_to_string(outside.path().join("keep.txt")).unwrap(),
        "outside\n",
        "nothing behind the link was touched"
    );
    assert!(!space.join(".ai/state").exists());
}

#[tokio::test]
async fn a_sync_refuses_bad_manifests_before_touching_anything() {
    let f = fixture();
    let blob = f.cas.put_blob(b"x\n").await.unwrap().hex();
    let target = tempfile::tempdir().unwrap();
    std::fs::write(target.path().join("stays.txt"), "here\n").unwrap();
    for manifest in [
        json!({"files": {"../up.txt": blob}}),
        json!({"files": {"a": blob, "a/b": blob}}),
        json!({"files": {"a": "not a hash"}}),
        json!({"items": {".ai/knowledge/k.md": blob}, "files": {".ai/knowledge/k.md": blob}}),
    ] {
        let error = sync(&f.cas, &manifest, target.path(), None)
            .await
            .unwrap_err()
            .to_string();
        assert!(!error.is_empty());
        assert_eq!(listing(target.path()), ["stays.txt=here"], "{manifest}");
    }
}
