//! Manifests of real folders, stored in a real store.

use super::*;
use rye_cas::LocalStorage;

fn write(root: &Path, rel: &str, text: &str) {
    let path = root.join(rel);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

fn policy(project: &Path) -> Policy {
    Policy::load(&[&project.join(".ai")]).unwrap()
}

#[tokio::test]
async fn items_and_files_are_named_by_hash_and_stored() {
    let project = tempfile::tempdir().unwrap();
    let store = tempfile::tempdir().unwrap();
    let cas = Cas::new(LocalStorage::new(store.path()));
    let p = project.path();
    let key = rye_integrity::Keypair::generate().unwrap();
    let signed = rye_integrity::sign_text(
        "version: \"1.0.0\"\ntool_type: script\n",
        &rye_integrity::format_for(ItemKind::Tool, "wc.yaml", &[]).unwrap(),
        &key,
        std::time::SystemTime::now(),
    )
    .unwrap();
    write(p, ".ai/tools/demo/wc.yaml", &signed);
    write(p, ".ai/knowledge/notes/a.b.md", "plain\n");
    write(
        p,
        ".ai/config/cas/manifest.yaml",
        "sync:\n  include: [docs/]\n",
    );
    write(p, ".ai/state/objects/x", "never");
    write(p, ".ai/tools/.env", "SECRET=1");
    write(p, ".ai/tools/private_key.pem", "key");
    write(p, ".ai/other/x.md", "not an item folder");
    write(p, "docs/guide.txt", "guide\n");
    write(p, "docs/node_modules/x.txt", "no");
    write(p, "src/main.rs", "not included");
    std::os::unix::fs::symlink("/etc/passwd", p.join(".ai/tools/passwd.yaml")).unwrap();
    std::os::unix::fs::symlink(p.join(".ai/tools/demo"), p.join(".ai/tools/loop")).unwrap();

    let built = build(&cas, p, SpaceKind::Project, &policy(p))
        .await
        .unwrap();
    let manifest = &built.manifest;
    assert_eq!(manifest["kind"], "source_manifest");
    assert_eq!(manifest["space"], "project");
    let items: Vec<&String> = manifest["items"].as_object().unwrap().keys().collect();
    assert_eq!(
        items,
        [
            ".ai/config/cas/manifest.yaml",
            ".ai/knowledge/notes/a.b.md",
            ".ai/tools/demo/wc.yaml"
        ]
    );
    let files: Vec<&String> = manifest["files"].as_object().unwrap().keys().collect();
    assert_eq!(files, ["docs/guide.txt"]);
    let skipped: Vec<(&str, &str)> = built
        .skipped
        .iter()
        .map(|(p, w)| (p.as_str(), *w))
        .collect();
    assert_eq!(
        skipped,
        [
            (".ai/tools/.env", "excluded by the policy"),
            (".ai/tools/loop", "a symbolic link"),
            (".ai/tools/passwd.yaml", "a symbolic link"),
            (".ai/tools/private_key.pem", "excluded by the policy"),
        ]
    );

    // The manifest and everything it names are in the store.
    assert_eq!(
        cas.get_object(&built.hash).await.unwrap().as_ref(),
        Some(manifest)
    );
    let source_hash: ContentHash = manifest["items"][".ai/tools/demo/wc.yaml"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let source = cas.get_object(&source_hash).await.unwrap().unwrap();
    assert_eq!(source["item_ref"], "tool:demo/wc");
    assert_eq!(
        source["integrity"],
        ContentHash::of(signed.as_bytes()).hex()
    );
    assert_eq!(source["integrity"], source["content_blob_hash"]);
    assert_eq!(
        source["signature_info"]["pubkey_fp"],
        key.public().fingerprint()
    );
    let blob: ContentHash = source["content_blob_hash"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(
        cas.get_blob(&blob).await.unwrap().unwrap(),
        signed.as_bytes()
    );
    let note_hash: ContentHash = manifest["items"][".ai/knowledge/notes/a.b.md"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let note = cas.get_object(&note_hash).await.unwrap().unwrap();
    assert_eq!(note["item_ref"], "knowledge:notes/a.b");
    assert_eq!(note["signature_info"], Value::Null);

    // The same content, the same manifest; a change, another.
    let again = build(&cas, p, SpaceKind::Project, &policy(p))
        .await
        .unwrap();
    assert_eq!(again.hash, built.hash);
    write(p, "docs/guide.txt", "guide, changed\n");
    let changed = build(&cas, p, SpaceKind::Project, &policy(p))
        .await
        .unwrap();
    assert_ne!(changed.hash, built.hash);
    assert_eq!(changed.manifest["items"], manifest["items"]);
    // A user space carries no files.
    let user = build(&cas, p, SpaceKind::User, &policy(p)).await.unwrap();
    assert_eq!(user.manifest["files"], json!({}));
    assert_eq!(user.manifest["space"], "user");
}

#[test]
fn item_refs_drop_the_last_extension() {
    assert_eq!(
        item_ref(".ai/tools/demo/wc.py"),
        Some((ItemKind::Tool, "demo/wc".into()))
    );
    assert_eq!(
        item_ref(".ai/directives/x.md"),
        Some((ItemKind::Directive, "x".into()))
    );
    assert_eq!(
        item_ref(".ai/knowledge/a/b.tar.gz"),
        Some((ItemKind::Knowledge, "a/b.tar".into()))
    );
    assert_eq!(
        item_ref(".ai/tools/.hidden"),
        Some((ItemKind::Tool, ".hidden".into()))
    );
    assert_eq!(item_ref(".ai/state/x.json"), None);
    assert_eq!(item_ref("tools/x.py"), None);
}

#[tokio::test]
async fn a_space_or_item_folder_that_is_a_link_is_not_walked() {
    let outside = tempfile::tempdir().unwrap();
    write(outside.path(), "secret.md", "not the space's\n");
    write(outside.path(), "knowledge/secret.md", "not the space's\n");
    let store = tempfile::tempdir().unwrap();
    let cas = Cas::new(LocalStorage::new(store.path()));

    let project = tempfile::tempdir().unwrap();
    let p = project.path();
    write(p, ".ai/tools/demo/a.yaml", "a: 1\n");
    std::os::unix::fs::symlink(outside.path(), p.join(".ai/knowledge")).unwrap();
    let built = build(
        &cas,
        p,
        SpaceKind::Project,
        &Policy::from_value(&crate::policy::core_defaults()).unwrap(),
    )
    .await
    .unwrap();
    let items: Vec<&String> = built.manifest["items"]
        .as_object()
        .unwrap()
        .keys()
        .collect();
    assert_eq!(items, [".ai/tools/demo/a.yaml"]);
    assert!(
        built
            .skipped
            .contains(&(".ai/knowledge".into(), "a symbolic link"))
    );

    let linked = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(outside.path(), linked.path().join(".ai")).unwrap();
    let built = build(
        &cas,
        linked.path(),
        SpaceKind::Project,
        &Policy::from_value(&crate::policy::core_defaults()).unwrap(),
    )
    .await
    .unwrap();
    assert_eq!(built.manifest["items"], serde_json::json!({}));
    assert!(built.skipped.contains(&(".ai".into(), "a symbolic link")));
}

#[tokio::test]
async fn a_stamped_build_reads_only_what_changed_and_names_the_same() {
    let dir = tempfile::tempdir().unwrap();
    let store = tempfile::tempdir().unwrap();
    let cas = Cas::new(rye_cas::LocalStorage::new(store.path()));
    for i in 0..20 {
        let path = dir.path().join(format!(".ai/knowledge/n/{i}.md"));
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, format!("# {i}\n")).unwrap();
    }
    let policy = crate::policy::Policy::load(&[&dir.path().join(".ai")]).unwrap();
    let (first, mut stamps) = build_stamped(&cas, dir.path(), SpaceKind::Project, &policy, None)
        .await
        .unwrap();
    assert_eq!(stamps.len(), 20);
    // Stamps taken just after the files were written vouch for none of
    // them: all are read again, and the manifest is the same.
    let (same, _) = build_stamped(&cas, dir.path(), SpaceKind::Project, &policy, Some(&stamps))
        .await
        .unwrap();
    assert_eq!(same.hash, first.hash);
    // Stamps old enough vouch for unchanged files, which are then taken
    // at their word, unread: a stamp made to name another entry shows
    // it.
    let fake = ContentHash::of(b"never read").hex();
    let real = stamps.get(".ai/knowledge/n/5.md").unwrap().entry.clone();
    stamps = crate::stamps::Stamps::from_text(&stamps.to_text().replace(&real, &fake))
        .unwrap()
        .later(10_000_000_000);
    let (trusted, _) = build_stamped(&cas, dir.path(), SpaceKind::Project, &policy, Some(&stamps))
        .await
        .unwrap();
    assert_eq!(trusted.manifest["items"][".ai/knowledge/n/5.md"], fake);
    assert_eq!(
        trusted.manifest["items"][".ai/knowledge/n/4.md"],
        first.manifest["items"][".ai/knowledge/n/4.md"]
    );
    // A changed file is read again, whatever its stamp said.
    std::fs::write(dir.path().join(".ai/knowledge/n/5.md"), "# five\n").unwrap();
    let (changed, _) = build_stamped(&cas, dir.path(), SpaceKind::Project, &policy, Some(&stamps))
        .await
        .unwrap();
    let plain = build(&cas, dir.path(), SpaceKind::Project, &policy)
        .await
        .unwrap();
    assert_eq!(changed.hash, plain.hash);
    assert_ne!(changed.manifest["items"][".ai/knowledge/n/5.md"], fake);
}

/// A build patched at the paths a run touched is the build a full walk
/// makes of the same folder; paths it cannot patch say so.
#[tokio::test]
async fn a_patched_build_is_the_full_build_of_the_same_folder() {
    let project = tempfile::tempdir().unwrap();
    let store = tempfile::tempdir().unwrap();
    let cas = Cas::new(LocalStorage::new(store.path()));
    let p = project.path();
    for (rel, text) in [
        (".ai/knowledge/notes/a.md", "a"),
        (".ai/knowledge/notes/b.md", "b"),
        (".ai/knowledge/old/c.md", "c"),
        (".ai/knowledge/old/deep/d.md", "d"),
        (".ai/tools/demo/t.yaml", "t: 1\n"),
    ] {
        write(p, rel, text);
    }
    let policy = policy(p);
    let (base, stamps) = build_stamped(&cas, p, SpaceKind::Project, &policy, None)
        .await
        .unwrap();

    // Edited, added in a new folder (with a link and an excluded name
    // beside it), removed, a folder removed, and the run's own state.
    write(p, ".ai/knowledge/notes/a.md", "a, edited");
    write(p, ".ai/knowledge/state/new/e.md", "e");
    write(p, ".ai/knowledge/state/new/.env", "SECRET=1");
    std::os::unix::fs::symlink("/etc/passwd", p.join(".ai/knowledge/state/new/x.md")).unwrap();
    std::fs::remove_file(p.join(".ai/knowledge/notes/b.md")).unwrap();
    std::fs::remove_dir_all(p.join(".ai/knowledge/old")).unwrap();
    write(p, ".ai/state/out/n.txt", "n");
    let touched: BTreeSet<String> = [
        ".ai/knowledge/notes/a.md",
        ".ai/knowledge/state",
        ".ai/knowledge/notes/b.md",
        ".ai/knowledge/old",
        ".ai/knowledge/old/deep",
        ".ai/state",
    ]
    .into_iter()
    .map(str::to_owned)
    .collect();
    let mut after = stamps.clone();
    let patched = build_patched(&cas, p, &policy, &base.manifest, &mut after, &touched)
        .await
        .unwrap()
        .expect("patchable");
    let full = build(&cas, p, SpaceKind::Project, &policy).await.unwrap();
    assert_eq!(patched.manifest, full.manifest);
    assert_eq!(patched.hash, full.hash);
    let mut skipped = patched.skipped.clone();
    skipped.sort();
    let mut want = full.skipped.clone();
    want.sort();
    assert_eq!(skipped, want);
    let mut untaken = patched.passed.untaken.clone();
    untaken.sort();
    let mut want = full.passed.untaken.clone();
    want.sort();
    assert_eq!(untaken, want);
    for folder in &full.passed.folders {
        assert!(patched.passed.folders.contains(folder), "{folder}");
    }
    // The stamps make up the patched manifest and name its files only.
    assert_eq!(after.manifest(), Some(patched.hash.hex().as_str()));
    let names: Vec<&str> = after.entries().map(|(p, _)| p).collect();
    let items: Vec<&str> = full.manifest["items"]
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(names, items);

    // Nothing an item folder holds touched: the same manifest.
    let state: BTreeSet<String> = [".ai/state".to_owned()].into();
    let same = build_patched(&cas, p, &policy, &full.manifest, &mut after.clone(), &state)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(same.hash, full.hash);

    // What this does not patch.
    for path in ["", ".ai", "README.md", ".ai/config/cas/manifest.yaml"] {
        let one: BTreeSet<String> = [path.to_owned()].into();
        let mut kept = after.clone();
        let patched = build_patched(&cas, p, &policy, &full.manifest, &mut kept, &one)
            .await
            .unwrap();
        assert!(patched.is_none(), "{path:?}");
        assert_eq!(kept, after, "stamps are left as they were");
    }
    std::os::unix::fs::symlink(p.join(".ai/tools"), p.join(".ai/knowledge/linked")).unwrap();
    let one: BTreeSet<String> = [".ai/knowledge/linked".to_owned()].into();
    assert!(
        build_patched(&cas, p, &policy, &full.manifest, &mut after.clone(), &one)
            .await
            .unwrap()
            .is_none()
    );
}
