//! The store on real files: layout, checked reads, hostile files in its
//! place, refs under contention, and a writer killed mid-write.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use rye_cas::{Cas, CasError, Class, ContentHash, LocalRefs, LocalStorage, RefError, object};
use serde_json::{Map, json};

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
}

fn note(text: &str) -> serde_json::Value {
    let mut fields = Map::new();
    fields.insert("text".into(), json!(text));
    object("note", fields)
}

#[test]
fn blobs_and_objects_land_where_the_original_puts_them() {
    let dir = tempfile::tempdir().unwrap();
    let cas = Cas::new(LocalStorage::new(dir.path()));
    runtime().block_on(async {
        let blob = cas.put_blob(b"hello").await.unwrap();
        assert_eq!(
            blob.hex(),
            "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824"
        );
        assert!(dir.path().join("blobs/2c/f2").join(blob.hex()).is_file());
        assert_eq!(cas.get_blob(&blob).await.unwrap().unwrap(), b"hello");

        let value = json!({"kind": "note", "schema": 2, "text": "é"});
        let hash = cas.put_object(&value).await.unwrap();
        let h = hash.hex();
        let file = dir
            .path()
            .join(format!("objects/{}/{}/{h}.json", &h[..2], &h[2..4]));
        assert_eq!(
            std::fs::read_to_string(&file).unwrap(),
            r#"{"kind":"note","schema":2,"text":"\u00e9"}"#
        );
        assert_eq!(ContentHash::of(&std::fs::read(&file).unwrap()), hash);
        assert_eq!(cas.get_object(&hash).await.unwrap().unwrap(), value);
        // The same content again is the same address, stored once.
        assert_eq!(cas.put_object(&value).await.unwrap(), hash);
        assert_eq!(cas.has(&hash).await.unwrap(), Some(Class::Object));
        assert_eq!(cas.has(&blob).await.unwrap(), Some(Class::Blob));
        let absent = ContentHash::of(b"absent");
        assert_eq!(cas.has(&absent).await.unwrap(), None);
        assert!(cas.get_blob(&absent).await.unwrap().is_none());

        for bad in [
            json!([1]),
            json!({"kind": "x"}),
            json!({"schema": 2}),
            json!({"schema": "2", "kind": "x"}),
        ] {
            assert!(
                matches!(cas.put_object(&bad).await, Err(CasError::Shape(_))),
                "{bad}"
            );
        }
    });
    for bad in [
        "",
        "abc",
        &"A".repeat(64),
        &"g".repeat(64),
        &format!("../{}", "a".repeat(61)),
    ] {
        assert!(bad.parse::<ContentHash>().is_err(), "{bad}");
    }
}

#[test]
fn a_short_file_at_an_address_is_replaced_whole() {
    let dir = tempfile::tempdir().unwrap();
    let cas = Cas::new(LocalStorage::new(dir.path()));
    runtime().block_on(async {
        let value = note("a run's result");
        let bytes = rye_cas::canonical::to_vec(&value);
        let hash = ContentHash::of(&bytes);
        let h = hash.hex();
        let file = dir
            .path()
            .join(format!("objects/{}/{}/{h}.json", &h[..2], &h[2..4]));
        // What a crash mid-write left where the object goes: the first
        // half of its bytes.
        for put_new in [false, true] {
            std::fs::create_dir_all(file.parent().unwrap()).unwrap();
            std::fs::write(&file, &bytes[..bytes.len() / 2]).unwrap();
            assert!(matches!(
                cas.get_object(&hash).await,
                Err(CasError::Corrupt { .. })
            ));
            let stored = if put_new {
                cas.put_new_object(&value).await.unwrap()
            } else {
                cas.put_object(&value).await.unwrap()
            };
            assert_eq!(stored, hash);
            assert_eq!(std::fs::read(&file).unwrap(), bytes, "put_new: {put_new}");
            assert_eq!(cas.get_object(&hash).await.unwrap().unwrap(), value);
            std::fs::remove_file(&file).unwrap();
        }
        // A new object in a folder not made yet; nothing else is left.
        let fresh = note("another run's result");
        let hash = cas.put_new_object(&fresh).await.unwrap();
        assert_eq!(cas.get_object(&hash).await.unwrap().unwrap(), fresh);
        let h = hash.hex();
        let folder = dir.path().join(format!("objects/{}/{}", &h[..2], &h[2..4]));
        let names: Vec<_> = std::fs::read_dir(&folder)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, [std::ffi::OsString::from(format!("{h}.json"))]);
    });
}

