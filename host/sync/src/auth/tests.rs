//! Signed requests, and every way one can be wrong.

use super::*;

struct Keys {
    client: Keypair,
    other: Keypair,
    node: String,
}

fn keys() -> Keys {
    Keys {
        client: Keypair::generate().unwrap(),
        other: Keypair::generate().unwrap(),
        node: "00112233aabbccdd".into(),
    }
}

const NOW: u64 = 1_800_000_000;
const NONCE: &str = "0123456789abcdef0123456789abcdef";

fn request<'a>(body: &'a [u8], query: Option<&'a str>) -> Request<'a> {
    Request {
        method: "post",
        path: "/objects/put",
        query,
        body,
    }
}

fn check(
    k: &Keys,
    headers: &[(&'static str, String)],
    request: &Request<'_>,
    now: u64,
) -> Result<Verified, AuthError> {
    let client = k.client.public().clone();
    let fingerprint = k.client.fingerprint().to_owned();
    verify(
        |name| {
            headers
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| v.as_str())
        },
        request,
        &k.node,
        now,
        move |fp| (fp == fingerprint).then(|| client.clone()),
    )
}

#[test]
fn a_signed_request_verifies_and_names_its_nonce() {
    let k = keys();
    let req = request(b"{\"hashes\": []}", None);
    let headers = sign(&k.client, &req, &k.node, NOW, NONCE);
    let verified = check(&k, &headers, &req, NOW + 299).unwrap();
    assert_eq!(verified.fingerprint, k.client.fingerprint());
    assert_eq!(verified.timestamp, NOW);
    assert!(
        verified
            .nonce_key
            .starts_with(&format!("{}:", k.client.fingerprint()))
    );
    assert_eq!(verified.nonce_key.len(), k.client.fingerprint().len() + 33);
}

#[test]
fn the_string_to_sign_is_the_specs() {
    let req = Request {
        method: "get",
        path: "/threads",
        query: Some("limit=20&project_path=%2Fw%2Fp%20q"),
        body: b"",
    };
    assert_eq!(
        string_to_sign(&req, "1800000000", NONCE, "fp:00112233aabbccdd"),
        format!(
            "ryeos-request-v1\nGET\n/threads?limit=20&project_path=%2Fw%2Fp+q\n{}\n1800000000\n{NONCE}\nfp:00112233aabbccdd",
            ContentHash::of(b"").hex()
        )
    );
}

#[test]
fn a_query_signs_the_same_however_it_is_spelled() {
    let k = keys();
    let signed = Request {
        method: "GET",
        path: "/history",
        query: Some("project_path=/w/p&limit=5"),
        body: b"",
    };
    let headers = sign(&k.client, &signed, &k.node, NOW, NONCE);
    let respelled = Request {
        query: Some("limit=5&project_path=%2Fw%2Fp"),
        ..signed
    };
    check(&k, &headers, &respelled, NOW).unwrap();
    let changed = Request {
        query: Some("limit=6&project_path=%2Fw%2Fp"),
        ..signed
    };
    assert_eq!(
        check(&k, &headers, &changed, NOW),
        Err(AuthError::BadSignature)
    );
}

#[test]
fn anything_changed_and_the_signature_fails() {
    let k = keys();
    let req = request(b"body", None);
    let headers = sign(&k.client, &req, &k.node, NOW, NONCE);
    assert_eq!(
        check(&k, &headers, &request(b"bodY", None), NOW),
        Err(AuthError::BadSignature)
    );
    let get = Request {
        method: "GET",
        ..req
    };
    assert_eq!(check(&k, &headers, &get, NOW), Err(AuthError::BadSignature));
    let elsewhere = Request {
        path: "/objects/get",
        ..req
    };
    assert_eq!(
        check(&k, &headers, &elsewhere, NOW),
        Err(AuthError::BadSignature)
    );
    // For another node.
    let mut other_node = keys();
    other_node.client = Keypair::from_private_pem(&k.client.private_pem().unwrap()).unwrap();
    other_node.node = "ffffffffffffffff".into();
    assert_eq!(
        check(&other_node, &headers, &req, NOW),
        Err(AuthError::BadSignature)
    );
    // Another nonce or time in the headers than was signed.
    let mut swapped = headers.clone();
    swapped[2].1 = "f".repeat(32);
    assert_eq!(check(&k, &swapped, &req, NOW), Err(AuthError::BadSignature));
    let mut moved = headers.clone();
    moved[1].1 = (NOW + 1).to_string();
    assert_eq!(check(&k, &moved, &req, NOW), Err(AuthError::BadSignature));
}

#[test]
fn forged_stale_and_malformed_requests_are_refused() {
    let k = keys();
    let req = request(b"x", None);
    // Signed by a key the node does not know, naming one it does.
    let mut forged = sign(&k.other, &req, &k.node, NOW, NONCE);
    forged[0].1 = format!("fp:{}", k.client.fingerprint());
    assert_eq!(check(&k, &forged, &req, NOW), Err(AuthError::BadSignature));
    let unknown = sign(&k.other, &req, &k.node, NOW, NONCE);
    assert!(matches!(
        check(&k, &unknown, &req, NOW),
        Err(AuthError::UnknownKey(_))
    ));

    let headers = sign(&k.client, &req, &k.node, NOW, NONCE);
    assert_eq!(
        check(&k, &headers, &req, NOW + 301),
        Err(AuthError::Stale(301))
    );
    assert_eq!(
        check(&k, &headers, &req, NOW - 301),
        Err(AuthError::Stale(301))
    );
    for missing in 0..4 {
        let mut partial = headers.to_vec();
        let (name, _) = partial.remove(missing);
        assert_eq!(
            check(&k, &partial, &req, NOW),
            Err(AuthError::Missing(name))
        );
    }
    let mut bad = headers.clone();
    bad[0].1 = k.client.fingerprint().to_owned();
    assert!(matches!(
        check(&k, &bad, &req, NOW),
        Err(AuthError::Malformed(_))
    ));
    let mut bad = headers.clone();
    bad[1].1 = "soon".into();
    assert!(matches!(
        check(&k, &bad, &req, NOW),
        Err(AuthError::Malformed(_))
    ));
    let mut bad = headers.clone();
    bad[2].1 = "short".into();
    assert!(matches!(
        check(&k, &bad, &req, NOW),
        Err(AuthError::Malformed(_))
    ));
    let mut bad = headers.clone();
    bad[3].1 = "!!!".into();
    assert!(matches!(
        check(&k, &bad, &req, NOW),
        Err(AuthError::Malformed(_))
    ));
}
