//! The object exchange against a real store, hostile requests included.

use super::*;
use rye_cas::LocalStorage;

fn store() -> (tempfile::TempDir, Cas<LocalStorage>) {
    let dir = tempfile::tempdir().unwrap();
    let cas = Cas::new(LocalStorage::new(dir.path()));
    (dir, cas)
}

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

#[tokio::test]
async fn put_then_has_then_get() {
    let (_dir, cas) = store();
    let blob = ContentHash::of(b"hello\n");
    // An object spelled with spaces and keys out of order: its canonical
    // form's hash is the one that counts.
    let spelled = br#"{ "kind": "note", "schema": 2, "b": [1, 2] }"#;
    let value: Value = serde_json::from_slice(spelled).unwrap();
    let object = ContentHash::of(&rye_cas::canonical::to_vec(&value));
    let stored = put(
        &cas,
        &json!({"entries": [
            {"hash": blob.hex(), "kind": "blob", "data": b64(b"hello\n")},
            {"hash": object.hex(), "kind": "object", "data": b64(spelled)},
        ]}),
    )
    .await
    .unwrap();
    assert_eq!(stored, json!({"stored": [blob.hex(), object.hex()]}));
    let absent = ContentHash::of(b"absent").hex();
    let answer = has(&cas, &json!({"hashes": [blob.hex(), absent, object.hex()]}))
        .await
        .unwrap();
    assert_eq!(
        answer,
        json!({"present": [blob.hex(), object.hex()], "missing": [absent]})
    );
    let got = get(&cas, &json!({"hashes": [object.hex(), absent, blob.hex()]}))
        .await
        .unwrap();
    let entries = got["entries"].as_array().unwrap();
    assert_eq!(entries.len(), 2, "the missing one is left out");
    assert_eq!(entries[0]["kind"], "object");
    assert_eq!(
        entries[0]["data"],
        b64(br#"{"b":[1,2],"kind":"note","schema":2}"#),
        "objects come back canonical"
    );
    assert_eq!(
        entries[1],
        json!({"hash": blob.hex(), "kind": "blob", "data": b64(b"hello\n")})
    );
}

#[tokio::test]
async fn one_bad_entry_and_nothing_is_stored() {
    let (dir, cas) = store();
    let good = ContentHash::of(b"good");
    let liar = ContentHash::of(b"what it claims");
    let refused = put(
        &cas,
        &json!({"entries": [
            {"hash": good.hex(), "kind": "blob", "data": b64(b"good")},
            {"hash": liar.hex(), "kind": "blob", "data": b64(b"something else")},
            {"hash": good.hex(), "kind": "blob", "data": "not base64!"},
            {"hash": good.hex(), "kind": "tree", "data": b64(b"good")},
            {"hash": "ABC", "kind": "blob", "data": b64(b"good")},
            {"hash": ContentHash::of(b"[1]").hex(), "kind": "object", "data": b64(b"[1]")},
            {"hash": ContentHash::of(b"{").hex(), "kind": "object", "data": b64(b"{")},
        ]}),
    )
    .await
    .unwrap_err();
    assert_eq!(refused.status, 400);
    let errors: Vec<&str> = refused.body["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["error"].as_str().unwrap())
        .collect();
    assert_eq!(errors.len(), 6, "{errors:#?}");
    assert!(errors[0].starts_with("the bytes hash to "), "{errors:?}");
    assert!(
        errors[1].starts_with("the data is not base64"),
        "{errors:?}"
    );
    assert!(errors[2].contains("\"tree\" is neither"), "{errors:?}");
    assert!(errors[3].contains("is no hash"), "{errors:?}");
    assert!(errors[4].contains("no integer schema"), "{errors:?}");
    assert!(errors[5].contains("not JSON"), "{errors:?}");
    assert_eq!(
        cas.has(&good).await.unwrap(),
        None,
        "the good entry was not stored"
    );
    let files = walkdir(dir.path());
    assert!(files.is_empty(), "{files:?}");
}

fn walkdir(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            found.extend(walkdir(&path));
        } else {
            found.push(path);
        }
    }
    found
}

#[tokio::test]
async fn batches_and_hashes_are_bounded_and_checked() {
    let (_dir, cas) = store();
    let many = vec![json!(ContentHash::of(b"x").hex()); MAX_BATCH + 1];
    let refused = has(&cas, &json!({"hashes": many})).await.unwrap_err();
    assert!(
        refused.body["error"]
            .as_str()
            .unwrap()
            .contains("more than 10000")
    );
    for bad in [json!("../../etc/passwd"), json!(7), json!("A".repeat(64))] {
        let refused = get(&cas, &json!({"hashes": [bad]})).await.unwrap_err();
        assert_eq!(refused.status, 400);
        assert!(
            refused.body["error"]
                .as_str()
                .unwrap()
                .contains("is no hash"),
            "{refused:?}"
        );
    }
    assert_eq!(has(&cas, &json!({})).await.unwrap_err().status, 400);
    assert_eq!(
        put(&cas, &json!({"entries": {}})).await.unwrap_err().status,
        400
    );
}

#[tokio::test]
async fn a_manifest_closure_is_whole_or_refused() {
    let (_dir, cas) = store();
    let project = tempfile::tempdir().unwrap();
    let write = |rel: &str, text: &str| {
        let path = project.path().join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    };
    write(".ai/tools/a.yaml", "a: 1\n");
    write(".ai/knowledge/k.md", "k\n");
    write(
        ".ai/config/cas/manifest.yaml",
        "sync: {include: [notes.txt]}\n",
    );
    write("notes.txt", "n\n");
    let policy = crate::policy::Policy::load(&[&project.path().join(".ai")]).unwrap();
    let built = crate::manifest::build(
        &cas,
        project.path(),
        crate::manifest::SpaceKind::Project,
        &policy,
    )
    .await
    .unwrap();
    let whole = closure(&cas, &built.hash).await.unwrap();
    assert_eq!(
        whole.objects.len(),
        4,
        "the manifest and three item sources"
    );
    assert_eq!(whole.blobs.len(), 4, "three items' content and one file");
    assert!(whole.objects.contains(&built.hash.hex()));

    // A blob gone: refused, naming it.
    let gone: ContentHash = built.manifest["files"]["notes.txt"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    cas.delete(Class::Blob, &gone).await.unwrap();
    let refused = closure(&cas, &built.hash).await.unwrap_err();
    assert_eq!(refused.body["missing"], json!([gone.hex()]));

    // A manifest naming what is not an item source; one not in the store.
    let mut fields = serde_json::Map::new();
    fields.insert("space".into(), json!("project"));
    fields.insert(
        "items".into(),
        json!({".ai/tools/x.yaml": built.hash.hex()}),
    );
    fields.insert("files".into(), json!({}));
    let odd = cas
        .put_object(&rye_cas::object("source_manifest", fields))
        .await
        .unwrap();
    let refused = closure(&cas, &odd).await.unwrap_err();
    assert!(
        refused.body["wrong"][0]
            .as_str()
            .unwrap()
            .contains("is no item_source"),
        "{refused:?}"
    );
    let nowhere = ContentHash::of(b"nowhere");
    let refused = closure(&cas, &nowhere).await.unwrap_err();
    assert_eq!(refused.body["missing"], json!([nowhere.hex()]));
    // Not a manifest at all.
    let source: ContentHash = built.manifest["items"][".ai/tools/a.yaml"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let refused = closure(&cas, &source).await.unwrap_err();
    assert!(
        refused.body["error"]
            .as_str()
            .unwrap()
            .contains("is no source_manifest")
    );
}