#[test]
fn what_is_read_is_what_the_hash_promises() {
    let dir = tempfile::tempdir().unwrap();
    let cas = Cas::new(LocalStorage::new(dir.path()));
    runtime().block_on(async {
        let hash = cas.put_object(&note("kept")).await.unwrap();
        let file = dir.path().join(Class::Object.key(&hash));

        // Replaced with other content of the same length: refused, naming
        // the file.
        let original = std::fs::read(&file).unwrap();
        let swapped = String::from_utf8(original.clone())
            .unwrap()
            .replace("kept", "lost");
        std::fs::write(&file, &swapped).unwrap();
        let error = cas.get_object(&hash).await.unwrap_err();
        assert!(matches!(error, CasError::Corrupt { .. }), "{error}");
        assert!(error.to_string().contains(&hash.hex()), "{error}");

        // Cut short (a write a crash interrupted): the next put repairs it.
        std::fs::write(&file, &original[..10]).unwrap();
        assert!(cas.get_object(&hash).await.is_err());
        cas.put_object(&note("kept")).await.unwrap();
        assert_eq!(
            cas.get_object(&hash).await.unwrap().unwrap()["text"],
            "kept"
        );

        // A link in its place, even to the right bytes elsewhere, is not
        // content; nor is a FIFO (reading it would wait forever) or a
        // device.
        let elsewhere = dir.path().join("elsewhere.json");
        std::fs::write(&elsewhere, &original).unwrap();
        std::fs::remove_file(&file).unwrap();
        std::os::unix::fs::symlink(&elsewhere, &file).unwrap();
        let error = cas.get_object(&hash).await.unwrap_err();
        assert!(error.to_string().contains("symbolic link"), "{error}");
        std::fs::remove_file(&file).unwrap();
        std::os::unix::fs::symlink("/dev/zero", &file).unwrap();
        assert!(cas.get_object(&hash).await.is_err());
        std::fs::remove_file(&file).unwrap();
        let made = Command::new("mkfifo").arg(&file).status().unwrap();
        assert!(made.success());
        let error = cas.get_object(&hash).await.unwrap_err();
        assert!(error.to_string().contains("not a regular file"), "{error}");
        // A put replaces whatever stands in the slot.
        cas.put_object(&note("kept")).await.unwrap();
        assert_eq!(
            cas.get_object(&hash).await.unwrap().unwrap()["text"],
            "kept"
        );
    });
}

