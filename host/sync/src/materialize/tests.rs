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

/// Every entry under `dir`: folders with a `/` after them, links with
/// an `@`, files as `path=text`.
fn everything(dir: &Path) -> Vec<String> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<String>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            let rel = path
                .strip_prefix(root)
                .unwrap()
                .to_string_lossy()
                .into_owned();
            let meta = std::fs::symlink_metadata(&path).unwrap();
            if meta.file_type().is_symlink() {
                out.push(format!("{rel}@"));
            } else if meta.is_dir() {
                out.push(format!("{rel}/"));
                walk(root, &path, out);
            } else {
                let text = std::fs::read_to_string(&path).unwrap_or_default();
                out.push(format!("{rel}={}", text.trim()));
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, dir, &mut out);
    out.sort();
    out
}

/// A workspace a run has just left things in: its manifest read back
/// as a build reads a project, then cleared to exactly that manifest,
/// then brought to the next one by what differs alone: the same files,
/// folders and nothing else as a full sync makes.
#[tokio::test]
async fn a_folder_cleared_to_its_manifest_is_brought_to_the_next_by_the_difference() {
    use std::os::unix::ffi::OsStrExt as _;
    let f = fixture();
    let store = f.project.path();
    let write = |root: &Path, rel: &str, text: &str| {
        let path = root.join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    };
    // Items only: the policy of the fixture carries docs/, which a
    // cleared folder cannot promise.
    std::fs::remove_file(store.join(".ai/config/cas/manifest.yaml")).unwrap();
    std::fs::remove_dir_all(store.join("docs")).unwrap();
    write(store, ".ai/tools/demo/a", "a file\n");
    let first = built(&f).await;
    let work = tempfile::tempdir().unwrap();
    let root = work.path().join("project");
    sync(&f.cas, &first.manifest, &root, None).await.unwrap();

    // What a run leaves: a new item, a changed one, and strays of every
    // kind the manifest will not name.
    write(&root, ".ai/knowledge/new.md", "new\n");
    write(&root, ".ai/knowledge/k.md", "changed\n");
    write(&root, "outside.txt", "beside .ai\n");
    write(&root, "build/deep/out.o", "object\n");
    write(&root, ".ai/state/threads/t.json", "{}\n");
    write(&root, ".ai/other/x.md", "no item folder\n");
    write(&root, ".ai/knowledge/.env", "SECRET=1\n");
    std::fs::create_dir_all(root.join(".ai/tools/empty/inner")).unwrap();
    let outside = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(outside.path(), root.join(".ai/knowledge/link")).unwrap();
    let odd = std::ffi::OsStr::from_bytes(b"odd-\xff.md");
    std::fs::write(root.join(".ai/knowledge").join(odd), "not UTF-8\n").unwrap();

    let policy = crate::policy::Policy::load(&[&root.join(".ai")]).unwrap();
    let (read, stamps) = crate::manifest::build_stamped(
        &f.cas,
        &root,
        crate::manifest::SpaceKind::Project,
        &policy,
        None,
    )
    .await
    .unwrap();
    assert!(
        clear_to(&root, &read.manifest, &read.passed, &[]).unwrap(),
        "items only"
    );
    let holds = &read.manifest;
    assert_eq!(
        everything(&root),
        [
            ".ai/",
            ".ai/knowledge/",
            ".ai/knowledge/k.md=changed",
            ".ai/knowledge/new.md=new",
            ".ai/tools/",
            ".ai/tools/demo/",
            ".ai/tools/demo/a=a file",
            ".ai/tools/demo/wc.yaml=tool",
        ]
    );
    assert_eq!(listing(outside.path()), Vec::<String>::new());
    assert_eq!(holds["items"].as_object().unwrap().len(), 4);

    // The next snapshot: items gone, one changed, one added, and a
    // folder where a file was.
    let next = {
        let project = tempfile::tempdir().unwrap();
        for (rel, text) in [
            (".ai/knowledge/k.md", "changed again\n"),
            (".ai/tools/demo/a/b.yaml", "a folder where a file was\n"),
            (".ai/knowledge/k/inner.md", "beside k.md\n"),
        ] {
            write(project.path(), rel, text);
        }
        let policy = crate::policy::Policy::load(&[]).unwrap();
        crate::manifest::build(
            &f.cas,
            project.path(),
            crate::manifest::SpaceKind::Project,
            &policy,
        )
        .await
        .unwrap()
    };
    let (done, after) = sync_known(&f.cas, &next.manifest, &root, holds, stamps.clone())
        .await
        .unwrap();
    assert_eq!(
        (done.kept, done.written, done.removed),
        (0, 3, 3),
        "{done:?}"
    );
    let fresh = work.path().join("fresh");
    sync(&f.cas, &next.manifest, &fresh, None).await.unwrap();
    assert_eq!(everything(&root), everything(&fresh));
    assert_eq!(after.len(), 3);
    // And what it left is what a full sync, trusting those stamps, finds
    // in place: nothing to write.
    let (again, _) = sync(&f.cas, &next.manifest, &root, Some(&after))
        .await
        .unwrap();
    assert_eq!((again.written, again.removed), (0, 0), "{again:?}");
}

