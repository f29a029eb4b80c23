//! Envelopes sealed and opened here, tampered with, over their limits,
//! and sealed and opened by Python's `cryptography` package, an
//! implementation of the same primitives apart from this one.

use super::*;

fn vars(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

#[test]
fn an_envelope_opens_only_for_its_node_and_only_as_sealed() {
    let node = BoxKey::generate();
    let sealed = seal(
        &node.public_bytes(),
        &vars(&[("API_TOKEN", "s3cret"), ("PATH", "/evil"), ("AWS_KEY", "x")]),
    )
    .unwrap();
    let opened = node.open(&sealed).unwrap();
    assert_eq!(opened.vars, vars(&[("API_TOKEN", "s3cret")]));
    assert_eq!(opened.skipped, ["AWS_KEY", "PATH"]);

    let other = BoxKey::generate();
    assert!(matches!(
        other.open(&sealed),
        Err(SealError::OtherRecipient(..))
    ));
    // Claiming the other node as recipient does not make it open there.
    let mut readdressed = sealed.clone();
    let theirs = format!("fp:{}", other.fingerprint());
    readdressed["recipient"] = json!(theirs);
    readdressed["aad_fields"]["recipient"] = json!(theirs);
    assert_eq!(other.open(&readdressed), Err(SealError::DoesNotOpen));

    let mut flipped = sealed.clone();
    let mut bytes = URL_SAFE_NO_PAD
        .decode(flipped["ciphertext"].as_str().unwrap())
        .unwrap();
    bytes[0] ^= 1;
    flipped["ciphertext"] = json!(URL_SAFE_NO_PAD.encode(bytes));
    assert_eq!(node.open(&flipped), Err(SealError::DoesNotOpen));
    let mut kind = sealed.clone();
    kind["aad_fields"]["kind"] = json!("other/v1");
    assert!(matches!(node.open(&kind), Err(SealError::Malformed(_))));
    for field in ["version", "enc", "ciphertext", "aad_fields", "recipient"] {
        let mut missing = sealed.clone();
        missing.as_object_mut().unwrap().remove(field);
        assert!(node.open(&missing).is_err(), "{field}");
    }
}

#[test]
fn limits_hold_on_both_sides() {
    let node = BoxKey::generate();
    let too_many: BTreeMap<String, String> = (0..=MAX_VARS)
        .map(|i| (format!("V{i}"), "x".to_owned()))
        .collect();
    assert!(matches!(
        seal(&node.public_bytes(), &too_many),
        Err(SealError::Limit(_))
    ));
    let long = "x".repeat(MAX_VALUE + 1);
    assert!(seal(&node.public_bytes(), &vars(&[("LONG", &long)])).is_err());
    assert!(seal(&node.public_bytes(), &vars(&[("NUL", "a\0b")])).is_err());
    assert_eq!(name_allowed("GOOD_1"), Ok(()));
    for bad in ["1BAD", "with-dash", "", "LD_PRELOAD", "RYE_INTERNAL_X", "é"] {
        assert!(name_allowed(bad).is_err(), "{bad}");
    }
}

#[test]
fn a_box_key_is_kept_private_and_never_overwritten() {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = tempfile::tempdir().unwrap();
    let made = BoxKey::load_or_create(dir.path()).unwrap();
    let again = BoxKey::load_or_create(dir.path()).unwrap();
    assert_eq!(made.public_bytes(), again.public_bytes());
    let mode = std::fs::metadata(dir.path().join("box_key.pem"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
    assert_eq!(read_wire(&made.wire()).unwrap(), made.public_bytes());
    std::fs::write(
        dir.path().join("box_pub.pem"),
        URL_SAFE_NO_PAD.encode(BoxKey::generate().public_bytes()),
    )
    .unwrap();
    assert!(matches!(
        BoxKey::load_or_create(dir.path()),
        Err(SealError::Key(..))
    ));
}

/// A Python with the `cryptography` package: `RYE_TEST_MCP_PYTHON` (the
/// test environment `.ci/run` makes; `mcp` pulls it in), else `python3`.
fn python() -> Option<String> {
    let python = std::env::var("RYE_TEST_MCP_PYTHON").unwrap_or_else(|_| "python3".into());
    let has = std::process::Command::new(&python)
        .args(["-c", "import cryptography"])
        .output()
        .is_ok_and(|o| o.status.success());
    has.then_some(python)
}

const PYTHON: &str = r#"
import base64, json, sys
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

def b64d(text):
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))

def canonical(value):
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()

def key(shared):
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=b"execution-secrets/v1").derive(shared)