#[test]
fn refs_move_only_from_where_the_writer_saw_them() {
    let dir = tempfile::tempdir().unwrap();
    let refs = LocalRefs::new(dir.path());
    let (a, b) = (ContentHash::of(b"a"), ContentHash::of(b"b"));
    assert_eq!(refs.get("graphs/run-1").unwrap(), None);
    refs.compare_and_swap("graphs/run-1", None, a).unwrap();
    assert_eq!(refs.get("graphs/run-1").unwrap(), Some(a));
    assert_eq!(
        std::fs::read_to_string(dir.path().join("refs/graphs/run-1.json")).unwrap(),
        format!("{{\"hash\":\"{}\"}}", a.hex())
    );
    match refs.compare_and_swap("graphs/run-1", None, b) {
        Err(RefError::Conflict { actual, .. }) => assert_eq!(actual, Some(a)),
        other => panic!("{other:?}"),
    }
    refs.compare_and_swap("graphs/run-1", Some(a), b).unwrap();
    assert_eq!(refs.get("graphs/run-1").unwrap(), Some(b));

    for bad in [
        "", "../x", "/abs", ".hidden", "a//b", "a/../b", "sp ace", "a\\b",
    ] {
        assert!(
            matches!(refs.get(bad), Err(RefError::BadName(_))),
            "{bad:?}"
        );
        assert!(refs.compare_and_swap(bad, None, a).is_err(), "{bad:?}");
    }
    std::fs::write(dir.path().join("refs/broken.json"), "{\"hash\": 7}").unwrap();
    assert!(matches!(refs.get("broken"), Err(RefError::Corrupt { .. })));

    // Sixteen writers from one value: exactly one moves it.
    let start = refs.get("graphs/run-1").unwrap();
    let winners: usize = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..16u8)
            .map(|i| {
                let refs = refs.clone();
                scope.spawn(move || {
                    refs.compare_and_swap("graphs/run-1", start, ContentHash::of(&[i]))
                        .is_ok()
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| usize::from(h.join().unwrap()))
            .sum()
    });
    assert_eq!(winners, 1);
}

/// What the killed writer does: objects and a ref advanced after each,
/// until it is killed.
const WRITER: &str = "RYE_CAS_TEST_WRITER";

#[test]
fn writer_for_the_kill_test() {
    let Some(root) = std::env::var_os(WRITER) else {
        return;
    };
    let cas = Cas::new(LocalStorage::new(&root));
    let refs = LocalRefs::new(&root);
    runtime().block_on(async {
        let mut head = None;
        for round in 0u64.. {
            let blob = cas.put_blob(&vec![round as u8; 64 << 10]).await.unwrap();
            let mut fields = Map::new();
            fields.insert("round".into(), json!(round));
            fields.insert("blob".into(), json!(blob.hex()));
            let hash = cas.put_object(&object("step", fields)).await.unwrap();
            refs.compare_and_swap("head", head, hash).unwrap();
            head = Some(hash);
        }
    });
}

#[test]
fn a_writer_killed_mid_write_leaves_only_whole_content() {
    let dir = tempfile::tempdir().unwrap();
    for attempt in 0..5u64 {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "writer_for_the_kill_test", "--test-threads", "1"])
            .env(WRITER, dir.path())
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(150 + attempt * 37));
        child.kill().unwrap();
        child.wait().unwrap();
        check_whole(dir.path());
    }
}

/// Every object and blob under `root` reads back as its hash; the head
/// ref points at an object that is there, whose blob is there.
fn check_whole(root: &Path) {
    let cas = Cas::new(LocalStorage::new(root));
    let refs = LocalRefs::new(root);
    runtime().block_on(async {
        let head = refs
            .get("head")
            .unwrap()
            .expect("the writer advanced the ref");
        let step = cas
            .get_object(&head)
            .await
            .unwrap()
            .expect("the head's object is stored");
        let blob: ContentHash = step["blob"].as_str().unwrap().parse().unwrap();
        assert!(cas.get_blob(&blob).await.unwrap().is_some());
        for class in ["blobs", "objects"] {
            let mut stack = vec![root.join(class)];
            while let Some(dir) = stack.pop() {
                for entry in std::fs::read_dir(&dir).unwrap() {
                    let path = entry.unwrap().path();
                    if path.is_dir() {
                        stack.push(path);
                        continue;
                    }
                    let name = path.file_name().unwrap().to_str().unwrap();
                    // A write the kill cut short is never read; on Linux a
                    // write has no name until it is whole, so none is left.
                    assert!(
                        !(cfg!(target_os = "linux") && name.contains(".tmp.")),
                        "{}",
                        path.display()
                    );
                    if name.contains(".tmp.") {
                        continue;
                    }
                    let hash: ContentHash = name.trim_end_matches(".json").parse().unwrap();
                    let bytes = std::fs::read(&path).unwrap();
                    assert_eq!(ContentHash::of(&bytes), hash, "{}", path.display());
                }
            }
        }
    });
}
