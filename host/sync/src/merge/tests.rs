//! The spec's merge cases, each through a real store.

use super::*;
use rye_cas::LocalStorage;

struct Store {
    _dir: tempfile::TempDir,
    cas: Cas<LocalStorage>,
}

fn store() -> Store {
    let dir = tempfile::tempdir().unwrap();
    let cas = Cas::new(LocalStorage::new(dir.path()));
    Store { _dir: dir, cas }
}

async fn blob(store: &Store, text: &str) -> String {
    store.cas.put_blob(text.as_bytes()).await.unwrap().hex()
}

fn files(entries: &[(&str, &str)]) -> Tree {
    Tree {
        items: BTreeMap::new(),
        files: entries
            .iter()
            .map(|(p, h)| ((*p).to_owned(), (*h).to_owned()))
            .collect(),
    }
}

async fn text(store: &Store, hash: &str) -> String {
    let bytes = store
        .cas
        .get_blob(&hash.parse().unwrap())
        .await
        .unwrap()
        .unwrap();
    String::from_utf8(bytes).unwrap()
}

#[tokio::test]
async fn changes_to_separate_lines_merge() {
    let s = store();
    let base = blob(&s, "line1\nline2\nline3\n").await;
    let ours = blob(&s, "LINE1\nline2\nline3\n").await;
    let theirs = blob(&s, "line1\nline2\nLINE3\n").await;
    let merged = three_way(
        &s.cas,
        &files(&[("notes.txt", &base)]),
        &files(&[("notes.txt", &ours)]),
        &files(&[("notes.txt", &theirs)]),
    )
    .await
    .unwrap();
    assert!(merged.conflicts.is_empty(), "{merged:?}");
    assert_eq!(
        text(&s, &merged.tree.files["notes.txt"]).await,
        "LINE1\nline2\nLINE3\n"
    );
}

#[tokio::test]
async fn the_same_line_changed_both_ways_is_a_content_conflict() {
    let s = store();
    let base = blob(&s, "line1\nline2\n").await;
    let ours = blob(&s, "ours\nline2\n").await;
    let theirs = blob(&s, "theirs\nline2\n").await;
    let merged = three_way(
        &s.cas,
        &files(&[("a.txt", &base)]),
        &files(&[("a.txt", &ours)]),
        &files(&[("a.txt", &theirs)]),
    )
    .await
    .unwrap();
    assert!(merged.tree.files.is_empty());
    let conflict = &merged.conflicts["a.txt"];
    assert_eq!(conflict.kind, ConflictKind::Content);
    assert_eq!(
        (
            conflict.base.as_deref(),
            conflict.ours.as_deref(),
            conflict.theirs.as_deref()
        ),
        (
            Some(base.as_str()),
            Some(ours.as_str()),
            Some(theirs.as_str())
        )
    );
    assert_eq!(merged.to_json()["conflicts"]["a.txt"]["type"], "content");
}

#[tokio::test]
async fn one_sided_changes_deletions_and_additions() {
    let s = store();
    let (x, y, z) = (
        blob(&s, "x\n").await,
        blob(&s, "y\n").await,
        blob(&s, "z\n").await,
    );
    let base = files(&[
        ("same", &x),
        ("ours_changed", &x),
        ("theirs_changed", &x),
        ("both_deleted", &x),
        ("ours_deleted", &x),
        ("theirs_deleted", &x),
        ("del_mod", &x),
        ("mod_del", &x),
    ]);
    let ours = files(&[
        ("same", &x),
        ("ours_changed", &y),
        ("theirs_changed", &x),
        ("theirs_deleted", &x),
        ("mod_del", &y),
        ("added_alike", &z),
        ("added_apart", &y),
    ]);
    let theirs = files(&[
        ("same", &x),
        ("ours_changed", &x),
        ("theirs_changed", &z),
        ("ours_deleted", &x),
        ("del_mod", &z),
        ("added_alike", &z),
        ("added_apart", &z),
    ]);
    let merged = three_way(&s.cas, &base, &ours, &theirs).await.unwrap();
    let expected: BTreeMap<String, String> = [
        ("same", &x),
        ("ours_changed", &y),
        ("theirs_changed", &z),
        ("added_alike", &z),
    ]
    .iter()
    .map(|(p, h)| ((*p).to_owned(), (*h).clone()))
    .collect();
    assert_eq!(merged.tree.files, expected);
    let kinds: BTreeMap<&str, &str> = merged
        .conflicts
        .iter()
        .map(|(p, c)| (p.as_str(), c.kind.name()))
        .collect();
    assert_eq!(
        kinds,
        BTreeMap::from([
            ("added_apart", "add/add"),
            ("del_mod", "delete/modify"),
            ("mod_del", "modify/delete"),
        ])
    );
}