raw = lambda k: k.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
mode = sys.argv[1]
if mode == "seal":
    recipient = X25519PublicKey.from_public_bytes(b64d(sys.argv[2]))
    fp = "fp:" + __import__("hashlib").sha256(raw(recipient)).hexdigest()[:16]
    ephemeral = X25519PrivateKey.generate()
    aad = {"kind": "execution-secrets/v1", "recipient": fp}
    sealed = ChaCha20Poly1305(key(ephemeral.exchange(recipient))).encrypt(
        b"\0" * 12, canonical(json.loads(sys.argv[3])), canonical(aad))
    print(json.dumps({"version": 1, "recipient": fp,
                      "enc": base64.urlsafe_b64encode(raw(ephemeral.public_key())).decode(),
                      "ciphertext": base64.urlsafe_b64encode(sealed).decode(),
                      "aad_fields": aad}))
else:
    node = X25519PrivateKey.from_private_bytes(b64d(sys.argv[2]))
    envelope = json.loads(sys.stdin.read())
    shared = node.exchange(X25519PublicKey.from_public_bytes(b64d(envelope["enc"])))
    plain = ChaCha20Poly1305(key(shared)).decrypt(
        b"\0" * 12, b64d(envelope["ciphertext"]), canonical(envelope["aad_fields"]))
    print(plain.decode())
"#;

#[test]
fn envelopes_cross_to_and_from_python_cryptography() {
    let Some(python) = python() else {
        if std::env::var("CI").is_ok_and(|v| v == "true") {
            panic!("no Python with the cryptography package under CI");
        }
        eprintln!("SKIPPED envelopes through Python: no cryptography package");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let node = BoxKey::load_or_create(dir.path()).unwrap();
    let public = std::fs::read_to_string(dir.path().join("box_pub.pem")).unwrap();
    let secrets = json!({"API_TOKEN": "tok\u{e9}n \"q\"", "DB_URL": "postgres://u:p@h/d"});

    // Sealed by Python (padded base64url, as Python writes it), opened here.
    let out = std::process::Command::new(&python)
        .args(["-c", PYTHON, "seal", &public])
        .arg(secrets.to_string())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let envelope: Value = serde_json::from_slice(&out.stdout).unwrap();
    let opened = node.open(&envelope).unwrap();
    assert_eq!(
        opened.vars,
        vars(&[
            ("API_TOKEN", "tok\u{e9}n \"q\""),
            ("DB_URL", "postgres://u:p@h/d")
        ])
    );

    // Sealed here, opened by Python with the node's private key: the
    // plaintext is the canonical JSON Python itself would write.
    let sealed = seal(
        &node.public_bytes(),
        &vars(&[
            ("API_TOKEN", "tok\u{e9}n \"q\""),
            ("DB_URL", "postgres://u:p@h/d"),
        ]),
    )
    .unwrap();
    let private = std::fs::read_to_string(dir.path().join("box_key.pem")).unwrap();
    let mut child = std::process::Command::new(&python)
        .args(["-c", PYTHON, "open", &private])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write as _;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(sealed.to_string().as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8(out.stdout).unwrap().trim(),
        r#"{"API_TOKEN":"tok\u00e9n \"q\"","DB_URL":"postgres://u:p@h/d"}"#
    );
}
