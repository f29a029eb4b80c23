//! The database through a real SQLite file, reopened as a restarted node
//! would, and raced by many writers at once.

use super::*;

#[tokio::test]
async fn a_nonce_is_refused_within_its_window_even_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("node.db");
    let db = Db::open(&path).await.unwrap();
    assert!(db.fresh_nonce("fp1:n1", 1000, 360).await.unwrap());
    assert!(!db.fresh_nonce("fp1:n1", 1001, 360).await.unwrap());
    assert!(db.fresh_nonce("fp2:n1", 1001, 360).await.unwrap());
    drop(db);
    let reopened = Db::open(&path).await.unwrap();
    assert!(
        !reopened.fresh_nonce("fp1:n1", 1300, 360).await.unwrap(),
        "replayed after a restart"
    );
    // Past its window the key is let go (its timestamp is long refused).
    assert!(reopened.fresh_nonce("fp1:n1", 1361, 360).await.unwrap());
}

#[tokio::test]
async fn held_objects_are_answered_in_one_query_per_principal() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(&dir.path().join("node.db")).await.unwrap();
    let held = |hash: &str, size| Held {
        hash: hash.into(),
        kind: "blob",
        size,
        object_kind: None,
        content_blob: None,
    };
    db.hold("alice", &[held("aa", 10), held("bb", 20)], 1)
        .await
        .unwrap();
    db.hold("alice", &[held("aa", 10)], 2).await.unwrap();
    db.hold("bob", &[held("cc", 5)], 1).await.unwrap();
    let asked: Vec<String> = ["aa", "bb", "cc", "dd"].map(String::from).to_vec();
    let alice = db.held("alice", &asked).await.unwrap();
    assert_eq!(alice, HashSet::from(["aa".to_owned(), "bb".to_owned()]));
    let bob = db.held("bob", &asked).await.unwrap();
    assert_eq!(
        bob,
        HashSet::from(["cc".to_owned()]),
        "another principal's objects are not bob's"
    );
    assert_eq!(db.stored_bytes("alice").await.unwrap(), 30);
    assert_eq!(db.stored_bytes("nobody").await.unwrap(), 0);
    // Ten thousand asked at once.
    let many: Vec<String> = (0..10_000).map(|i| format!("{i:064x}")).collect();
    assert!(db.held("alice", &many).await.unwrap().is_empty());
}

#[tokio::test]
async fn a_head_moves_only_from_where_it_is() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(&dir.path().join("node.db")).await.unwrap();
    assert_eq!(db.head("alice", "/p").await.unwrap(), None);
    assert_eq!(
        db.advance_head("alice", "/p", None, "h1", 1).await.unwrap(),
        Ok(())
    );
    assert_eq!(
        db.advance_head("alice", "/p", None, "h2", 2).await.unwrap(),
        Err(Moved {
            actual: Some("h1".into())
        })
    );
    assert_eq!(
        db.advance_head("alice", "/p", Some("h0"), "h2", 2)
            .await
            .unwrap(),
        Err(Moved {
            actual: Some("h1".into())
        })
    );
    assert_eq!(
        db.advance_head("alice", "/p", Some("h1"), "h2", 3)
            .await
            .unwrap(),
        Ok(())
    );
    assert_eq!(db.head("alice", "/p").await.unwrap().as_deref(), Some("h2"));
    assert_eq!(db.head("bob", "/p").await.unwrap(), None);
    assert_eq!(
        db.advance_head("bob", "/p", Some("h2"), "h3", 3)
            .await
            .unwrap(),
        Err(Moved { actual: None })
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn of_twenty_writers_from_one_head_exactly_one_moves_it() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(&dir.path().join("node.db")).await.unwrap();
    db.advance_head("alice", "/p", None, "base", 1)
        .await
        .unwrap()
        .unwrap();
    let mut writers = Vec::new();
    for i in 0..20 {
        let db = db.clone();
        writers.push(tokio::spawn(async move {
            db.advance_head("alice", "/p", Some("base"), &format!("w{i}"), 2)
                .await
                .unwrap()
        }));
    }
    let mut won = Vec::new();
    for (i, writer) in writers.into_iter().enumerate() {
        match writer.await.unwrap() {
            Ok(()) => won.push(format!("w{i}")),
            Err(moved) => assert!(moved.actual.is_some_and(|h| h.starts_with('w'))),
        }
    }
    assert_eq!(won.len(), 1, "{won:?}");
    assert_eq!(db.head("alice", "/p").await.unwrap(), Some(won[0].clone()));
}

#[tokio::test]
async fn a_user_space_moves_by_revision() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(&dir.path().join("node.db")).await.unwrap();
    assert_eq!(db.user_space("alice").await.unwrap(), None);
    assert_eq!(
        db.push_user_space("alice", None, "m1", 10).await.unwrap(),
        Ok(1)
    );
    assert_eq!(
        db.push_user_space("alice", None, "m2", 11).await.unwrap(),
        Err(Moved { actual: Some(1) })
    );
    assert_eq!(
        db.push_user_space("alice", Some(1), "m2", 12)
            .await
            .unwrap(),
        Ok(2)
    );
    assert_eq!(
        db.push_user_space("alice", Some(1), "m3", 13)
            .await
            .unwrap(),
        Err(Moved { actual: Some(2) })
    );
    assert_eq!(
        db.user_space("alice").await.unwrap(),
        Some(UserSpace {
            manifest: "m2".into(),
            revision: 2,
            pushed_at: 12
        })
    );
}
