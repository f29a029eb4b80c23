//! The database through a real SQLite file and a real PostgreSQL
//! server (a database of its own for each test), reopened as a restarted
//! node would, and raced by many writers at once.

use super::*;
use gc::{Claimed, Roots};

/// A database a test runs on, which it can open again.
enum Place {
    Sqlite(tempfile::TempDir),
    Postgres(String),
}

impl Place {
    async fn open(&self) -> Db {
        match self {
            Place::Sqlite(dir) => Db::open(&dir.path().join("node.db")).await.unwrap(),
            Place::Postgres(url) => Db::connect(url).await.unwrap(),
        }
    }
}

/// A SQLite file, and a PostgreSQL database where PostgreSQL is
/// installed (under CI it must be).
fn places(test: &str) -> Vec<Place> {
    let mut places = vec![Place::Sqlite(tempfile::tempdir().unwrap())];
    match rye_test_artifacts::servers::Postgres::shared() {
        Ok(cluster) => places.push(Place::Postgres(cluster.database())),
        Err(missing) => rye_test_artifacts::skip(&format!("{test} on PostgreSQL"), &missing),
    }
    places
}

#[tokio::test]
async fn a_nonce_is_refused_within_its_window_even_after_a_restart() {
    for place in places("nonces") {
        nonces(&place).await;
    }
}

async fn nonces(place: &Place) {
    let db = place.open().await;
    assert!(db.fresh_nonce("fp1:n1", 1000, 360).await.unwrap());
    assert!(!db.fresh_nonce("fp1:n1", 1001, 360).await.unwrap());
    assert!(db.fresh_nonce("fp2:n1", 1001, 360).await.unwrap());
    drop(db);
    let reopened = place.open().await;
    assert!(
        !reopened.fresh_nonce("fp1:n1", 1300, 360).await.unwrap(),
        "replayed after a restart"
    );
    // Past its window the key is let go (its timestamp is long refused).
    assert!(reopened.fresh_nonce("fp1:n1", 1361, 360).await.unwrap());
}

#[tokio::test]
async fn held_objects_are_answered_in_one_query_per_principal() {
    for place in places("holdings") {
        holdings(place.open().await).await;
    }
}

async fn holdings(db: Db) {
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
    for place in places("heads") {
        heads(place.open().await).await;
    }
}

async fn heads(db: Db) {
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
    for place in places("racing heads") {
        racing_heads(place.open().await).await;
    }
}

async fn racing_heads(db: Db) {
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
    for place in places("user spaces") {
        user_spaces(place.open().await).await;
    }
}

async fn user_spaces(db: Db) {
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

#[tokio::test]
async fn a_run_is_interrupted_when_its_lease_runs_out_or_its_replica_starts_again() {
    for place in places("leases") {
        leases(place.open().await).await;
    }
}

async fn leases(db: Db) {
    let run = |id: &str| ThreadRow {
        thread_id: id.into(),
        project_path: "/p".into(),
        item_id: "tool:t".into(),
        status: "running".into(),
        created_at: 1,
        finished_at: None,
        record: serde_json::json!({"status": "running"}),
    };
    let status = |db: Db, id: &'static str| async move {
        db.thread("alice", id).await.unwrap().unwrap().status
    };
    db.start_thread("alice", &run("a1"), "replica-a", 100)
        .await
        .unwrap();
    db.start_thread("alice", &run("a2"), "replica-a", 100)
        .await
        .unwrap();
    db.start_thread("alice", &run("b1"), "replica-b", 100)
        .await
        .unwrap();
    db.finish_thread("a2", "completed", &serde_json::json!({}), 5)
        .await
        .unwrap();

    // Within their leases another replica's sweep leaves them be.
    assert_eq!(db.interrupt_running(50, None).await.unwrap(), 0);
    // Replica a renews; b does not.
    assert_eq!(db.renew_leases("replica-a", 200).await.unwrap(), 1);
    assert_eq!(db.interrupt_running(150, None).await.unwrap(), 1);
    assert_eq!(status(db.clone(), "b1").await, "interrupted");
    assert_eq!(status(db.clone(), "a1").await, "running");
    assert_eq!(
        status(db.clone(), "a2").await,
        "completed",
        "a finished run is never interrupted"
    );
    // A renewal does not bring an interrupted run back.
    assert_eq!(db.renew_leases("replica-b", 300).await.unwrap(), 0);
    // Replica a starting again: its runs died with its earlier process,
    // lease or no lease.
    db.start_thread("alice", &run("c1"), "replica-c", 1_000)
        .await
        .unwrap();
    assert_eq!(
        db.interrupt_running(160, Some("replica-a")).await.unwrap(),
        1
    );
    assert_eq!(status(db.clone(), "a1").await, "interrupted");
    assert_eq!(status(db.clone(), "c1").await, "running");
}

