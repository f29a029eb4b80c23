//! The node's service over real HTTP on loopback, with its real database
//! and object store: signed requests refused when forged, stale, replayed
//! (also after a restart) or out of scope; objects stored only when their
//! bytes match; heads moved only from where they are, by one of twenty
//! clients racing; and a client that finds the node's key changed.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use rye_integrity::Keypair;
use rye_node::client::{Client, ClientError, Remote};
use rye_node::run::Runner;
use rye_node::{Node, Settings};
use rye_sync::auth;
use serde_json::{Value, json};

/// Where a node keeps its facts and bytes: a SQLite file and local files
/// in its base folder, or a PostgreSQL database and an S3 bucket of the
/// test servers.
#[derive(Clone)]
enum Stores {
    Local,
    Shared { database: String, bucket: String },
}

/// Every pair of stores a test runs on: local, and PostgreSQL + S3 where
/// both servers are installed (under CI they must be).
fn all_stores(test: &str) -> Vec<Stores> {
    use rye_test_artifacts::servers::{Postgres, S3};
    let mut all = vec![Stores::Local];
    match (Postgres::shared(), S3::shared()) {
        (Ok(cluster), Ok(s3)) => all.push(Stores::Shared {
            database: cluster.database(),
            bucket: s3.bucket(),
        }),
        (Err(missing), _) | (_, Err(missing)) => {
            rye_test_artifacts::skip(&format!("{test} on PostgreSQL and S3"), &missing)
        }
    }
    all
}

impl Stores {
    fn settings(&self, base: &Path, runner: Runner) -> Settings {
        let mut settings = Settings::new(base.to_owned(), runner);
        if let Stores::Shared { database, bucket } = self {
            settings.database = Some(database.clone());
            settings.objects = Some(format!("s3://{bucket}"));
            settings.object_options = rye_test_artifacts::servers::S3::shared()
                .expect("started before")
                .options();
        }
        settings
    }

    /// The same stores for another test: a new database and bucket.
    fn fresh(&self) -> Stores {
        match self {
            Stores::Local => Stores::Local,
            Stores::Shared { .. } => Stores::Shared {
                database: rye_test_artifacts::servers::Postgres::shared()
                    .expect("started before")
                    .database(),
                bucket: rye_test_artifacts::servers::S3::shared()
                    .expect("started before")
                    .bucket(),
            },
        }
    }
}