/// Folders a clearing spares keep what they hold, and their folders
/// keep nothing else; a link standing where a spared folder would be is
/// removed, and what it points at is left alone.
#[tokio::test]
async fn a_cleared_folder_keeps_the_folders_it_spares_and_nothing_beside_them() {
    let f = fixture();
    let store = f.project.path();
    std::fs::remove_file(store.join(".ai/config/cas/manifest.yaml")).unwrap();
    std::fs::remove_dir_all(store.join("docs")).unwrap();
    let first = built(&f).await;
    let work = tempfile::tempdir().unwrap();
    let root = work.path().join("project");
    sync(&f.cas, &first.manifest, &root, None).await.unwrap();
    let write = |rel: &str| {
        let path = root.join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, rel).unwrap();
    };
    write(".ai/state/threads/registry.db");
    write(".ai/state/threads/deep/start.json");
    write(".ai/state/notes.md");
    write(".ai/state/objects-not/x");
    write(".ai/other/y");
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("kept.txt"), "theirs").unwrap();
    std::os::unix::fs::symlink(outside.path(), root.join(".ai/state/objects")).unwrap();
    let spare = [".ai/state/threads", ".ai/state/objects"];

    assert!(clear_to(&root, &first.manifest, &first.passed, &spare).unwrap());
    let left: Vec<String> = everything(&root)
        .into_iter()
        .filter(|p| p.starts_with(".ai/state") || p.starts_with(".ai/other"))
        .collect();
    assert_eq!(
        left,
        [
            ".ai/state/",
            ".ai/state/threads/",
            ".ai/state/threads/deep/",
            ".ai/state/threads/deep/start.json=.ai/state/threads/deep/start.json",
            ".ai/state/threads/registry.db=.ai/state/threads/registry.db",
        ]
    );
    assert_eq!(listing(outside.path()), ["kept.txt=theirs"]);

    // Spared nothing, the same clearing takes the run's state whole.
    assert!(clear_to(&root, &first.manifest, &first.passed, &[]).unwrap());
    assert!(!root.join(".ai/state").exists());
}

/// A manifest naming files outside `.ai/` leaves the folder as it is
/// and promises nothing.
#[tokio::test]
async fn a_folder_with_files_outside_its_item_folders_is_not_cleared() {
    let f = fixture();
    let first = built(&f).await;
    let target = tempfile::tempdir().unwrap();
    sync(&f.cas, &first.manifest, target.path(), None)
        .await
        .unwrap();
    std::fs::write(target.path().join("stray.txt"), "stays\n").unwrap();
    assert!(!clear_to(target.path(), &first.manifest, &first.passed, &[]).unwrap());
    assert!(target.path().join("stray.txt").exists());
}

/// A folder brought to a manifest by the difference checks what it
/// writes as a full sync checks everything: nothing is touched when one
/// new path is bad, whatever the rest of the manifest.
#[tokio::test]
async fn a_sync_by_the_difference_refuses_bad_manifests_before_touching_anything() {
    let f = fixture();
    let store = f.project.path();
    std::fs::remove_file(store.join(".ai/config/cas/manifest.yaml")).unwrap();
    std::fs::remove_dir_all(store.join("docs")).unwrap();
    let holds = built(&f).await.manifest;
    let work = tempfile::tempdir().unwrap();
    let root = work.path().join("project");
    let (_, stamps) = sync(&f.cas, &holds, &root, None).await.unwrap();
    let before = everything(&root);
    let source = holds["items"][".ai/knowledge/k.md"]
        .as_str()
        .unwrap()
        .to_owned();
    let with = |section: &str, path: &str, entry: &str| {
        let mut manifest = holds.clone();
        let map = manifest
            .as_object_mut()
            .unwrap()
            .entry(section)
            .or_insert_with(|| json!({}));
        map[path] = json!(entry);
        // A changed entry too, so the difference is never only the bad one.
        manifest["items"][".ai/tools/demo/wc.yaml"] = json!(source);
        manifest
    };
    for (manifest, says) in [
        (
            with("items", ".ai/knowledge/../../up.md", &source),
            "not written",
        ),
        (with("items", "/abs.md", &source), "absolute"),
        (
            with("items", ".ai/knowledge/k.md/in.md", &source),
            "as a file and as a folder",
        ),
        (
            with("items", ".ai/knowledge", &source),
            "as a file and as a folder",
        ),
        (
            with("items", ".ai/knowledge/new.md", "not a hash"),
            "no hash",
        ),
        (with("files", ".ai/knowledge/k.md", &source), "twice"),
    ] {
        let error = sync_known(&f.cas, &manifest, &root, &holds, stamps.clone())
            .await
            .unwrap_err()
            .to_string();
        assert!(error.contains(says), "{manifest}: {error}");
        assert_eq!(everything(&root), before, "{manifest}");
    }
    // The same manifest without the bad path goes through.
    let good = with("items", ".ai/knowledge/new.md", &source);
    let (done, _) = sync_known(&f.cas, &good, &root, &holds, stamps)
        .await
        .unwrap();
    assert_eq!((done.written, done.kept, done.removed), (2, 1, 0));
    let fresh = work.path().join("fresh");
    sync(&f.cas, &good, &fresh, None).await.unwrap();
    assert_eq!(everything(&root), everything(&fresh));
}