#[tokio::test]
async fn what_is_missing_is_answered_in_one_query_and_holding_in_bulk_keeps_the_first() {
    for place in places("missing") {
        missing(place.open().await).await;
    }
}

async fn missing(db: Db) {
    let held = |i: usize| Held {
        hash: format!("{i:064x}"),
        kind: if i.is_multiple_of(2) {
            "blob"
        } else {
            "object"
        },
        size: i as u64,
        object_kind: (i % 2 == 1).then(|| "item_source".to_owned()),
        content_blob: (i % 2 == 1).then(|| format!("{:064x}", i + 1)),
    };
    // More than one statement's worth, some twice.
    let many: Vec<Held> = (0..12_000).map(held).collect();
    db.hold("alice", &many, 1).await.unwrap();
    db.hold("alice", &many[11_000..], 2).await.unwrap();
    let asked: Vec<String> = (11_990..12_010).map(|i| format!("{i:064x}")).collect();
    let lacking = db.missing("alice", &asked).await.unwrap();
    let want: HashSet<String> = (12_000..12_010).map(|i| format!("{i:064x}")).collect();
    assert_eq!(lacking, want);
    assert_eq!(
        db.missing("bob", &asked[..3]).await.unwrap().len(),
        3,
        "alice's objects are not bob's"
    );
    assert!(db.missing("alice", &[]).await.unwrap().is_empty());
    // What no hash held can be is missing as asked.
    let odd = vec![
        "zz".to_owned(),
        format!("{:064x}", 11_999).to_uppercase(),
        format!("{:063x}", 5),
    ];
    let lacking = db.missing("alice", &odd).await.unwrap();
    assert_eq!(lacking, odd.iter().cloned().collect::<HashSet<_>>());
    let known = db
        .holdings("alice", &[format!("{:064x}", 11_999)])
        .await
        .unwrap();
    let one = &known[&format!("{:064x}", 11_999)];
    assert_eq!(one.kind, "object");
    assert_eq!(one.object_kind.as_deref(), Some("item_source"));
    assert_eq!(one.content_blob, Some(format!("{:064x}", 12_000)));
    assert_eq!(
        db.stored_bytes("alice").await.unwrap(),
        (0..12_000u64).sum::<u64>(),
        "an object held twice is counted once"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bytes_are_claimed_for_deletion_only_when_nobody_holds_or_stages_them_and_a_writer_waits() {
    for place in places("collection") {
        collection(place.open().await).await;
    }
}

async fn collection(db: Db) {
    use gc::Swept;
    let h = |i: usize| format!("{i:064x}");
    let blob = |i: usize| Held {
        hash: h(i),
        kind: "blob",
        size: 10,
        object_kind: None,
        content_blob: None,
    };
    db.hold("alice", &[blob(1), blob(2), blob(3)], 100)
        .await
        .unwrap();
    db.hold("bob", &[blob(3)], 100).await.unwrap();
    let roots = db.roots("alice").await.unwrap();
    assert_eq!(roots.epoch, 0);
    let all: Vec<(String, String)> = (1..=3).map(|i| (h(i), "blob".to_owned())).collect();
    // A write of 2 held it anew after the marks were made: its row
    // stays, and is not doomed.
    db.hold("alice", &[blob(2)], 150).await.unwrap();
    assert_eq!(
        db.sweep("alice", &roots, &all, 120, 200).await.unwrap(),
        Swept::Done { rows: 2, doomed: 1 },
        "2 was held anew, the third is still bob's"
    );
    assert_eq!(db.stored_bytes("alice").await.unwrap(), 10);
    let roots = db.roots("alice").await.unwrap();
    assert_eq!(
        db.sweep("alice", &roots, &all[1..2], 200, 200)
            .await
            .unwrap(),
        Swept::Done { rows: 1, doomed: 1 }
    );
    assert_eq!(db.stored_bytes("alice").await.unwrap(), 0);
    assert_eq!(db.doomed_count().await.unwrap(), 2);

    // The sweep moved alice's fence: a head checked before it does not
    // move; checked after, it does.
    assert_eq!(
        db.advance_head_fenced("alice", "/p", None, "s1", 201, 0)
            .await
            .unwrap(),
        None
    );
    let epoch = db.fence("alice").await.unwrap();
    assert_eq!(epoch, 2);
    assert_eq!(
        db.advance_head_fenced("alice", "/p", None, "s1", 201, epoch)
            .await
            .unwrap(),
        Some(Ok(()))
    );
    assert_eq!(
        db.push_user_space_fenced("alice", None, "u1", 201, 0)
            .await
            .unwrap(),
        None
    );
    // Marks made before the head moved sweep nothing.
    let stale = Roots {
        epoch,
        ..Roots::default()
    };
    db.hold("alice", &[blob(4)], 100).await.unwrap();
    assert_eq!(
        db.sweep("alice", &stale, &[(h(4), "blob".into())], 202, 202)
            .await
            .unwrap(),
        Swept::Moved
    );
    assert_eq!(db.stored_bytes("alice").await.unwrap(), 10);

    // Doomed at 200: not yet for a cutoff before it.
    assert!(db.claim_doomed(199, 300, 10).await.unwrap().is_empty());
    // A writer stages 2 before writing it: doomed no longer, not claimed.
    db.stage(&[h(2)], 300, 400).await.unwrap();
    let claimed = db.claim_doomed(250, 300, 10).await.unwrap();
    assert_eq!(
        claimed,
        [Claimed {
            hash: h(1),
            kind: "blob".into()
        }]
    );
    // Claimed by another replica meanwhile: nothing more to claim.
    assert!(db.claim_doomed(250, 301, 10).await.unwrap().is_empty());
    // A writer of 1 waits until its deletion is done.
    let writer = {
        let db = db.clone();
        let one = h(1);
        tokio::spawn(async move { db.stage(&[one], 302, 500).await })
    };
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert!(!writer.is_finished(), "the writer waits for the deletion");
    db.deleted(&[h(1)]).await.unwrap();
    tokio::time::timeout(std::time::Duration::from_secs(5), writer)
        .await
        .expect("the writer goes on once the bytes are gone")
        .unwrap()
        .unwrap();
    assert_eq!(db.doomed_count().await.unwrap(), 0);

    // A claim left by a replica that died is claimed again later, unless
    // the hash was staged meanwhile (5 is held and let go again here).
    db.hold("carol", &[blob(5), blob(6)], 100).await.unwrap();
    let carol = db.roots("carol").await.unwrap();
    let both = vec![(h(5), "blob".to_owned()), (h(6), "blob".to_owned())];
    assert!(matches!(
        db.sweep("carol", &carol, &both, 1_000, 1_000)
            .await
            .unwrap(),
        Swept::Done { rows: 2, doomed: 2 }
    ));
    assert_eq!(db.claim_doomed(1_000, 1_001, 10).await.unwrap().len(), 2);
    // (Staged once the claim is abandoned: a writer does not wait on it.)
    db.stage(&[h(5)], 1_002 + gc::ABANDONED_AFTER, 5_000)
        .await
        .unwrap();
    let again = db
        .claim_doomed(1_000, 1_002 + gc::ABANDONED_AFTER, 10)
        .await
        .unwrap();
    assert_eq!(
        again,
        [Claimed {
            hash: h(6),
            kind: "blob".into()
        }],
        "5 is staged, 6 abandoned"
    );
}

#[tokio::test]
async fn queued_jobs_are_claimed_once_each_and_a_dead_replicas_go_back_or_are_interrupted() {
    for place in places("jobs") {
        jobs(&place).await;
    }
}

async fn jobs(place: &Place) {
    let db = place.open().await;
    let row = |id: &str, at: i64| ThreadRow {
        thread_id: id.into(),
        project_path: "/p".into(),
        item_id: "tool:t".into(),
        status: "queued".into(),
        created_at: at,
        finished_at: None,
        record: serde_json::json!({}),
    };
    let request = |n: i64| serde_json::json!({"n": n});
    let status = |id: &'static str| {
        let db = db.clone();
        async move {
            let alice = db.thread("alice", id).await.unwrap();
            let bob = db.thread("bob", id).await.unwrap();
            alice.or(bob).map(|t| t.status)
        }
    };

    // At most three wait; a fourth is not half queued.
    assert!(
        db.enqueue("alice", &row("once", 1), &request(1), 1, 3)
            .await
            .unwrap()
    );
    assert!(
        db.enqueue("alice", &row("twice", 2), &request(2), 2, 3)
            .await
            .unwrap()
    );
    assert!(
        db.enqueue("bob", &row("later", 3), &request(3), 1, 3)
            .await
            .unwrap()
    );
    assert!(
        !db.enqueue("bob", &row("over", 4), &request(4), 1, 3)
            .await
            .unwrap()
    );
    assert_eq!(status("over").await, None);
    assert_eq!(db.queued().await.unwrap(), 3);

    // Oldest first, each once.
    let first = db.claim("replica-a", 100).await.unwrap().unwrap();
    assert_eq!(
        (
            first.thread_id.as_str(),
            first.principal.as_str(),
            first.attempts,
            first.max_attempts
        ),
        ("once", "alice", 1, 1)
    );
    assert_eq!(first.request, request(1));
    assert_eq!(
        db.claim("replica-a", 100).await.unwrap().unwrap().thread_id,
        "twice"
    );
    assert_eq!(status("twice").await.as_deref(), Some("running"));
    assert_eq!(
        db.claim("replica-b", 100).await.unwrap().unwrap().thread_id,
        "later"
    );
    assert!(db.claim("replica-b", 100).await.unwrap().is_none());
    assert_eq!(db.queued().await.unwrap(), 0);

    // b ends its job; a dies holding two: the one with an attempt left
    // goes back to the queue, the other is interrupted.
    db.finish_thread("later", "completed", &serde_json::json!({}), 50)
        .await
        .unwrap();
    assert_eq!(db.requeue_orphans(90, None).await.unwrap(), 0, "leased");
    assert_eq!(db.interrupt_running(90, None).await.unwrap(), 0, "leased");
    assert_eq!(db.interrupt_running(150, None).await.unwrap(), 1);
    assert_eq!(status("once").await.as_deref(), Some("interrupted"));
    assert_eq!(
        status("twice").await.as_deref(),
        Some("running"),
        "a job with an attempt left is never interrupted"
    );
    assert_eq!(db.requeue_orphans(150, None).await.unwrap(), 1);
    assert_eq!(status("twice").await.as_deref(), Some("queued"));
    assert_eq!(status("later").await.as_deref(), Some("completed"));
    let again = db.claim("replica-b", 300).await.unwrap().unwrap();
    assert_eq!((again.thread_id.as_str(), again.attempts), ("twice", 2));
    // Out of attempts, dying again marks it.
    assert_eq!(db.requeue_orphans(400, None).await.unwrap(), 0);
    assert_eq!(db.interrupt_running(400, None).await.unwrap(), 1);
    assert_eq!(status("twice").await.as_deref(), Some("interrupted"));

    // A replica starting again under its name: what it held goes back
    // at once, lease or no lease.
    assert!(
        db.enqueue("alice", &row("held", 5), &request(5), 3, 3)
            .await
            .unwrap()
    );
    assert_eq!(
        db.claim("replica-c", 10_000)
            .await
            .unwrap()
            .unwrap()
            .thread_id,
        "held"
    );
    assert_eq!(db.requeue_orphans(500, Some("replica-d")).await.unwrap(), 0);
    assert_eq!(db.requeue_orphans(500, Some("replica-c")).await.unwrap(), 1);
    let held = db.claim("replica-c", 10_000).await.unwrap().unwrap();
    assert_eq!(held.attempts, 2);
    db.finish_thread("held", "completed", &serde_json::json!({}), 600)
        .await
        .unwrap();

    // Sixteen claimers on two connections to the database, 60 jobs:
    // each claimed exactly once.
    for i in 0..60 {
        let id = format!("many-{i:02}");
        assert!(
            db.enqueue("bob", &row(&id, 1_000 + i), &request(i), 1, 100)
                .await
                .unwrap()
        );
    }
    let other = place.open().await;
    let mut claimers = Vec::new();
    for c in 0..16 {
        let db = if c % 2 == 0 {
            db.clone()
        } else {
            other.clone()
        };
        claimers.push(tokio::spawn(async move {
            let mut got = Vec::new();
            while let Some(job) = db.claim(&format!("r{c}"), 10_000).await.unwrap() {
                got.push(job.thread_id);
            }
            got
        }));
    }
    let mut claimed = Vec::new();
    for claimer in claimers {
        claimed.extend(claimer.await.unwrap());
    }
    claimed.sort();
    let want: Vec<String> = (0..60).map(|i| format!("many-{i:02}")).collect();
    assert_eq!(claimed, want);
}

#[tokio::test]
async fn what_a_run_writes_is_named_in_its_record_while_under_way_only() {
    for place in places("run objects") {
        run_objects(&place).await;
    }
}

async fn run_objects(place: &Place) {
    let db = place.open().await;
    let row = ThreadRow {
        thread_id: "r1".into(),
        project_path: "/p".into(),
        item_id: "tool:t".into(),
        status: "running".into(),
        created_at: 10,
        finished_at: None,
        record: serde_json::json!({"snapshot_hash": "s0"}),
    };
    db.start_thread("alice", &row, "replica-a", 100)
        .await
        .unwrap();
    db.note_run_objects("r1", &["aa", "bb"]).await.unwrap();
    db.note_run_objects("r1", &["bb", "cc"]).await.unwrap();
    let records = db.thread_records("alice", 1_000).await.unwrap();
    assert_eq!(records.len(), 1);
    assert_eq!(
        records[0],
        serde_json::json!({"snapshot_hash": "s0", "new_object_hashes": ["aa", "bb", "cc"]})
    );
    // Once ended, its record is what the end wrote.
    db.finish_thread("r1", "completed", &serde_json::json!({"done": true}), 20)
        .await
        .unwrap();
    db.note_run_objects("r1", &["dd"]).await.unwrap();
    let ended = db.thread("alice", "r1").await.unwrap().unwrap();
    assert_eq!(ended.record, serde_json::json!({"done": true}));
}