struct Served {
    node: Arc<Node>,
    url: String,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl Served {
    /// A new key, authorized here as `label` with `scopes`.
    async fn key(&self, label: &str, scopes: &[&str]) -> Keypair {
        let key = Keypair::generate().unwrap();
        let scopes: Vec<String> = scopes.iter().map(|s| (*s).to_owned()).collect();
        self.node
            .authorize(key.public(), label, &scopes)
            .await
            .unwrap();
        key
    }
}

async fn serve(base: &Path, stores: &Stores) -> Served {
    serve_holding(base, stores, 1 << 20).await
}

/// A node at `base` letting each key store `quota` bytes.
async fn serve_holding(base: &Path, stores: &Stores, quota: u64) -> Served {
    let runner = Runner {
        program: "/nonexistent/rye".into(),
        env: Vec::new(),
        timeout: Duration::from_secs(5),
        keep_hosts: rye_node::run::WORKER_IDLE,
    };
    let mut settings = stores.settings(base, runner);
    settings.max_user_storage_bytes = quota;
    settings.max_request_bytes = 2 << 20;
    serve_with(settings).await
}

async fn serve_with(settings: Settings) -> Served {
    let node = Node::open(settings).await.unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let task = tokio::spawn(rye_node::serve(Arc::clone(&node), listener));
    Served { node, url, task }
}

fn nonce() -> String {
    format!(
        "{:032x}",
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    )
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// A hand-signed request to the node at `url` whose fingerprint is `node`:
/// the method, path and body, signed by `key` at `at` with `nonce`; the
/// status and body.
async fn raw(
    (url, node): (&str, &str),
    key: &Keypair,
    method: &str,
    path: &str,
    body: &Value,
    at: u64,
    nonce: &str,
) -> (u16, Value) {
    let bytes = if method == "GET" {
        Vec::new()
    } else {
        body.to_string().into_bytes()
    };
    let (path_only, query) = match path.split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (path, None),
    };
    let request = auth::Request {
        method,
        path: path_only,
        query,
        body: &bytes,
    };
    let _ = rustls::crypto::ring::default_provider().install_default();
    let http = reqwest::Client::new();
    let mut builder = http.request(
        reqwest::Method::from_bytes(method.as_bytes()).unwrap(),
        format!("{url}{path}"),
    );
    for (name, value) in auth::sign(key, &request, node, at, nonce) {
        builder = builder.header(name, value);
    }
    if method != "GET" {
        builder = builder.body(bytes);
    }
    let response = builder.send().await.unwrap();
    let status = response.status().as_u16();
    let text = response.text().await.unwrap();
    (
        status,
        serde_json::from_str(&text).unwrap_or(json!({"raw": text})),
    )
}

/// A request signed now with a new nonce.
async fn fresh(
    to: (&str, &str),
    key: &Keypair,
    method: &str,
    path: &str,
    body: &Value,
) -> (u16, Value) {
    raw(to, key, method, path, body, now(), &nonce()).await
}

fn remote(url: &str) -> Remote {
    Remote {
        name: "test".into(),
        url: url.to_owned(),
        node_id: None,
        // A loaded machine storing thousands of objects in the S3 server
        // takes its time over one request.
        timeout: Duration::from_secs(120),
        key_env: None,
    }
}

/// A project folder with `n` knowledge items.
fn project(dir: &Path, n: usize, tag: &str) {
    let folder = dir.join(".ai/knowledge/notes");
    std::fs::create_dir_all(&folder).unwrap();
    for i in 0..n {
        std::fs::write(
            folder.join(format!("n{i}.md")),
            format!("# note {i} {tag}\n"),
        )
        .unwrap();
    }
}

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

fn keypair_copy(key: &Keypair) -> Keypair {
    Keypair::from_private_pem(&key.private_pem().unwrap()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signed_request_is_refused_when_forged_stale_replayed_or_out_of_scope() {
    for stores in
        all_stores("a signed request is refused when forged stale replayed or out of scope")
    {
        a_signed_request_is_refused_when_forged_stale_replayed_or_out_of_scope_on(stores).await;
    }
}

async fn a_signed_request_is_refused_when_forged_stale_replayed_or_out_of_scope_on(stores: Stores) {
    let dir = tempfile::tempdir().unwrap();
    let served = serve(&dir.path().join("node"), &stores).await;
    let fp = served.node.fingerprint().to_owned();
    let alice = served.key("alice", &["*"]).await;
    let reader = served.key("reader", &["node.read"]).await;
    let body = json!({"hashes": []});

    let n = nonce();
    let (status, _) = raw(
        (&served.url, &fp),
        &alice,
        "POST",
        "/objects/has",
        &body,
        now(),
        &n,
    )
    .await;
    assert_eq!(status, 200);
    // The same request again: its nonce is spent.
    let (status, answer) = raw(
        (&served.url, &fp),
        &alice,
        "POST",
        "/objects/has",
        &body,
        now(),
        &n,
    )
    .await;
    assert_eq!(status, 401, "{answer}");
    assert!(
        answer["error"].as_str().unwrap().contains("seen before"),
        "{answer}"
    );

    // A key the node never authorized.
    let mallory = Keypair::generate().unwrap();
    let (status, answer) = fresh((&served.url, &fp), &mallory, "POST", "/objects/has", &body).await;
    assert_eq!(status, 401);
    assert!(
        answer["error"].as_str().unwrap().contains("not authorized"),
        "{answer}"
    );

    // Alice's key id with mallory's signature.
    let bytes = body.to_string().into_bytes();
    let request = auth::Request {
        method: "POST",
        path: "/objects/has",
        query: None,
        body: &bytes,
    };
    let mut headers = auth::sign(&mallory, &request, &fp, now(), &nonce());
    headers[0].1 = format!("fp:{}", alice.fingerprint());
    let mut builder = reqwest::Client::new()
        .post(format!("{}/objects/has", served.url))
        .body(bytes.clone());
    for (name, value) in &headers {
        builder = builder.header(*name, value);
    }
    let forged = builder.send().await.unwrap();
    assert_eq!(forged.status().as_u16(), 401);
    assert!(forged.text().await.unwrap().contains("does not verify"));

    // Signed for another node (audience), and a body changed after signing.
    let (status, _) = fresh(
        (&served.url, "0123456789abcdef"),
        &alice,
        "POST",
        "/objects/has",
        &body,
    )
    .await;
    assert_eq!(status, 401, "another node's audience");

    // 301 seconds old, and well ahead (a request slow to arrive on a busy
    // machine comes closer to the node's clock).
    for at in [now() - 301, now() + 400] {
        let (status, answer) = raw(
            (&served.url, &fp),
            &alice,
            "POST",
            "/objects/has",
            &body,
            at,
            &nonce(),
        )
        .await;
        assert_eq!(status, 401);
        assert!(
            answer["error"].as_str().unwrap().contains("more than 300"),
            "{answer}"
        );
    }
    // No signature at all.
    let plain = reqwest::Client::new()
        .post(format!("{}/objects/has", served.url))
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(plain.status().as_u16(), 401);

    // A key allowed only to read may not push.
    let (status, answer) = fresh((&served.url, &fp), &reader, "POST", "/objects/has", &body).await;
    assert_eq!(status, 403, "{answer}");
    let (status, _) = fresh(
        (&served.url, &fp),
        &reader,
        "GET",
        "/threads?limit=5",
        &Value::Null,
    )
    .await;
    assert_eq!(status, 200);

    // The node restarts on the same stores: the spent nonce stays spent.
    served.task.abort();
    drop(served);
    let again = serve(&dir.path().join("node"), &stores).await;
    assert_eq!(again.node.fingerprint(), fp, "the node keeps its key");
    let (status, answer) = raw(
        (&again.url, &fp),
        &alice,
        "POST",
        "/objects/has",
        &body,
        now(),
        &n,
    )
    .await;
    assert_eq!(status, 401, "replayed after a restart: {answer}");
    let (status, _) = fresh((&again.url, &fp), &alice, "POST", "/objects/has", &body).await;
    assert_eq!(status, 200);

    // What the restarted node answered, counted.
    let text = reqwest::get(format!("{}/metrics", again.url))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for line in [
        "rye_node_requests_total{route=\"/objects/has\",status=\"401\"} 1\n",
        "rye_node_requests_total{route=\"/objects/has\",status=\"200\"} 1\n",
        "rye_node_request_seconds_count{route=\"/objects/has\"} 2\n",
        "rye_node_runs_active 0\n",
    ] {
        assert!(text.contains(line), "{line} not in:\n{text}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_objects_are_not_stored_and_a_manifest_with_a_hole_moves_no_head() {
    for stores in all_stores("bad objects are not stored and a manifest with a hole moves no head")
    {
        bad_objects_are_not_stored_and_a_manifest_with_a_hole_moves_no_head_on(stores).await;
    }
}

async fn bad_objects_are_not_stored_and_a_manifest_with_a_hole_moves_no_head_on(stores: Stores) {
    let dir = tempfile::tempdir().unwrap();
    let served = serve(&dir.path().join("node"), &stores).await;
    let fp = served.node.fingerprint().to_owned();
    let alice = served.key("alice", &["*"]).await;
    let good = b"good bytes\n";
    let good_hash = rye_cas::ContentHash::of(good).hex();
    let bad_put = json!({"entries": [
        {"hash": good_hash, "kind": "blob", "data": b64(good)},
        {"hash": good_hash, "kind": "blob", "data": b64(b"other bytes")},
    ]});
    let (status, answer) =
        fresh((&served.url, &fp), &alice, "POST", "/objects/put", &bad_put).await;
    assert_eq!(status, 400, "{answer}");
    assert_eq!(answer["stored"], json!([]));
    let (_, has) = fresh(
        (&served.url, &fp),
        &alice,
        "POST",
        "/objects/has",
        &json!({"hashes": [good_hash]}),
    )
    .await;
    assert_eq!(has["missing"], json!([good_hash]), "nothing was stored");

    // A manifest naming an item_source that was never sent.
    let absent = rye_cas::ContentHash::of(b"never sent").hex();
    let mut fields = serde_json::Map::new();
    fields.insert("space".into(), json!("project"));
    fields.insert("items".into(), json!({".ai/knowledge/a.md": absent}));
    fields.insert("files".into(), json!({}));
    let manifest = rye_cas::object("source_manifest", fields);
    let bytes = rye_cas::canonical::to_vec(&manifest);
    let manifest_hash = rye_cas::ContentHash::of(&bytes).hex();
    let (status, answer) = fresh(
        (&served.url, &fp),
        &alice,
        "POST",
        "/objects/put",
        &json!({"entries": [{"hash": manifest_hash, "kind": "object", "data": b64(&bytes)}]}),
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    let push = json!({"project_path": "p", "project_manifest_hash": manifest_hash,
                      "system_version": env!("CARGO_PKG_VERSION"), "expected_snapshot_hash": null});
    let (status, answer) = fresh((&served.url, &fp), &alice, "POST", "/push", &push).await;
    assert_eq!(status, 400, "{answer}");
    assert_eq!(answer["missing"], json!([absent]));
    assert_eq!(
        served
            .node
            .db()
            .head(alice.fingerprint(), "p")
            .await
            .unwrap(),
        None
    );

    // A manifest sent as a delta: from a base this key does not hold, and
    // one whose result is not the hash it claims.
    for (base, claimed, needle) in [
        (
            absent.as_str(),
            manifest_hash.as_str(),
            "no manifest this key holds",
        ),
        (manifest_hash.as_str(), manifest_hash.as_str(), "hashes to"),
    ] {
        let delta = json!({"entries": [{"hash": claimed, "kind": "object",
            "delta": {"base": base, "items": {".ai/knowledge/b.md": absent}}}]});
        let (status, answer) =
            fresh((&served.url, &fp), &alice, "POST", "/objects/put", &delta).await;
        assert_eq!(status, 400, "{answer}");
        assert!(answer.to_string().contains(needle), "{needle}: {answer}");
    }

    // Another principal's objects are not this one's: bob cannot push a
    // manifest alice stored, nor read it.
    let bob = served.key("bob", &["*"]).await;
    let (status, answer) = fresh((&served.url, &fp), &bob, "POST", "/push", &push).await;
    assert_eq!(status, 400, "{answer}");
    let (_, got) = fresh(
        (&served.url, &fp),
        &bob,
        "POST",
        "/objects/get",
        &json!({"hashes": [manifest_hash]}),
    )
    .await;
    assert_eq!(
        got["entries"],
        json!([]),
        "bob reads none of alice's objects"
    );

    // A version whose major.minor differs, and a project path that is no
    // path.
    let mut old = push.clone();
    old["system_version"] = json!("0.0.9");
    let (status, _) = fresh((&served.url, &fp), &alice, "POST", "/push", &old).await;
    assert_eq!(status, 409);
    let mut weird = push;
    weird["project_path"] = json!("a\u{0}b");
    let (status, _) = fresh((&served.url, &fp), &alice, "POST", "/push", &weird).await;
    assert_eq!(status, 400);
    // Malformed bodies.
    for body in [
        json!([1, 2]),
        json!({"hashes": ["zz"]}),
        json!({"hashes": "x"}),
    ] {
        let (status, _) = fresh((&served.url, &fp), &alice, "POST", "/objects/has", &body).await;
        assert_eq!(status, 400, "{body}");
    }
    // Over the storage quota (1 MiB here): 507, nothing stored.
    let big = vec![7u8; 1 << 20];
    let big_hash = rye_cas::ContentHash::of(&big).hex();
    let (status, _) = fresh(
        (&served.url, &fp),
        &alice,
        "POST",
        "/objects/put",
        &json!({"entries": [{"hash": big_hash, "kind": "blob", "data": b64(&big)}]}),
    )
    .await;
    assert_eq!(status, 507);
    // A body over the request limit (2 MiB here): 413 before anything is
    // read into memory or stored.
    let huge = vec![9u8; 2 << 20];
    let huge_hash = rye_cas::ContentHash::of(&huge).hex();
    let (status, _) = fresh(
        (&served.url, &fp),
        &alice,
        "POST",
        "/objects/put",
        &json!({"entries": [{"hash": huge_hash, "kind": "blob", "data": b64(&huge)}]}),
    )
    .await;
    assert_eq!(status, 413);
    for hash in [&big_hash, &huge_hash] {
        let (status, answer) = fresh(
            (&served.url, &fp),
            &alice,
            "POST",
            "/objects/has",
            &json!({"hashes": [hash]}),
        )
        .await;
        assert_eq!(status, 200);
        assert_eq!(answer["missing"], json!([hash]), "{answer}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn of_twenty_clients_pushing_one_project_each_lands_or_is_told_where_the_head_is() {
    for stores in
        all_stores("of twenty clients pushing one project each lands or is told where the head is")
    {
        of_twenty_clients_pushing_one_project_each_lands_or_is_told_where_the_head_is_on(stores)
            .await;
    }
}

async fn of_twenty_clients_pushing_one_project_each_lands_or_is_told_where_the_head_is_on(
    stores: Stores,
) {
    let dir = tempfile::tempdir().unwrap();
    let served = serve(&dir.path().join("node"), &stores).await;
    let alice = served.key("alice", &["*"]).await;
    let pins = dir.path().join("known_nodes.json");
    let first = dir.path().join("first");
    project(&first, 3, "base");
    let client = Client::connect(&remote(&served.url), keypair_copy(&alice), &pins)
        .await
        .unwrap();
    let base = client.push(&first, None, &[], "shared").await.unwrap();
    // Pushed again unchanged: one request, no new snapshot.
    let before = client.requests.load(std::sync::atomic::Ordering::Relaxed);
    let again = client.push(&first, None, &[], "shared").await.unwrap();
    assert!(again.unchanged);
    assert_eq!(again.snapshot, base.snapshot);
    assert_eq!(
        client.requests.load(std::sync::atomic::Ordering::Relaxed) - before,
        1
    );

    // One note changed: sent without asking, the manifest as a delta.
    std::fs::write(first.join(".ai/knowledge/notes/n1.md"), "# changed\n").unwrap();
    let before = client.requests.load(std::sync::atomic::Ordering::Relaxed);
    let changed = client.push(&first, None, &[], "shared").await.unwrap();
    assert_eq!((changed.asked, changed.sent), (0, 3), "{changed:?}");
    assert_eq!(
        client.requests.load(std::sync::atomic::Ordering::Relaxed) - before,
        2,
        "a put and a push"
    );
    let base = changed;

    let mut racers = Vec::new();
    for i in 0..20 {
        let folder = dir.path().join(format!("c{i}"));
        project(&folder, 3, "base");
        // Each starts from the pushed head, then changes one note.
        let refs = folder.join(".ai/objects/refs/remotes");
        std::fs::create_dir_all(&refs).unwrap();
        std::fs::copy(
            first.join(".ai/objects/refs/remotes/test.json"),
            refs.join("test.json"),
        )
        .unwrap();
        std::fs::write(
            folder.join(".ai/knowledge/notes/n0.md"),
            format!("# by {i}\n"),
        )
        .unwrap();
        let url = served.url.clone();
        let key = keypair_copy(&alice);
        let pins = pins.clone();
        racers.push(tokio::spawn(async move {
            let client = Client::connect(&remote(&url), key, &pins).await.unwrap();
            client.push(&folder, None, &[], "shared").await
        }));
    }
    let mut landed = Vec::new();
    for racer in racers {
        match racer.await.unwrap() {
            Ok(pushed) => landed.push(pushed.snapshot),
            Err(ClientError::Node { status: 409, body }) => {
                assert_eq!(body["expected"], json!(base.snapshot), "{body}");
                assert!(body["actual"].is_string(), "{body}");
            }
            Err(e) => panic!("neither landed nor 409: {e}"),
        }
    }
    assert_eq!(
        landed.len(),
        1,
        "one push moves the head from where all began"
    );
    let head = served
        .node
        .db()
        .head(alice.fingerprint(), "shared")
        .await
        .unwrap();
    assert_eq!(head.as_deref(), Some(landed[0].as_str()));
    let history = client
        .call(
            "GET",
            "/history",
            Some("project_path=shared&limit=10"),
            None,
        )
        .await
        .unwrap();
    let hashes: Vec<&str> = history["snapshots"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["_hash"].as_str().unwrap())
        .collect();
    assert_eq!(hashes[..2], [landed[0].as_str(), base.snapshot.as_str()]);
    assert_eq!(
        hashes.len(),
        3,
        "the first push, the change, the race's winner"
    );
}

/// A node at `base` serving on `addr`, authorizing `alice`.
async fn start(
    base: std::path::PathBuf,
    stores: &Stores,
    addr: std::net::SocketAddr,
    alice: &Keypair,
) -> tokio::task::JoinHandle<std::io::Result<()>> {
    let runner = Runner {
        program: "/nonexistent/rye".into(),
        env: Vec::new(),
        timeout: Duration::from_secs(5),
        keep_hosts: rye_node::run::WORKER_IDLE,
    };
    let node = Node::open(stores.settings(&base, runner)).await.unwrap();
    node.authorize(alice.public(), "alice", &["*".into()])
        .await
        .unwrap();
    let listener = tokio::net::TcpListener::bind(addr).await.unwrap();
    tokio::spawn(rye_node::serve(node, listener))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_whose_key_changed_is_refused_by_a_client_that_pinned_it() {
    for stores in all_stores("a node whose key changed is refused by a client that pinned it") {
        a_node_whose_key_changed_is_refused_by_a_client_that_pinned_it_on(stores).await;
    }
}

async fn a_node_whose_key_changed_is_refused_by_a_client_that_pinned_it_on(stores: Stores) {
    let dir = tempfile::tempdir().unwrap();
    let alice = Keypair::generate().unwrap();
    let pins = dir.path().join("known_nodes.json");
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    let url = format!("http://{addr}");
    let first = start(dir.path().join("one"), &stores, addr, &alice).await;
    let client = Client::connect(&remote(&url), keypair_copy(&alice), &pins)
        .await
        .unwrap();
    let pinned = client.node().to_owned();
    let folder = dir.path().join("p");
    project(&folder, 1, "x");
    client.push(&folder, None, &[], "p").await.unwrap();
    first.abort();
    tokio::time::sleep(Duration::from_millis(100)).await;
    // Another node (another key) at the same address.
    let _second = start(dir.path().join("two"), &stores.fresh(), addr, &alice).await;
    let err = client
        .call("GET", "/threads", None, None)
        .await
        .expect_err("a changed key is an error");
    match &err {
        ClientError::KeyChanged { pinned: p, .. } => assert_eq!(p, &pinned),
        other => panic!("not a key change: {other}"),
    }
    assert!(err.to_string().contains("remove its entry"), "{err}");
    // A new connection uses the pin, and fails the same way on first use.
    let again = Client::connect(&remote(&url), keypair_copy(&alice), &pins)
        .await
        .unwrap();
    assert!(matches!(
        again.push(&folder, None, &[], "p").await,
        Err(ClientError::KeyChanged { .. })
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_splits_its_requests_to_the_limits_the_node_advertises() {
    for stores in all_stores("a client splits its requests to the limits the node advertises") {
        a_client_splits_its_requests_to_the_limits_the_node_advertises_on(stores).await;
    }
}

async fn a_client_splits_its_requests_to_the_limits_the_node_advertises_on(stores: Stores) {
    let dir = tempfile::tempdir().unwrap();
    let served = serve_holding(&dir.path().join("node"), &stores, 64 << 20).await;
    let alice = served.key("alice", &["*"]).await;
    let folder = dir.path().join("p");
    // About 3 MB of notes against the node's 2 MiB per request.
    project(&folder, 1_200, &"x".repeat(2_000));
    let pins = dir.path().join("known_nodes.json");
    let client = Client::connect(&remote(&served.url), keypair_copy(&alice), &pins)
        .await
        .unwrap();
    let pushed = client.push(&folder, None, &[], "p").await.unwrap();
    assert_eq!(pushed.sent, 2_401, "{pushed:?}");
    let limits = client.known_limits().expect("asked of /status");
    assert_eq!(limits.max_request_bytes, 2 << 20);

    // Limits remembered from a node that has since been set smaller: the
    // first request too large is refused, the limits asked again, and the
    // same objects sent again split to them.
    let changed = dir.path().join("q");
    project(&changed, 1_200, &"y".repeat(2_000));
    let again = Client::connect(&remote(&served.url), keypair_copy(&alice), &pins)
        .await
        .unwrap();
    again.assume_limits(rye_node::client::Limits {
        max_request_bytes: 50 << 20,
        max_batch: 10_000,
    });
    let pushed = again.push(&changed, None, &[], "q").await.unwrap();
    assert_eq!(pushed.sent, 2_401, "{pushed:?}");
    assert_eq!(again.known_limits(), Some(limits));
    served.task.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_push_on_top_of_a_head_is_checked_for_what_the_head_does_not_name() {
    for stores in all_stores("a push on top of a head is checked for what the head does not name") {
        a_push_on_top_of_a_head_is_checked_for_what_the_head_does_not_name_on(stores).await;
    }
}

async fn a_push_on_top_of_a_head_is_checked_for_what_the_head_does_not_name_on(stores: Stores) {
    let dir = tempfile::tempdir().unwrap();
    let served = serve(&dir.path().join("node"), &stores).await;
    let alice = served.key("alice", &["*"]).await;
    let fp = served.node.fingerprint().to_owned();
    let folder = dir.path().join("p");
    project(&folder, 3, "x");
    let pins = dir.path().join("known_nodes.json");
    let client = Client::connect(&remote(&served.url), keypair_copy(&alice), &pins)
        .await
        .unwrap();
    let pushed = client.push(&folder, None, &[], "p").await.unwrap();
    // The head's manifest, one item added that was never sent.
    let local = rye_node::client::local_cas(&folder);
    let mut manifest = local
        .get_object(&pushed.project_manifest.parse().unwrap())
        .await
        .unwrap()
        .unwrap();
    let absent = rye_cas::ContentHash::of(b"never sent").hex();
    manifest["items"][".ai/knowledge/notes/extra.md"] = json!(absent);
    let bytes = rye_cas::canonical::to_vec(&manifest);
    let hash = rye_cas::ContentHash::of(&bytes).hex();
    let (status, answer) = fresh(
        (&served.url, &fp),
        &alice,
        "POST",
        "/objects/put",
        &json!({"entries": [{"hash": hash, "kind": "object", "data": b64(&bytes)}]}),
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    let push = json!({"project_path": "p", "project_manifest_hash": hash,
                      "system_version": env!("CARGO_PKG_VERSION"),
                      "expected_snapshot_hash": pushed.snapshot});
    let (status, answer) = fresh((&served.url, &fp), &alice, "POST", "/push", &push).await;
    assert_eq!(status, 400, "{answer}");
    assert_eq!(answer["missing"], json!([absent]));
    assert_eq!(
        served
            .node
            .db()
            .head(alice.fingerprint(), "p")
            .await
            .unwrap(),
        Some(pushed.snapshot.clone())
    );
    served.task.abort();
}

/// Two replicas of one node (`a` and `b`) on `stores`, each with a
/// folder of its own in `dir`, one key between them, set up further by
/// `adjust`; and a key authorized with every scope.
async fn two_replicas(
    dir: &Path,
    stores: &Stores,
    adjust: impl Fn(&str, &mut Settings),
) -> (Served, Served, Keypair) {
    let replica = |name: &str| {
        let runner = Runner {
            program: "/nonexistent/rye".into(),
            env: Vec::new(),
            timeout: Duration::from_secs(5),
            keep_hosts: rye_node::run::WORKER_IDLE,
        };
        let mut settings = stores.settings(&dir.join(name), runner);
        settings.signing_key_dir = Some(dir.join("key"));
        adjust(name, &mut settings);
        serve_with(settings)
    };
    let a = replica("a").await;
    let b = replica("b").await;
    let alice = Keypair::generate().unwrap();
    a.node
        .authorize(alice.public(), "alice", &["*".into()])
        .await
        .unwrap();
    (a, b, alice)
}

/// Two replicas of one node, each with a folder of its own, sharing one
/// PostgreSQL database, one bucket and one key: what one is told, the
/// other knows (heads, objects, authorized keys, nonces, webhook
/// deliveries), and clients
/// racing to push through both see exactly one push land.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_replicas_on_one_database_and_bucket_answer_as_one_node() {
    let stores = all_stores("two replicas on one database and bucket");
    let Some(stores @ Stores::Shared { .. }) = stores.last() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (a, b, alice) = two_replicas(dir.path(), stores, |_, _| {}).await;
    let node = a.node.fingerprint().to_owned();
    assert_eq!(b.node.fingerprint(), node, "one key, one node");
    let pins = dir.path().join("known_nodes.json");

    // Pushed through one, pushed on top of through the other.
    let first = dir.path().join("first");
    project(&first, 3, "base");
    let via_a = Client::connect(&remote(&a.url), keypair_copy(&alice), &pins)
        .await
        .unwrap();
    let base = via_a.push(&first, None, &[], "shared").await.unwrap();
    std::fs::write(first.join(".ai/knowledge/notes/n1.md"), "# changed\n").unwrap();
    let via_b = Client::connect(&remote(&b.url), keypair_copy(&alice), &pins)
        .await
        .unwrap();
    let on_top = via_b.push(&first, None, &[], "shared").await.unwrap();
    assert!(!on_top.unchanged, "{on_top:?}");
    let history = via_a
        .call(
            "GET",
            "/history",
            Some("project_path=shared&limit=10"),
            None,
        )
        .await
        .unwrap();
    let hashes: Vec<&str> = history["snapshots"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["_hash"].as_str().unwrap())
        .collect();
    assert_eq!(hashes, [on_top.snapshot.as_str(), base.snapshot.as_str()]);

    // A request one replica took is a replay at the other.
    let (at, once) = (now(), nonce());
    let took = raw(
        (&a.url, &node),
        &alice,
        "GET",
        "/threads",
        &json!({}),
        at,
        &once,
    )
    .await;
    assert_eq!(took.0, 200, "{took:?}");
    let replayed = raw(
        (&b.url, &node),
        &alice,
        "GET",
        "/threads",
        &json!({}),
        at,
        &once,
    )
    .await;
    assert_eq!(replayed.0, 401, "{replayed:?}");

    // A webhook delivery one replica took is "already processed" at the
    // other, and its signature under a new id a replay.
    let bound = fresh(
        (&b.url, &node),
        &alice,
        "POST",
        "/webhook-bindings",
        &json!({"item_id": "tool:demo/x", "project_path": "shared"}),
    )
    .await;
    assert_eq!(bound.0, 200, "{bound:?}");
    let secret = bound.1["hmac_secret"].as_str().unwrap().to_owned();
    let body = json!({"hook_id": bound.1["hook_id"]}).to_string();
    let stamp = now().to_string();
    let signature = {
        use hmac::Mac as _;
        let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(secret.as_bytes()).unwrap();
        mac.update(format!("{stamp}.{body}").as_bytes());
        format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
    };
    let deliver = |url: String, id: &'static str| {
        let (body, stamp, signature) = (body.clone(), stamp.clone(), signature.clone());
        async move {
            let answer = reqwest::Client::new()
                .post(format!("{url}/execute"))
                .header("X-Webhook-Timestamp", stamp)
                .header("X-Webhook-Signature", signature)
                .header("X-Webhook-Delivery-Id", id)
                .body(body)
                .send()
                .await
                .unwrap();
            let status = answer.status().as_u16();
            let text = answer.text().await.unwrap();
            (status, serde_json::from_str::<Value>(&text).unwrap())
        }
    };
    // Run by a (the run itself fails: these replicas have no rye to run
    // items with, which is beside the point).
    let taken = deliver(a.url.clone(), "one").await;
    assert_ne!(taken.0, 401, "{taken:?}");
    let again = deliver(b.url.clone(), "one").await;
    assert_eq!(again.0, 200, "{again:?}");
    assert_eq!(again.1["status"], "already processed", "{again:?}");
    let replay = deliver(b.url.clone(), "two").await;
    assert_eq!(replay.0, 401, "{replay:?}");

    // Twenty clients from one head, through both replicas at once.
    let refs = first.join(".ai/objects/refs/remotes/test.json");
    let mut racers = Vec::new();
    for i in 0..20 {
        let folder = dir.path().join(format!("c{i}"));
        project(&folder, 3, "base");
        std::fs::write(folder.join(".ai/knowledge/notes/n1.md"), "# changed\n").unwrap();
        std::fs::create_dir_all(folder.join(".ai/objects/refs/remotes")).unwrap();
        std::fs::copy(&refs, folder.join(".ai/objects/refs/remotes/test.json")).unwrap();
        std::fs::write(
            folder.join(".ai/knowledge/notes/n0.md"),
            format!("# by {i}\n"),
        )
        .unwrap();
        let url = if i % 2 == 0 { &a.url } else { &b.url }.clone();
        let (key, pins) = (keypair_copy(&alice), pins.clone());
        racers.push(tokio::spawn(async move {
            let client = Client::connect(&remote(&url), key, &pins).await.unwrap();
            client.push(&folder, None, &[], "shared").await
        }));
    }
    let mut landed = Vec::new();
    for racer in racers {
        match racer.await.unwrap() {
            Ok(pushed) => landed.push(pushed.snapshot),
            Err(ClientError::Node { status: 409, body }) => {
                assert_eq!(body["expected"], json!(on_top.snapshot), "{body}");
            }
            Err(e) => panic!("neither landed nor 409: {e}"),
        }
    }
    assert_eq!(landed.len(), 1, "{landed:?}");
    // Both replicas name the winner as the head and can give its snapshot.
    for (served, client) in [(&a, &via_a), (&b, &via_b)] {
        let head = served
            .node
            .db()
            .head(alice.fingerprint(), "shared")
            .await
            .unwrap();
        assert_eq!(head.as_deref(), Some(landed[0].as_str()));
        let got = client
            .call(
                "POST",
                "/objects/get",
                None,
                Some(&json!({"hashes": [landed[0]]})),
            )
            .await
            .unwrap();
        assert_eq!(got["entries"][0]["hash"], json!(landed[0]), "{got}");
    }
    a.task.abort();
    b.task.abort();
}

/// Keys authorized, listed and revoked through the admin endpoints, each
/// by a key allowed to manage keys: scopes and expiry hold on every
/// request, and the last key that may manage keys cannot be revoked, not
/// even by two managers revoking each other at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn keys_are_managed_by_managers_and_the_last_manager_stays() {
    for stores in all_stores("keys are managed by managers and the last manager stays") {
        keys_are_managed_on(stores).await;
    }
}

async fn keys_are_managed_on(stores: Stores) {
    let dir = tempfile::tempdir().unwrap();
    let served = serve(&dir.path().join("node"), &stores).await;
    let fp = served.node.fingerprint().to_owned();
    let to = (served.url.as_str(), fp.as_str());
    let alice = served.key("alice", &["*"]).await;
    let wire = |key: &Keypair| rye_node::keys::wire_key(key.public());
    let admit = |key: &Keypair, scopes: Value, expires: Option<&str>| json!({"public_key": wire(key), "label": "k", "scopes": scopes, "expires_at": expires});
    let (bob, carol, dave) = (
        Keypair::generate().unwrap(),
        Keypair::generate().unwrap(),
        Keypair::generate().unwrap(),
    );
    let path = "/admin/authorized-keys";
    let (status, answer) = fresh(
        to,
        &alice,
        "POST",
        path,
        &admit(&bob, json!(["node.read"]), None),
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    let expired = admit(&carol, json!(["*"]), Some("2020-01-01T00:00:00Z"));
    assert_eq!(fresh(to, &alice, "POST", path, &expired).await.0, 200);

    // Scopes and expiry, on every request.
    assert_eq!(
        fresh(to, &bob, "GET", "/threads", &Value::Null).await.0,
        200
    );
    let has = json!({"hashes": []});
    assert_eq!(fresh(to, &bob, "POST", "/objects/has", &has).await.0, 403);
    assert_eq!(fresh(to, &bob, "GET", path, &Value::Null).await.0, 403);
    assert_eq!(
        fresh(to, &carol, "GET", "/threads", &Value::Null).await.0,
        403
    );
    let odd = admit(&dave, json!(["*"]), Some("next week"));
    assert_eq!(fresh(to, &alice, "POST", path, &odd).await.0, 400);
    // Publish namespaces: plain names, kept in the signed document.
    for namespaces in [json!(["../x"]), json!(["a//b"]), json!("acme"), json!([7])] {
        let mut asked = admit(&dave, json!(["node.read"]), None);
        asked["publish_namespaces"] = namespaces;
        let (status, answer) = fresh(to, &alice, "POST", path, &asked).await;
        assert_eq!(status, 400, "{asked} → {answer}");
    }
    let mut publisher = admit(&dave, json!(["node.read"]), None);
    publisher["publish_namespaces"] = json!(["acme", "acme/tools"]);
    assert_eq!(fresh(to, &alice, "POST", path, &publisher).await.0, 200);
    let (status, listed) = fresh(to, &alice, "GET", path, &Value::Null).await;
    assert_eq!(status, 200);
    assert_eq!(listed["keys"].as_array().unwrap().len(), 4, "{listed}");
    let listed_dave = listed["keys"]
        .as_array()
        .unwrap()
        .iter()
        .find(|k| k["fingerprint"] == json!(format!("fp:{}", dave.fingerprint())))
        .unwrap();
    assert_eq!(
        listed_dave["publish_namespaces"],
        json!(["acme", "acme/tools"])
    );

    // The only manager stays; with another, either may go.
    let alice_at = format!("{path}/fp:{}", alice.fingerprint());
    let (status, answer) = fresh(to, &alice, "DELETE", &alice_at, &Value::Null).await;
    assert_eq!(status, 409, "{answer}");
    assert_eq!(
        fresh(to, &alice, "POST", path, &admit(&dave, json!(["*"]), None))
            .await
            .0,
        200
    );
    let gone = format!("{path}/fp:{}", bob.fingerprint());
    assert_eq!(
        fresh(to, &alice, "DELETE", &gone, &Value::Null).await.0,
        200
    );
    assert_eq!(
        fresh(to, &bob, "GET", "/threads", &Value::Null).await.0,
        401
    );
    assert_eq!(
        fresh(to, &alice, "DELETE", &gone, &Value::Null).await.0,
        404
    );

    // Two managers revoking each other at once: one of them stays.
    let dave_at = format!("{path}/fp:{}", dave.fingerprint());
    let (a, d) = tokio::join!(
        fresh(to, &alice, "DELETE", &dave_at, &Value::Null),
        fresh(to, &dave, "DELETE", &alice_at, &Value::Null),
    );
    let mut statuses = [a.0, d.0];
    statuses.sort();
    assert!(
        statuses == [200, 409] || statuses == [200, 401],
        "{a:?} {d:?}"
    );
    let managers: Vec<String> = served
        .node
        .db()
        .authorized_keys()
        .await
        .unwrap()
        .into_iter()
        .map(|(fp, _)| fp)
        .filter(|fp| *fp == alice.fingerprint() || *fp == dave.fingerprint())
        .collect();
    assert_eq!(managers.len(), 1, "{managers:?}");
    served.task.abort();
}

/// A key over its rate limit is answered 429 with how long to wait,
/// before the request costs the database anything (its nonce stays
/// unspent), and other keys are not held back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_over_its_rate_limit_waits_and_others_do_not() {
    let dir = tempfile::tempdir().unwrap();
    let runner = Runner {
        program: "/nonexistent/rye".into(),
        env: Vec::new(),
        timeout: Duration::from_secs(5),
        keep_hosts: rye_node::run::WORKER_IDLE,
    };
    let mut settings = Stores::Local.settings(&dir.path().join("node"), runner);
    // One a minute after a burst of three: the fourth waits, however
    // slowly the first three went.
    settings.rate_limit = (1, 3);
    let served = serve_with(settings).await;
    let fp = served.node.fingerprint().to_owned();
    let to = (served.url.as_str(), fp.as_str());
    let alice = served.key("alice", &["*"]).await;
    let bob = served.key("bob", &["*"]).await;
    for _ in 0..3 {
        assert_eq!(
            fresh(to, &alice, "GET", "/threads", &Value::Null).await.0,
            200
        );
    }
    let (at, once) = (now(), nonce());
    let (status, answer) = raw(to, &alice, "GET", "/threads", &Value::Null, at, &once).await;
    assert_eq!(status, 429, "{answer}");
    let wait = answer["retry_after_ms"].as_u64().unwrap();
    assert!((1_000..=60_000).contains(&wait), "{answer}");
    assert_eq!(
        fresh(to, &bob, "GET", "/threads", &Value::Null).await.0,
        200
    );
    // Refused before its nonce was spent: the database has not seen it,
    // where it has seen the nonce of a request it took.
    let nonce_key = |key: &Keypair, nonce: &str| {
        use sha2::Digest as _;
        let digest = hex::encode(sha2::Sha256::digest(nonce.as_bytes()));
        format!("{}:{}", key.fingerprint(), &digest[..32])
    };
    let taken = nonce();
    let (status, _) = raw(to, &bob, "GET", "/threads", &Value::Null, now(), &taken).await;
    assert_eq!(status, 200);
    let db = served.node.db();
    assert!(
        !db.fresh_nonce(&nonce_key(&bob, &taken), now() as i64, 360)
            .await
            .unwrap()
    );
    assert!(
        db.fresh_nonce(&nonce_key(&alice, &once), now() as i64, 360)
            .await
            .unwrap()
    );
    served.task.abort();
}

/// The bytes a node's stores hold, read directly.
fn store_of(base: &Path, stores: &Stores) -> rye_cas::Cas<rye_node::bytes::ObjectBytes> {
    let bytes = match stores {
        Stores::Local => rye_node::bytes::ObjectBytes::local(&base.join("objects")).unwrap(),
        Stores::Shared { bucket, .. } => rye_node::bytes::ObjectBytes::connect(
            &format!("s3://{bucket}"),
            &rye_test_artifacts::servers::S3::shared()
                .expect("started before")
                .options(),
        )
        .unwrap(),
    };
    rye_cas::Cas::new(bytes)
}

/// A node collecting only when asked, with no grace period (and no
/// time for a write between its bytes and its row).
async fn serve_collecting(base: &Path, stores: &Stores) -> Served {
    let runner = Runner {
        program: "/nonexistent/rye".into(),
        env: Vec::new(),
        timeout: Duration::from_secs(5),
        keep_hosts: rye_node::run::WORKER_IDLE,
    };
    let mut settings = stores.settings(base, runner);
    settings.gc.every = None;
    settings.gc.grace = Duration::ZERO;
    settings.gc.staged_for = Duration::ZERO;
    serve_with(settings).await
}

/// Collections through `POST /gc` at `to` (url, node) with the shortest
/// retention, back to back until `done`, each counted in `rounds`.
fn collecting(
    (url, node): (String, String),
    key: Keypair,
    done: Arc<std::sync::atomic::AtomicBool>,
    rounds: Arc<std::sync::atomic::AtomicUsize>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        while !done.load(std::sync::atomic::Ordering::Relaxed) {
            let ask = json!({"retention_days": 0, "max_manual_pushes": 1});
            let (status, report) = fresh((&url, &node), &key, "POST", "/gc", &ask).await;
            assert_eq!(status, 200, "{report}");
            rounds.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    })
}

/// The snapshot `hash` and what it names: itself, its manifest, the
/// manifest's item sources, their blobs and its files.
async fn closure_of<S: rye_cas::Storage>(cas: &rye_cas::Cas<S>, snapshot: &str) -> Vec<String> {
    let snap = cas
        .get_object(&snapshot.parse().unwrap())
        .await
        .unwrap()
        .unwrap();
    let manifest_hash = snap["project_manifest_hash"].as_str().unwrap().to_owned();
    let manifest = cas
        .get_object(&manifest_hash.parse().unwrap())
        .await
        .unwrap()
        .unwrap();
    let mut all = vec![snapshot.to_owned(), manifest_hash];
    for source in manifest["items"].as_object().unwrap().values() {
        let source = source.as_str().unwrap();
        let object = cas
            .get_object(&source.parse().unwrap())
            .await
            .unwrap()
            .unwrap();
        all.push(source.to_owned());
        all.push(object["content_blob_hash"].as_str().unwrap().to_owned());
    }
    for blob in manifest["files"].as_object().into_iter().flatten() {
        all.push(blob.1.as_str().unwrap().to_owned());
    }
    all
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_collection_keeps_what_heads_and_retention_reach_and_lets_the_rest_go() {
    for stores in all_stores("garbage collection keeps what heads and retention reach") {
        collection_on(stores).await;
    }
}

async fn collection_on(stores: Stores) {
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().join("node");
    let served = serve_collecting(&base, &stores).await;
    let alice = served.key("alice", &["*"]).await;
    let bob = served.key("bob", &["*"]).await;
    let fp = served.node.fingerprint().to_owned();
    let to = (served.url.as_str(), fp.as_str());
    let pins = dir.path().join("known_nodes.json");
    let folder = dir.path().join("p");
    project(&folder, 3, "v0");
    let client = Client::connect(&remote(&served.url), keypair_copy(&alice), &pins)
        .await
        .unwrap();
    let mut snapshots = vec![client.push(&folder, None, &[], "p").await.unwrap().snapshot];
    for v in 1..=4 {
        std::fs::write(
            folder.join(".ai/knowledge/notes/n0.md"),
            format!("# v{v}\n"),
        )
        .unwrap();
        snapshots.push(client.push(&folder, None, &[], "p").await.unwrap().snapshot);
    }
    // Bob holds what alice's second version of the note is.
    let bob_folder = dir.path().join("b");
    project(&bob_folder, 1, "bob");
    std::fs::write(bob_folder.join(".ai/knowledge/notes/n0.md"), "# v1\n").unwrap();
    let bob_client = Client::connect(&remote(&served.url), keypair_copy(&bob), &pins)
        .await
        .unwrap();
    bob_client.push(&bob_folder, None, &[], "b").await.unwrap();

    let store = store_of(&base, &stores);
    let mut closures = Vec::new();
    for snapshot in &snapshots {
        closures.push(closure_of(&store, snapshot).await);
    }
    let kept: std::collections::HashSet<&String> = closures[3..].iter().flatten().collect();
    let gone: std::collections::HashSet<&String> = closures[..3]
        .iter()
        .flatten()
        .filter(|h| !kept.contains(h))
        .collect();
    assert_eq!(
        gone.len(),
        12,
        "three versions' snapshot, manifest, note and blob"
    );
    let bobs = closure_of(
        &store,
        &bob_client
            .push(&bob_folder, None, &[], "b")
            .await
            .unwrap()
            .snapshot,
    )
    .await;
    let shared: Vec<&&String> = gone.iter().filter(|h| bobs.contains(h)).collect();
    assert_eq!(shared.len(), 2, "bob's note: its item source and blob");

    // Asked wrongly, or by a key that may only read: refused, and
    // nothing is collected or logged.
    for (bad, why) in [
        (json!({"dry_run": "yes"}), "dry_run is not true or false"),
        (json!({"aggressive": 1}), "aggressive is not true or false"),
        (
            json!({"retention_days": -1}),
            "retention_days is not a whole number",
        ),
        (
            json!({"retention_days": 1.5}),
            "retention_days is not a whole number",
        ),
        (
            json!({"max_manual_pushes": 1u64 << 40}),
            "max_manual_pushes is not a whole number",
        ),
        (json!([1, 2]), "the body is not a JSON object"),
    ] {
        let (status, answer) = fresh(to, &alice, "POST", "/gc", &bad).await;
        assert_eq!(status, 400, "{bad}: {answer}");
        assert!(
            answer["error"].as_str().unwrap().contains(why),
            "{bad}: {answer}"
        );
    }
    let reader = served.key("reader", &["node.read"]).await;
    let (status, answer) = fresh(to, &reader, "POST", "/gc", &json!({})).await;
    assert_eq!(status, 403, "{answer}");
    let (status, stats) = fresh(to, &alice, "GET", "/gc/stats", &Value::Null).await;
    assert_eq!(status, 200, "{stats}");
    assert_eq!(stats["last"], json!([]), "{stats}");

    // Counted first: nothing goes.
    let ask = json!({"dry_run": true, "retention_days": 0, "max_manual_pushes": 2});
    let (status, report) = fresh(to, &alice, "POST", "/gc", &ask).await;
    assert_eq!(status, 200, "{report}");
    assert_eq!(report["swept_objects"], 12, "{report}");
    assert_eq!(report["kept_snapshots"], 2, "{report}");
    let first = snapshots[0].parse().unwrap();
    assert!(store.has(&first).await.unwrap().is_some());

    let (status, report) = fresh(
        to,
        &alice,
        "POST",
        "/gc",
        &json!({"retention_days": 0, "max_manual_pushes": 2}),
    )
    .await;
    assert_eq!(status, 200, "{report}");
    assert_eq!(report["swept_objects"], 12, "{report}");
    assert_eq!(report["doomed"], 10, "{report}");
    assert_eq!(report["deleted_from_store"], 10, "{report}");
    let hexes: Vec<&String> = gone.iter().copied().collect();
    let (_, has) = fresh(
        to,
        &alice,
        "POST",
        "/objects/has",
        &json!({"hashes": hexes}),
    )
    .await;
    assert_eq!(has["missing"].as_array().unwrap().len(), 12, "{has}");
    for hash in &gone {
        let held_by_bob = shared.contains(&hash);
        assert_eq!(
            store.has(&hash.parse().unwrap()).await.unwrap().is_some(),
            held_by_bob,
            "{hash}: bytes stay exactly when bob holds them"
        );
    }
    for hash in &kept {
        assert!(
            store.has(&hash.parse().unwrap()).await.unwrap().is_some(),
            "{hash} kept"
        );
    }
    // Bob still reads his note.
    let (_, got) = fresh(to, &bob, "POST", "/objects/get", &json!({"hashes": shared})).await;
    assert_eq!(got["entries"].as_array().unwrap().len(), 2, "{got}");

    // History ends where it was collected; the head comes back whole.
    let (_, history) = fresh(
        to,
        &alice,
        "GET",
        "/history?project_path=p&limit=10",
        &json!({}),
    )
    .await;
    assert_eq!(
        history["snapshots"].as_array().unwrap().len(),
        2,
        "{history}"
    );
    let elsewhere = dir.path().join("elsewhere");
    std::fs::create_dir_all(&elsewhere).unwrap();
    client.pull(&elsewhere, &[], "p").await.unwrap();
    assert_eq!(
        std::fs::read_to_string(elsewhere.join(".ai/knowledge/notes/n0.md")).unwrap(),
        "# v4\n"
    );
    // The note as it was two versions back is sent again, and lands.
    std::fs::write(folder.join(".ai/knowledge/notes/n0.md"), "# v2\n").unwrap();
    let pushed = client.push(&folder, None, &[], "p").await.unwrap();
    assert!(!pushed.unchanged);

    let (status, stats) = fresh(to, &alice, "GET", "/gc/stats", &json!({})).await;
    assert_eq!(status, 200, "{stats}");
    assert_eq!(stats["last"][0]["reason"], "asked", "{stats}");
    assert_eq!(stats["last"][0]["swept_objects"], 12, "{stats}");
    let metrics = reqwest::get(format!("{}/metrics", served.url))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains("rye_node_gc_swept_objects_total 12\n"),
        "{metrics}"
    );
    assert!(
        metrics.contains("rye_node_gc_deleted_total 10\n"),
        "{metrics}"
    );
    served.task.abort();
}

/// Clients pushing while collections run as fast as they can, with no
/// grace period: a push may be refused (what it sent was collected before
/// its head moved), but no head ever names an object that is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn pushes_racing_collections_never_leave_a_head_naming_what_is_gone() {
    for stores in all_stores("pushes racing collections") {
        racing_collections_on(stores).await;
    }
}

async fn racing_collections_on(stores: Stores) {
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().join("node");
    let served = serve_collecting(&base, &stores).await;
    let alice = served.key("alice", &["*"]).await;
    let fp = served.node.fingerprint().to_owned();
    let pins = dir.path().join("known_nodes.json");
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let rounds = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let collector = collecting(
        (served.url.clone(), fp.clone()),
        keypair_copy(&alice),
        Arc::clone(&done),
        Arc::clone(&rounds),
    );
    let before = rounds.load(std::sync::atomic::Ordering::Relaxed);
    let mut pushers = Vec::new();
    for c in 0..6 {
        let folder = dir.path().join(format!("p{c}"));
        project(&folder, 4, &format!("c{c}"));
        let (url, key, pins) = (served.url.clone(), keypair_copy(&alice), pins.clone());
        pushers.push(tokio::spawn(async move {
            let client = Client::connect(&remote(&url), key, &pins).await.unwrap();
            let (mut landed, mut refused) = (0, 0);
            for round in 0..6 {
                std::fs::write(
                    folder.join(format!(".ai/knowledge/notes/n{}.md", round % 4)),
                    format!("# {c} round {round}\n"),
                )
                .unwrap();
                match client.push(&folder, None, &[], &format!("p{c}")).await {
                    Ok(_) => landed += 1,
                    Err(ClientError::Node {
                        status: 400 | 503, ..
                    }) => refused += 1,
                    Err(e) => panic!("neither landed nor refused: {e}"),
                }
            }
            (folder, client, landed, refused)
        }));
    }
    let mut results = Vec::new();
    for pusher in pushers {
        results.push(pusher.await.unwrap());
    }
    let during = rounds.load(std::sync::atomic::Ordering::Relaxed) - before;
    assert!(during > 0, "collections ended while the pushes went on");
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    collector.await.unwrap();
    let landed: usize = results.iter().map(|r| r.2).sum();
    assert!(landed > 0, "some pushes landed");
    // Every head comes back whole, from the database's rows and the
    // store's bytes alike.
    let store = store_of(&base, &stores);
    for (c, (folder, client, _, _)) in results.iter().enumerate() {
        let project_path = format!("p{c}");
        let Some(head) = served
            .node
            .db()
            .head(alice.fingerprint(), &project_path)
            .await
            .unwrap()
        else {
            continue;
        };
        let elsewhere = dir.path().join(format!("pulled{c}"));
        std::fs::create_dir_all(&elsewhere).unwrap();
        client.pull(&elsewhere, &[], &project_path).await.unwrap();
        let closure = closure_of(&store, &head).await;
        let held = served
            .node
            .db()
            .held(alice.fingerprint(), &closure)
            .await
            .unwrap();
        for hash in &closure {
            assert!(
                held.contains(hash),
                "{hash} of {project_path}'s head is held"
            );
            assert!(
                store.has(&hash.parse().unwrap()).await.unwrap().is_some(),
                "{hash} of {project_path}'s head is stored"
            );
        }
        let _ = folder;
    }
    served.task.abort();
}

/// A TCP relay in front of the node at `url`; the first time a request
/// starting with `trigger` passes it, `before` is awaited and only then is
/// the request let on. Its own URL.
async fn relay_pausing_at(
    url: &str,
    trigger: &'static [u8],
    before: impl std::future::Future<Output = ()> + Send + 'static,
) -> String {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let upstream = url.trim_start_matches("http://").to_owned();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let here = format!("http://{}", listener.local_addr().unwrap());
    let before = Arc::new(tokio::sync::Mutex::new(Some(Box::pin(before))));
    tokio::spawn(async move {
        while let Ok((inbound, _)) = listener.accept().await {
            let outbound = tokio::net::TcpStream::connect(&upstream).await.unwrap();
            let (mut in_read, mut in_write) = inbound.into_split();
            let (mut out_read, mut out_write) = outbound.into_split();
            tokio::spawn(async move { tokio::io::copy(&mut out_read, &mut in_write).await });
            let before = Arc::clone(&before);
            tokio::spawn(async move {
                let mut chunk = vec![0u8; 64 << 10];
                loop {
                    let n = match in_read.read(&mut chunk).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => n,
                    };
                    if chunk[..n].starts_with(trigger) {
                        let pending = before.lock().await.take();
                        if let Some(pending) = pending {
                            pending.await;
                        }
                    }
                    if out_write.write_all(&chunk[..n]).await.is_err() {
                        break;
                    }
                }
            });
        }
    });
    here
}

/// A pull whose head moves on, and is collected, between its reading of
/// the head and its fetching of the head's objects reads the head again
/// and brings in the new one. A head naming an object the node has lost
/// is an error naming the object, and the project is left as it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pull_whose_head_is_collected_under_it_reads_the_head_again() {
    for stores in all_stores("a pull whose head is collected under it") {
        pull_under_collection_on(stores).await;
    }
}

async fn pull_under_collection_on(stores: Stores) {
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().join("node");
    let served = serve_collecting(&base, &stores).await;
    let alice = served.key("alice", &["*"]).await;
    let fp = served.node.fingerprint().to_owned();
    let pins = dir.path().join("known_nodes.json");
    let writer = dir.path().join("writer");
    project(&writer, 3, "one");
    let pusher = Client::connect(&remote(&served.url), keypair_copy(&alice), &pins)
        .await
        .unwrap();
    pusher.push(&writer, None, &[], "p").await.unwrap();
    let first = served
        .node
        .db()
        .head(alice.fingerprint(), "p")
        .await
        .unwrap()
        .unwrap();
    // Once the reader has read the head, the writer pushes anew and a
    // collection keeps only the new head.
    let moved = {
        let (url, fp, key, writer) = (
            served.url.clone(),
            fp.clone(),
            keypair_copy(&alice),
            writer.clone(),
        );
        async move {
            project(&writer, 3, "two");
            pusher.push(&writer, None, &[], "p").await.unwrap();
            let ask = json!({"retention_days": 0, "max_manual_pushes": 1});
            let (status, report) = fresh((&url, &fp), &key, "POST", "/gc", &ask).await;
            assert_eq!(status, 200, "{report}");
            assert!(report["swept_objects"].as_u64() > Some(0), "{report}");
        }
    };
    let relay = relay_pausing_at(&served.url, b"POST /objects/get ", moved).await;
    let reader = dir.path().join("reader");
    std::fs::create_dir_all(&reader).unwrap();
    let client = Client::connect(&remote(&relay), keypair_copy(&alice), &pins)
        .await
        .unwrap();
    let pulled = client.pull(&reader, &[], "p").await.unwrap();
    let head = served
        .node
        .db()
        .head(alice.fingerprint(), "p")
        .await
        .unwrap()
        .unwrap();
    assert_ne!(head, first, "the head moved under the pull");
    assert_eq!(pulled["head"], head, "{pulled:#}");
    assert_eq!(pulled["status"], "merged", "{pulled:#}");
    for i in 0..3 {
        let note = reader.join(format!(".ai/knowledge/notes/n{i}.md"));
        assert_eq!(
            std::fs::read_to_string(&note).unwrap(),
            format!("# note {i} two\n")
        );
    }

    // The head's manifest lost from the store: the head does not move, so
    // the pull ends naming what is gone, and writes nothing.
    let store = store_of(&base, &stores);
    let closure = closure_of(&store, &head).await;
    let manifest: rye_cas::ContentHash = closure[1].parse().unwrap();
    store
        .delete(rye_cas::Class::Object, &manifest)
        .await
        .unwrap();
    let empty = dir.path().join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    let direct = Client::connect(&remote(&served.url), keypair_copy(&alice), &pins)
        .await
        .unwrap();
    let err = direct.pull(&empty, &[], "p").await.unwrap_err().to_string();
    assert!(
        err.contains(&head) && err.contains(&manifest.hex()) && err.contains("does not hold"),
        "{err}"
    );
    let written = walk(&empty.join(".ai/knowledge"));
    assert!(written.is_empty(), "{written:?}");
    served.task.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_put_past_the_quota_collects_first_and_is_refused_only_if_still_past_it() {
    for stores in all_stores("a put past the quota collects first") {
        quota_collection_on(stores).await;
    }
}

async fn quota_collection_on(stores: Stores) {
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().join("node");
    let runner = Runner {
        program: "/nonexistent/rye".into(),
        env: Vec::new(),
        timeout: Duration::from_secs(5),
        keep_hosts: rye_node::run::WORKER_IDLE,
    };
    let mut settings = stores.settings(&base, runner);
    settings.gc.every = None;
    settings.gc.grace = Duration::ZERO;
    settings.gc.staged_for = Duration::ZERO;
    settings.max_user_storage_bytes = 200_000;
    let served = serve_with(settings).await;
    let alice = served.key("alice", &["*"]).await;
    let pins = dir.path().join("known_nodes.json");
    let folder = dir.path().join("p");
    project(&folder, 1, "small");
    let note = folder.join(".ai/knowledge/notes/n0.md");
    let big = |tag: &str| format!("# {tag}\n{}\n", tag.repeat(120_000 / tag.len()));
    let client = Client::connect(&remote(&served.url), keypair_copy(&alice), &pins)
        .await
        .unwrap();
    std::fs::write(&note, big("first")).unwrap();
    client.push(&folder, None, &[], "p").await.unwrap();
    std::fs::write(&note, "# small again\n").unwrap();
    client.push(&folder, None, &[], "p").await.unwrap();
    // The first big note is no head's now: collected to make room.
    std::fs::write(&note, big("second")).unwrap();
    client.push(&folder, None, &[], "p").await.unwrap();
    let stored = served
        .node
        .db()
        .stored_bytes(alice.fingerprint())
        .await
        .unwrap();
    assert!(stored < 200_000, "{stored}");
    // Past it again within ten minutes: refused without collecting, and
    // the head stays.
    let head = served
        .node
        .db()
        .head(alice.fingerprint(), "p")
        .await
        .unwrap();
    std::fs::write(&note, big("third")).unwrap();
    match client.push(&folder, None, &[], "p").await {
        Err(ClientError::Node { status: 507, body }) => {
            assert!(
                body["error"].as_str().unwrap().contains("would pass"),
                "{body}"
            )
        }
        other => panic!("not refused 507: {other:?}"),
    }
    assert_eq!(
        served
            .node
            .db()
            .head(alice.fingerprint(), "p")
            .await
            .unwrap(),
        head
    );
    let fp = served.node.fingerprint().to_owned();
    let (_, stats) = fresh((&served.url, &fp), &alice, "GET", "/gc/stats", &json!({})).await;
    let reasons: Vec<&Value> = stats["last"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| &r["reason"])
        .collect();
    assert_eq!(reasons, [&json!("quota")], "{stats}");
    served.task.abort();
}

/// The record of the run `thread` once it has ended, asked through
/// `client` until `deadline`.
async fn ended(client: &Client, thread: &str, deadline: std::time::Instant) -> Value {
    loop {
        let record = client
            .call("GET", &format!("/threads/{thread}"), None, None)
            .await
            .unwrap();
        if !matches!(record["status"].as_str(), Some("queued" | "running")) {
            return record;
        }
        assert!(std::time::Instant::now() < deadline, "{record:#}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Writes at `script` a stand-in for the `rye serve` a node keeps in a
/// workspace: it speaks just enough MCP over stdio (it answers
/// `initialize` and every `tools/call`), runs the shell commands `work`
/// in the workspace for each call and answers success.
fn stand_in(script: &Path, work: &str) {
    use std::os::unix::fs::PermissionsExt as _;
    const TEMPLATE: &str = r#"#!/bin/sh
field() { printf '%s' "$line" | sed -n "s/.*\"$1\":$2.*/\1/p"; }
while IFS= read -r line; do
  id=$(field id '\([0-9][0-9]*\)')
  case "$line" in
    *'"method":"initialize"'*)
      version=$(field protocolVersion '"\([^"]*\)"')
      echo "{\"jsonrpc\":\"2.0\",\"id\":$id,\"result\":{\"protocolVersion\":\"$version\",\"capabilities\":{\"tools\":{}},\"serverInfo\":{\"name\":\"stand-in\",\"version\":\"0\"}}}" ;;
    *'"method":"tools/call"'*)
      ( WORK ) < /dev/null > /dev/null
      echo "{\"jsonrpc\":\"2.0\",\"id\":$id,\"result\":{\"content\":[],\"structuredContent\":{\"status\":\"success\",\"data\":{}}}}" ;;
  esac
done
"#;
    std::fs::write(script, TEMPLATE.replace("WORK", work)).unwrap();
    std::fs::set_permissions(script, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// A stand-in for `rye serve` that logs when each run starts and ends (with the
/// replica's name from its environment), sleeps `seconds` and answers
/// success.
fn logging_runner(dir: &Path, replica: &str, seconds: f64) -> Runner {
    let log = dir.join("runs.log");
    let script = dir.join("logging-rye");
    stand_in(
        &script,
        &format!(
            "echo \"$REPLICA start\" >> {log}; sleep {seconds}; echo \"$REPLICA end\" >> {log}",
            log = log.display()
        ),
    );
    Runner {
        program: script,
        env: vec![
            ("REPLICA".into(), replica.into()),
            ("PATH".into(), "/usr/bin:/bin".into()),
        ],
        timeout: Duration::from_secs(30),
        keep_hosts: rye_node::run::WORKER_IDLE,
    }
}

/// Async runs all sent to one replica wait in the database's queue and
/// run on whichever replica has a free slot first: neither replica ever
/// runs more than its `max_concurrent` at once, a full queue is answered
/// 503 (and the client's retry gets in later), and every run accepted
/// ends, recorded with the replica that ran it.
#[tokio::test]
async fn async_runs_queue_in_the_database_and_run_on_any_replica_within_its_slots() {
    let stores = all_stores("async runs queued for two replicas");
    let Some(stores @ Stores::Shared { .. }) = stores.last() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (a, b, alice) = two_replicas(dir.path(), stores, |name, settings| {
        settings.runner = logging_runner(dir.path(), name, 1.0);
        settings.max_concurrent = 2;
    })
    .await;
    let pins = dir.path().join("known_nodes.json");
    let folder = dir.path().join("project");
    project(&folder, 2, "queued");
    let via_a = Client::connect(&remote(&a.url), keypair_copy(&alice), &pins)
        .await
        .unwrap();
    via_a.push(&folder, None, &[], "q").await.unwrap();

    // Sixteen runs of a second each, one every 50 ms, all to a.
    let mut accepted = Vec::new();
    let mut refused = 0;
    while accepted.len() < 16 {
        match via_a.execute("q", "tool:demo/x", &json!({}), true).await {
            Ok(answer) => {
                assert_eq!(answer["status"], "accepted", "{answer}");
                accepted.push(answer["thread_id"].as_str().unwrap().to_owned());
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(ClientError::Node { status: 503, body }) => {
                assert!(
                    body["error"]
                        .as_str()
                        .unwrap()
                        .contains("wait for a free replica"),
                    "{body}"
                );
                refused += 1;
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => panic!("neither accepted nor 503: {e}"),
        }
    }
    assert!(
        refused > 0,
        "four run at once and two wait: the rest must be refused"
    );

    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let mut ran_on = std::collections::BTreeMap::<String, usize>::new();
    for thread in &accepted {
        let record = ended(&via_a, thread, deadline).await;
        assert_eq!(record["status"], "completed", "{record:#}");
        assert_eq!(record["attempts"], 1, "{record:#}");
        *ran_on
            .entry(record["replica"].as_str().unwrap().to_owned())
            .or_default() += 1;
    }
    assert_eq!(ran_on.len(), 2, "both replicas ran some: {ran_on:?}");

    // Never more than two at once on either.
    let log = std::fs::read_to_string(dir.path().join("runs.log")).unwrap();
    let mut now = std::collections::BTreeMap::<&str, i32>::new();
    let mut most = std::collections::BTreeMap::<&str, i32>::new();
    for line in log.lines() {
        let (name, what) = line.split_once(' ').unwrap();
        let at = now.entry(name).or_default();
        *at += if what == "start" { 1 } else { -1 };
        let peak = most.entry(name).or_default();
        *peak = (*peak).max(*at);
    }
    assert_eq!(log.lines().count(), 32, "{log}");
    assert!(most.values().all(|&peak| peak <= 2), "{most:?}\n{log}");
    assert_eq!(most.len(), 2, "{log}");
    let metrics = reqwest::get(format!("{}/metrics", b.url))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(metrics.contains("rye_node_jobs_queued 0\n"), "{metrics}");
    a.task.abort();
    b.task.abort();
}

/// An execute asking for what cannot be is refused with what is wrong,
/// before anything is queued or recorded.
#[tokio::test]
async fn an_execute_with_a_bad_field_is_refused_and_queues_nothing() {
    for stores in all_stores("bad execute requests") {
        let dir = tempfile::tempdir().unwrap();
        let served = serve(dir.path(), &stores).await;
        let node = served.node.fingerprint().to_owned();
        let alice = served.key("alice", &["*"]).await;
        let folder = dir.path().join("project");
        project(&folder, 1, "bad");
        Client::connect(
            &remote(&served.url),
            keypair_copy(&alice),
            &dir.path().join("pins.json"),
        )
        .await
        .unwrap()
        .push(&folder, None, &[], "p")
        .await
        .unwrap();
        let base = json!({"item_id": "tool:demo/x", "project_path": "p", "async": true});
        let with = |field: &str, value: Value| {
            let mut body = base.clone();
            body[field] = value;
            body
        };
        for (body, says) in [
            (with("item_id", json!("tool:../x")), "plain names"),
            (with("item_id", json!(7)), "item_id"),
            (
                with("parameters", json!([1])),
                "parameters is not a JSON object",
            ),
            (with("async", json!("yes")), "async is true or false"),
            (with("retries", json!(-1)), "retries is a whole number"),
            (with("retries", json!(6)), "retries is a whole number"),
            (with("retries", json!(1.5)), "retries is a whole number"),
            (with("retries", json!("2")), "retries is a whole number"),
            (
                json!({"item_id": "tool:demo/x", "project_path": "p", "retries": 1}),
                "retries is for async runs",
            ),
            (with("vault_keys", json!("NAME")), "vault_keys"),
            (with("secret_envelope", json!({"v": 1})), "secret_envelope"),
        ] {
            let (status, answer) =
                fresh((&served.url, &node), &alice, "POST", "/execute", &body).await;
            assert_eq!(status, 400, "{body} → {answer}");
            assert!(
                answer["error"].as_str().unwrap_or_default().contains(says),
                "{body} → {answer}"
            );
        }
        let (status, answer) = fresh(
            (&served.url, &node),
            &alice,
            "POST",
            "/execute",
            &with("project_path", json!("never-pushed")),
        )
        .await;
        assert_eq!(status, 404, "{answer}");
        let (_, threads) = fresh((&served.url, &node), &alice, "GET", "/threads", &json!({})).await;
        assert_eq!(threads["threads"], json!([]), "{threads}");
        assert_eq!(served.node.db().queued().await.unwrap(), 0);
        served.task.abort();
    }
}

/// A stand-in for `rye serve` whose every run leaves a note of its own under
/// `.ai/knowledge/state/`, so that each run folds a change back.
fn noting_runner(dir: &Path) -> Runner {
    let script = dir.join("noting-rye");
    stand_in(
        &script,
        "mkdir -p .ai/knowledge/state; n=\"$(date +%s%N)-$$\"; \
         echo \"# run $n\" > .ai/knowledge/state/run-$n.md",
    );
    Runner {
        program: script,
        env: vec![("PATH".into(), "/usr/bin:/bin".into())],
        timeout: Duration::from_secs(60),
        keep_hosts: rye_node::run::WORKER_IDLE,
    }
}

/// Twenty clients on four projects push and run items through two
/// replicas at once for three rounds each, while both replicas collect
/// garbage back to back with a one-second grace and the shortest
/// retention.
/// Every push lands or is told the head moved (409), or is refused whole
/// by a collection's fence or the node's capacity (400/503); every run
/// accepted ends and folds back; each client checks the head out whole
/// into an empty folder after every round; and at the end every head's
/// closure is held and stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn twenty_clients_push_and_run_through_two_replicas_while_both_collect() {
    let stores = all_stores("twenty clients on two replicas");
    let Some(stores @ Stores::Shared { .. }) = stores.last() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (a, b, alice) = two_replicas(dir.path(), stores, |_, settings| {
        settings.runner = noting_runner(dir.path());
        settings.gc.every = None;
        settings.gc.grace = Duration::from_secs(1);
        // Many writers at once: every write is kept from collection until
        // its row is written, as it is by default.
        settings.gc.staged_for = Duration::from_secs(60);
    })
    .await;
    let fp = a.node.fingerprint().to_owned();
    let pins = dir.path().join("known_nodes.json");
    let urls = [a.url.clone(), b.url.clone()];
    // Each project has a head before the race begins.
    for p in 0..4 {
        let folder = dir.path().join(format!("first{p}"));
        project(&folder, 4, "first");
        Client::connect(&remote(&a.url), keypair_copy(&alice), &pins)
            .await
            .unwrap()
            .push(&folder, None, &[], &format!("p{p}"))
            .await
            .unwrap();
    }
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let rounds = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let collectors: Vec<_> = urls
        .iter()
        .map(|url| {
            collecting(
                (url.clone(), fp.clone()),
                keypair_copy(&alice),
                Arc::clone(&done),
                Arc::clone(&rounds),
            )
        })
        .collect();
    let before = rounds.load(std::sync::atomic::Ordering::Relaxed);

    let mut clients = Vec::new();
    for c in 0..20 {
        let folder = dir.path().join(format!("c{c}"));
        std::fs::create_dir_all(&folder).unwrap();
        let project_path = format!("p{}", c % 4);
        let url = urls[c % 2].clone();
        let (key, pins, dir) = (keypair_copy(&alice), pins.clone(), dir.path().to_owned());
        clients.push(tokio::spawn(async move {
            let client = Client::connect(&remote(&url), key, &pins).await.unwrap();
            client.pull(&folder, &[], &project_path).await.unwrap();
            let (mut pushes, mut runs, mut threads) = (Vec::new(), Vec::new(), Vec::new());
            for round in 0..3 {
                std::fs::write(
                    folder.join(format!(".ai/knowledge/notes/c{c}-{round}.md")),
                    format!("# {c} round {round}\n"),
                )
                .unwrap();
                // Pushed; on a 409, the head merged in here and pushed
                // once more.
                for attempt in 0..2 {
                    let status = match client.push(&folder, None, &[], &project_path).await {
                        Ok(_) => 200,
                        Err(ClientError::Node { status, body }) => {
                            assert!(matches!(status, 409 | 400 | 503), "{status}: {body}");
                            if status == 409 {
                                assert!(body.get("actual").is_some(), "{body}");
                            }
                            status
                        }
                        Err(e) => panic!("a push neither landed nor was refused: {e}"),
                    };
                    pushes.push(status);
                    if status != 409 || attempt == 1 {
                        break;
                    }
                    let merged = client.pull(&folder, &[], &project_path).await.unwrap();
                    assert_ne!(merged["status"], "conflict", "{merged:#}");
                }
                let run_async = (c + round) % 2 == 0;
                runs.push(
                    match client
                        .execute(&project_path, "tool:demo/x", &json!({}), run_async)
                        .await
                    {
                        Ok(answer) => {
                            threads.push(answer["thread_id"].as_str().unwrap().to_owned());
                            200
                        }
                        Err(ClientError::Node { status: 503, .. }) => 503,
                        Err(e) => {
                            panic!("a run neither started nor was refused: {e} after {pushes:?}")
                        }
                    },
                );
                // The head as it is now comes out whole.
                let checkout = dir.join(format!("checkout-{c}-{round}"));
                std::fs::create_dir_all(&checkout).unwrap();
                let pulled = client.pull(&checkout, &[], &project_path).await;
                assert!(pulled.is_ok(), "the head comes out whole: {pulled:?}");
            }
            (client, pushes, runs, threads)
        }));
    }
    let mut all = Vec::new();
    for client in clients {
        all.push(client.await.unwrap());
    }
    // Every run accepted ends, folded back.
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    let mut merges = std::collections::BTreeMap::<String, usize>::new();
    for (client, _, _, threads) in &all {
        for thread in threads {
            let record = ended(client, thread, deadline).await;
            assert_eq!(record["status"], "completed", "{record:#}");
            *merges
                .entry(record["merge_type"].as_str().unwrap().to_owned())
                .or_default() += 1;
        }
    }
    let during = rounds.load(std::sync::atomic::Ordering::Relaxed) - before;
    assert!(
        during > 1,
        "collections ended while the clients went on: {during}"
    );
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    for collector in collectors {
        collector.await.unwrap();
    }
    let pushes: Vec<u16> = all.iter().flat_map(|r| r.1.clone()).collect();
    let runs: Vec<u16> = all.iter().flat_map(|r| r.2.clone()).collect();
    assert!(pushes.contains(&200) && pushes.contains(&409), "{pushes:?}");
    assert!(runs.iter().filter(|&&s| s == 200).count() >= 20, "{runs:?}");
    // Five runs on one head race each other and four clients' pushes: a
    // fold-back may lose its five tries (the spec's `retry_exhausted`),
    // never conflict, since no two write one file.
    assert!(
        merges
            .keys()
            .all(|m| ["fast-forward", "merge", "retry_exhausted"].contains(&m.as_str())),
        "every run's note folds in: {merges:?}"
    );
    let count = |all: &[u16], status| all.iter().filter(|&&s| s == status).count();
    eprintln!(
        "pushes: {} landed, {} 409, {} refused; runs: {} started, {} 503; folded: {merges:?}",
        count(&pushes, 200),
        count(&pushes, 409),
        count(&pushes, 400) + count(&pushes, 503),
        count(&runs, 200),
        count(&runs, 503),
    );

    // Every head whole, in the database's rows and the bucket's bytes.
    let store = store_of(&dir.path().join("a"), stores);
    for p in 0..4 {
        let project_path = format!("p{p}");
        let head = a
            .node
            .db()
            .head(alice.fingerprint(), &project_path)
            .await
            .unwrap()
            .unwrap();
        let closure = closure_of(&store, &head).await;
        let held = a
            .node
            .db()
            .held(alice.fingerprint(), &closure)
            .await
            .unwrap();
        for hash in &closure {
            assert!(held.contains(hash), "{hash} of {project_path} is held");
            assert!(
                store.has(&hash.parse().unwrap()).await.unwrap().is_some(),
                "{hash} of {project_path} is stored"
            );
        }
    }
    a.task.abort();
    b.task.abort();
}

/// A run's fold-back moves its project's head only once its key holds
/// what the new head names: a reader that sees the head move finds the
/// whole closure its own at once, never a moment later.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_head_a_run_moves_names_only_what_its_key_already_holds() {
    for stores in all_stores("a head a run moves names only what its key holds") {
        head_moved_by_runs_on(stores).await;
    }
}

async fn head_moved_by_runs_on(stores: Stores) {
    let dir = tempfile::tempdir().unwrap();
    let mut settings = stores.settings(&dir.path().join("node"), noting_runner(dir.path()));
    settings.gc.every = None;
    let served = serve_with(settings).await;
    let alice = served.key("alice", &["*"]).await;
    let fp = alice.fingerprint().to_owned();
    let folder = dir.path().join("project");
    project(&folder, 3, "first");
    let client = Client::connect(
        &remote(&served.url),
        keypair_copy(&alice),
        &dir.path().join("known_nodes.json"),
    )
    .await
    .unwrap();
    client.push(&folder, None, &[], "p").await.unwrap();

    // Watches the head as closely as the database answers, checking
    // every head it sees against what the key holds.
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let watcher = {
        let (node, done, store) = (
            Arc::clone(&served.node),
            Arc::clone(&done),
            store_of(&dir.path().join("node"), &stores),
        );
        tokio::spawn(async move {
            let (mut last, mut seen, mut lacking) = (None, 0, Vec::new());
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                let head = node.db().head(&fp, "p").await.unwrap();
                if head == last {
                    continue;
                }
                // The snapshot itself at once, then all it names.
                let snapshot = vec![head.clone().unwrap()];
                let held = node.db().held(&fp, &snapshot).await.unwrap();
                lacking.extend(snapshot.into_iter().filter(|h| !held.contains(h)));
                let closure = closure_of(&store, head.as_deref().unwrap()).await;
                let held = node.db().held(&fp, &closure).await.unwrap();
                lacking.extend(closure.into_iter().filter(|h| !held.contains(h)));
                seen += 1;
                last = head;
            }
            (seen, lacking)
        })
    };
    for _ in 0..8 {
        let answer = client
            .execute("p", "tool:demo/x", &json!({}), false)
            .await
            .unwrap();
        assert_eq!(answer["status"], "completed", "{answer:#}");
    }
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    let (seen, lacking) = watcher.await.unwrap();
    assert!(seen >= 2, "the watcher saw the head move: {seen}");
    assert!(
        lacking.is_empty(),
        "heads named what alice did not hold yet: {lacking:?}"
    );
    served.task.abort();
}

/// A request carrying `token` as a bearer token (and `more` headers).
async fn bearing(
    url: &str,
    token: &str,
    method: &str,
    path: &str,
    body: Option<&Value>,
    more: &[(String, String)],
) -> (u16, Value) {
    let mut request = reqwest::Client::new()
        .request(
            reqwest::Method::from_bytes(method.as_bytes()).unwrap(),
            format!("{url}{path}"),
        )
        .header("Authorization", token);
    for (name, value) in more {
        request = request.header(name, value);
    }
    if let Some(body) = body {
        request = request.body(body.to_string());
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let text = response.text().await.unwrap();
    (
        status,
        serde_json::from_str(&text).unwrap_or(json!({"raw": text})),
    )
}

/// API keys are minted by a signed request within the minter's scopes,
/// shown once and kept as a hash only, and act for their key within
/// their own scopes. Refused: a scope not given, managing keys, minting
/// or revoking API keys, a token beside a signature, a malformed or
/// unknown token, one revoked, one expired, and one whose key lost the
/// scope.
#[tokio::test]
async fn api_keys_act_for_their_key_within_their_scopes_until_revoked_or_expired() {
    for stores in all_stores("API keys") {
        api_keys_on(stores).await;
    }
}

async fn api_keys_on(stores: Stores) {
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().join("node");
    let served = serve(&base, &stores).await;
    let url = served.url.clone();
    let node = served.node.fingerprint().to_owned();
    let alice = served.key("alice", &["*"]).await;
    let bob = served.key("bob", &["node.read"]).await;
    let to = (url.as_str(), node.as_str());
    let says = |answer: &(u16, Value), status: u16, text: &str| {
        assert_eq!(answer.0, status, "{answer:?}");
        assert!(
            answer.1["error"]
                .as_str()
                .unwrap_or_default()
                .contains(text),
            "{text:?} in {answer:?}"
        );
    };

    let minted = fresh(
        to,
        &alice,
        "POST",
        "/api-keys",
        &json!({"label": "ci", "scopes": ["node:read", "node:execute"]}),
    )
    .await;
    assert_eq!(minted.0, 200, "{minted:?}");
    let token = minted.1["token"].as_str().unwrap().to_owned();
    let key_id = minted.1["key_id"].as_str().unwrap().to_owned();
    assert!(token.starts_with("rye_sk_") && token.len() == 71, "{token}");
    let bearer = format!("Bearer {token}");

    // It reads and runs; it does not push, manage keys, or mint keys.
    let listed = bearing(&url, &bearer, "GET", "/threads", None, &[]).await;
    assert_eq!(listed.0, 200, "{listed:?}");
    let pushed = bearing(
        &url,
        &bearer,
        "POST",
        "/objects/has",
        Some(&json!({"hashes": []})),
        &[],
    )
    .await;
    says(&pushed, 403, "may not node.push");
    let admin = bearing(&url, &bearer, "GET", "/admin/authorized-keys", None, &[]).await;
    says(&admin, 403, "may not manage keys");
    let more = bearing(
        &url,
        &bearer,
        "POST",
        "/api-keys",
        Some(&json!({"label": "more"})),
        &[],
    )
    .await;
    says(&more, 403, "takes a signed request");
    let revoke = bearing(
        &url,
        &bearer,
        "DELETE",
        &format!("/api-keys/{key_id}"),
        None,
        &[],
    )
    .await;
    says(&revoke, 403, "takes a signed request");

    // Beside a signature, malformed, or unknown: refused.
    let request = auth::Request {
        method: "GET",
        path: "/threads",
        query: None,
        body: b"",
    };
    let signature: Vec<(String, String)> = auth::sign(&alice, &request, &node, now(), &nonce())
        .into_iter()
        .map(|(n, v)| (n.to_string(), v))
        .collect();
    let both = bearing(&url, &bearer, "GET", "/threads", None, &signature).await;
    says(&both, 401, "not both");
    for (header, text) in [
        ("Bearer rye_sk_xyz", "not an API key"),
        ("Basic YWxpY2U6c2VjcmV0", "not Bearer"),
        (
            &*format!("Bearer {}", "rye_sk_".to_owned() + &"0".repeat(64)),
            "no such API key",
        ),
        (
            &*format!("Bearer {}", token.to_uppercase()),
            "not an API key",
        ),
    ] {
        let refused = bearing(&url, header, "GET", "/threads", None, &[]).await;
        says(&refused, 401, text);
    }

    // Listed without its token; kept as a hash only.
    let list = fresh(to, &alice, "GET", "/api-keys", &json!({})).await;
    assert_eq!(list.0, 200, "{list:?}");
    assert_eq!(list.1["api_keys"][0]["key_id"], json!(key_id), "{list:?}");
    assert_eq!(
        list.1["api_keys"][0]["scopes"],
        json!(["node:read", "node:execute"])
    );
    assert!(!list.1.to_string().contains(&token[7..]), "{list:?}");
    if let Stores::Local = stores {
        for file in walk(&base) {
            let bytes = std::fs::read(&file).unwrap_or_default();
            assert!(
                !bytes.windows(64).any(|w| w == &token.as_bytes()[7..]),
                "{} holds the token",
                file.display()
            );
        }
    }

    // Through the client, as a remote with key_env would.
    let pins = dir.path().join("pins.json");
    let client = Client::connect_as(
        &remote(&url),
        rye_node::client::Credentials::ApiKey(token.clone()),
        &pins,
    )
    .await
    .unwrap();
    assert!(client.call("GET", "/threads", None, None).await.is_ok());
    let folder = dir.path().join("project");
    project(&folder, 1, "bearer");
    match client.push(&folder, None, &[], "p").await {
        Err(ClientError::Node { status: 403, .. }) => {}
        other => panic!("a read-and-run API key pushed: {other:?}"),
    }

    // Never past what the minter may do, and never a bad request.
    let beyond = fresh(
        to,
        &bob,
        "POST",
        "/api-keys",
        &json!({"label": "x", "scopes": ["node:push"]}),
    )
    .await;
    says(&beyond, 403, "may not node.push");
    let everything = fresh(to, &bob, "POST", "/api-keys", &json!({"label": "x"})).await;
    says(&everything, 403, "may not node.push");
    for (body, text) in [
        (json!({}), "label"),
        (json!({"label": ""}), "label"),
        (json!({"label": "x", "scopes": ["admin"]}), "scopes"),
        (json!({"label": "x", "scopes": "node:read"}), "scopes"),
        (
            json!({"label": "x", "expires_at": "tomorrow"}),
            "expires_at",
        ),
        (
            json!({"label": "x", "expires_at": "2001-01-01T00:00:00Z"}),
            "past",
        ),
    ] {
        let refused = fresh(to, &bob, "POST", "/api-keys", &body).await;
        says(&refused, 400, text);
    }
    let bobs = fresh(
        to,
        &bob,
        "POST",
        "/api-keys",
        &json!({"label": "bob", "scopes": ["node:read"]}),
    )
    .await;
    assert_eq!(bobs.0, 200, "{bobs:?}");
    let bobs = format!("Bearer {}", bobs.1["token"].as_str().unwrap());
    assert_eq!(
        bearing(&url, &bobs, "GET", "/threads", None, &[]).await.0,
        200
    );

    // Expired.
    let soon = rye_integrity::utc_timestamp(SystemTime::now() + Duration::from_secs(2));
    let brief = fresh(
        to,
        &alice,
        "POST",
        "/api-keys",
        &json!({"label": "brief", "expires_at": soon}),
    )
    .await;
    assert_eq!(brief.0, 200, "{brief:?}");
    let brief = format!("Bearer {}", brief.1["token"].as_str().unwrap());
    assert_eq!(
        bearing(&url, &brief, "GET", "/threads", None, &[]).await.0,
        200
    );
    tokio::time::sleep(Duration::from_secs(3)).await;
    let expired = bearing(&url, &brief, "GET", "/threads", None, &[]).await;
    says(&expired, 401, "expired");

    // Revoked, once.
    let delete = |path: String| {
        let alice = &alice;
        async move { fresh(to, alice, "DELETE", &path, &json!({})).await }
    };
    let gone = delete(format!("/api-keys/{key_id}")).await;
    assert_eq!(gone.0, 200, "{gone:?}");
    let after = bearing(&url, &bearer, "GET", "/threads", None, &[]).await;
    says(&after, 401, "revoked");
    let again = delete(format!("/api-keys/{key_id}")).await;
    assert_eq!(again.0, 404, "{again:?}");

    // Bob's key revoked: his API key acts for nobody.
    let revoked = delete(format!("/admin/authorized-keys/{}", bob.fingerprint())).await;
    assert_eq!(revoked.0, 200, "{revoked:?}");
    let orphan = bearing(&url, &bobs, "GET", "/threads", None, &[]).await;
    says(&orphan, 403, "may not node.read");
    served.task.abort();
}

/// Every file under `dir`.
fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut files = Vec::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(at) = stack.pop() {
        for entry in std::fs::read_dir(&at).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else {
                files.push(path);
            }
        }
    }
    files
}

/// Hostile bodies: a batch whose last object crosses the quota stores
/// none of it; a 100 MB body is refused 413 at the default limit and the
/// node serves on; an envelope sealed to another node's box key opens
/// nowhere, and nothing runs.
#[tokio::test]
async fn a_batch_crossing_the_quota_a_100_mb_body_and_another_nodes_envelope_are_refused_whole() {
    for stores in all_stores("hostile bodies") {
        let dir = tempfile::tempdir().unwrap();
        let runner = Runner {
            program: "/nonexistent/rye".into(),
            env: Vec::new(),
            timeout: Duration::from_secs(5),
            keep_hosts: rye_node::run::WORKER_IDLE,
        };
        let mut settings = stores.settings(&dir.path().join("node"), runner);
        settings.max_user_storage_bytes = 1 << 20;
        let served = serve_with(settings).await;
        let fp = served.node.fingerprint().to_owned();
        let to = (served.url.as_str(), fp.as_str());
        let alice = served.key("alice", &["*"]).await;

        // 300 KiB, then 300 KiB more, then 600 KiB: the third crosses 1 MiB.
        let blobs: Vec<Vec<u8>> = [300 << 10, 300 << 10, 600 << 10]
            .iter()
            .enumerate()
            .map(|(i, n)| vec![i as u8 + 1; *n])
            .collect();
        let entries: Vec<Value> = blobs
            .iter()
            .map(|b| json!({"hash": rye_cas::ContentHash::of(b).hex(), "kind": "blob", "data": b64(b)}))
            .collect();
        let hashes: Vec<String> = blobs
            .iter()
            .map(|b| rye_cas::ContentHash::of(b).hex())
            .collect();
        let (status, answer) = fresh(
            to,
            &alice,
            "POST",
            "/objects/put",
            &json!({"entries": entries}),
        )
        .await;
        assert_eq!(status, 507, "{answer}");
        let (_, has) = fresh(
            to,
            &alice,
            "POST",
            "/objects/has",
            &json!({"hashes": hashes}),
        )
        .await;
        assert_eq!(
            has["missing"].as_array().unwrap().len(),
            3,
            "nothing half-stored: {has}"
        );
        let (status, answer) = fresh(
            to,
            &alice,
            "POST",
            "/objects/put",
            &json!({"entries": &entries[..2]}),
        )
        .await;
        assert_eq!(status, 200, "what fits is taken: {answer}");

        // 100 MB, at the default limit of 50 MiB.
        let huge = vec![b'x'; 100_000_000];
        let answer = reqwest::Client::new()
            .post(format!("{}/objects/put", served.url))
            .header("content-type", "application/json")
            .body(huge)
            .send()
            .await;
        match answer {
            Ok(answer) => assert_eq!(answer.status().as_u16(), 413),
            // Refused before the body was read: the node may close the
            // connection while it is still being sent.
            Err(e) => assert!(e.is_request() || e.is_body(), "{e}"),
        }
        let health = reqwest::get(format!("{}/health", served.url))
            .await
            .unwrap();
        assert_eq!(health.status().as_u16(), 200, "the node serves on");

        // Sealed to another node: refused before anything runs.
        let folder = dir.path().join("project");
        project(&folder, 1, "sealed");
        Client::connect(
            &remote(&served.url),
            keypair_copy(&alice),
            &dir.path().join("pins.json"),
        )
        .await
        .unwrap()
        .push(&folder, None, &[], "p")
        .await
        .unwrap();
        let elsewhere = rye_seal::BoxKey::generate();
        let vars = std::collections::BTreeMap::from([("TOKEN".to_owned(), "s3cret".to_owned())]);
        let envelope = rye_seal::seal(&elsewhere.public_bytes(), &vars).unwrap();
        let (status, answer) = fresh(
            to,
            &alice,
            "POST",
            "/execute",
            &json!({"item_id": "tool:demo/x", "project_path": "p", "secret_envelope": envelope}),
        )
        .await;
        assert_eq!(status, 400, "{answer}");
        assert!(
            answer["error"]
                .as_str()
                .unwrap()
                .contains("secret_envelope"),
            "{answer}"
        );
        let (_, threads) = fresh(to, &alice, "GET", "/threads", &json!({})).await;
        assert_eq!(threads["threads"], json!([]), "nothing ran: {threads}");
        served.task.abort();
    }
}