#[tokio::test]
async fn a_file_and_a_folder_of_the_same_name_conflict() {
    let s = store();
    let x = blob(&s, "x\n").await;
    let merged = three_way(
        &s.cas,
        &files(&[]),
        &files(&[("a", &x), ("keep", &x)]),
        &files(&[("a/b.txt", &x), ("ab", &x)]),
    )
    .await
    .unwrap();
    assert_eq!(merged.conflicts["a"].kind, ConflictKind::PathPrefix);
    assert_eq!(merged.conflicts["a/b.txt"].kind, ConflictKind::PathPrefix);
    assert_eq!(
        merged.tree.files.keys().collect::<Vec<_>>(),
        ["ab", "keep"],
        "a sibling whose name only starts the same is no folder of it"
    );
}

#[tokio::test]
async fn an_item_on_one_side_and_a_file_on_the_other_conflict() {
    let s = store();
    let x = blob(&s, "x\n").await;
    let mut ours = files(&[]);
    ours.items.insert(".ai/tools/t.py".into(), x.clone());
    let theirs = files(&[(".ai/tools/t.py", &x)]);
    let merged = three_way(&s.cas, &files(&[]), &ours, &theirs)
        .await
        .unwrap();
    assert_eq!(
        merged.conflicts[".ai/tools/t.py"].kind,
        ConflictKind::ItemFileType
    );
    assert!(merged.tree.items.is_empty() && merged.tree.files.is_empty());
}

#[tokio::test]
async fn items_changed_on_both_sides_are_not_merged_as_text() {
    let s = store();
    // An item's hash names its item_source object, not a blob.
    let object = |n: u64| {
        let mut fields = serde_json::Map::new();
        fields.insert("n".into(), json!(n));
        rye_cas::object("item_source", fields)
    };
    let mut hashes = Vec::new();
    for n in 0..3 {
        hashes.push(s.cas.put_object(&object(n)).await.unwrap().hex());
    }
    let tree = |h: &str| {
        let mut t = Tree::default();
        t.items.insert(".ai/tools/x.yaml".into(), h.to_owned());
        t
    };
    let merged = three_way(
        &s.cas,
        &tree(&hashes[0]),
        &tree(&hashes[1]),
        &tree(&hashes[2]),
    )
    .await
    .unwrap();
    assert_eq!(
        merged.conflicts[".ai/tools/x.yaml"].kind,
        ConflictKind::Content
    );
}

#[tokio::test]
async fn large_or_binary_blobs_are_not_merged() {
    let s = store();
    let big = "x\n".repeat(MAX_MERGE_BYTES / 2 + 1);
    let (b, o, t) = (
        blob(&s, &big).await,
        blob(&s, &format!("a\n{big}")).await,
        blob(&s, &format!("{big}z\n")).await,
    );
    let merged = three_way(
        &s.cas,
        &files(&[("f", &b)]),
        &files(&[("f", &o)]),
        &files(&[("f", &t)]),
    )
    .await
    .unwrap();
    assert_eq!(merged.conflicts["f"].kind, ConflictKind::Content);
    let binary = |bytes: &'static [u8]| {
        let cas = s.cas.clone();
        async move { cas.put_blob(bytes).await.unwrap().hex() }
    };
    let (b, o, t) = (
        binary(b"\xff\n1\n2\n").await,
        binary(b"\xff\nX\n2\n").await,
        binary(b"\xff\n1\nY\n").await,
    );
    let merged = three_way(
        &s.cas,
        &files(&[("g", &b)]),
        &files(&[("g", &o)]),
        &files(&[("g", &t)]),
    )
    .await
    .unwrap();
    assert_eq!(merged.conflicts["g"].kind, ConflictKind::Content);
}

#[test]
fn the_same_change_on_both_sides_is_kept_once() {
    assert_eq!(
        merge_lines("a\nb\nc\n", "a\nB\nc\n", "a\nB\nc\n").as_deref(),
        Some("a\nB\nc\n")
    );
    assert_eq!(
        merge_lines("a\nb\nc\nd\ne\n", "a\nB\nc\nd\ne\n", "a\nb\nc\nd\nE\n").as_deref(),
        Some("a\nB\nc\nd\nE\n")
    );
    assert_eq!(merge_lines("a\n", "b\n", "c\n"), None);
}
