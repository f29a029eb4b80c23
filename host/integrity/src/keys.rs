use std::path::Path;

use ed25519_dalek::pkcs8::spki::der::pem::LineEnding;
use ed25519_dalek::pkcs8::{DecodePrivateKey, DecodePublicKey, EncodePrivateKey, EncodePublicKey};
use ed25519_dalek::{Signer, SigningKey, Verifier, VerifyingKey};
use sha2::{Digest, Sha256};

use crate::IntegrityError;

/// File names of a keypair in its directory.
const PRIVATE_FILE: &str = "private_key.pem";
const PUBLIC_FILE: &str = "public_key.pem";

/// The fingerprint of a public key: the first 16 hex digits of the SHA-256
/// of its PEM text, exactly as given.
pub fn fingerprint_of_pem(pem: &str) -> String {
    hex::encode(&Sha256::digest(pem.as_bytes())[..8])
}

/// A PEM as fingerprints are taken of it: trimmed, one trailing newline.
pub fn normalize_pem(pem: &str) -> String {
    format!("{}\n", pem.trim())
}

/// An Ed25519 public key with its PEM and fingerprint.
#[derive(Clone)]
pub struct PublicKey {
    key: VerifyingKey,
    pem: String,
    fingerprint: String,
}

impl std::fmt::Debug for PublicKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PublicKey({})", self.fingerprint)
    }
}

impl PublicKey {
    /// Reads a SubjectPublicKeyInfo PEM; the fingerprint is taken of the
    /// normalized PEM.
    pub fn from_pem(pem: &str) -> Result<Self, IntegrityError> {
        let pem = normalize_pem(pem);
        let key = VerifyingKey::from_public_key_pem(&pem)
            .map_err(|e| IntegrityError::Key(format!("not an Ed25519 public key PEM: {e}")))?;
        Ok(Self {
            key,
            fingerprint: fingerprint_of_pem(&pem),
            pem,
        })
    }

    pub fn pem(&self) -> &str {
        &self.pem
    }

    pub fn fingerprint(&self) -> &str {
        &self.fingerprint
    }

    /// Whether `signature` signs the hex digest `hash_hex`.
    pub fn verifies(&self, hash_hex: &str, signature: &[u8; 64]) -> bool {
        let signature = ed25519_dalek::Signature::from_bytes(signature);
        self.key.verify(hash_hex.as_bytes(), &signature).is_ok()
    }
}

/// An Ed25519 signing key and its public half.
pub struct Keypair {
    signing: SigningKey,
    public: PublicKey,
}

impl Keypair {
    /// A new key from the operating system's random source.
    pub fn generate() -> Result<Self, IntegrityError> {
        let mut seed = [0u8; 32];
        getrandom::fill(&mut seed)
            .map_err(|e| IntegrityError::Key(format!("no randomness for a new key: {e}")))?;
        let keypair = Self::from_signing(SigningKey::from_bytes(&seed));
        seed.fill(0);
        keypair
    }

    fn from_signing(signing: SigningKey) -> Result<Self, IntegrityError> {
        let pem = signing
            .verifying_key()
            .to_public_key_pem(LineEnding::LF)
            .map_err(|e| IntegrityError::Key(e.to_string()))?;
        let public = PublicKey::from_pem(&pem)?;
        Ok(Self { signing, public })
    }

    /// Reads a PKCS#8 private key PEM.
    pub fn from_private_pem(pem: &str) -> Result<Self, IntegrityError> {
        let signing = SigningKey::from_pkcs8_pem(pem)
            .map_err(|e| IntegrityError::Key(format!("not an Ed25519 PKCS#8 private key: {e}")))?;
        Self::from_signing(signing)
    }

    /// The private key as PKCS#8 PEM.
    pub fn private_pem(&self) -> Result<String, IntegrityError> {
        self.signing
            .to_pkcs8_pem(LineEnding::LF)
            .map(|pem| pem.to_string())
            .map_err(|e| IntegrityError::Key(e.to_string()))
    }

    pub fn public(&self) -> &PublicKey {
        &self.public
    }

    pub fn fingerprint(&self) -> &str {
        self.public.fingerprint()
    }

    /// Signs the hex digest `hash_hex` (the message is the hex text).
    pub fn sign_hash(&self, hash_hex: &str) -> [u8; 64] {
        self.signing.sign(hash_hex.as_bytes()).to_bytes()
    }

    /// Reads the keypair kept in `dir`.
    pub fn load(dir: &Path) -> Result<Self, IntegrityError> {
        let path = dir.join(PRIVATE_FILE);
        let pem = match std::fs::read_to_string(&path) {
            Ok(pem) => pem,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(IntegrityError::NoKeys {
                    dir: dir.to_owned(),
                });
            }
            Err(e) => return Err(IntegrityError::io(&path, e)),
        };
        Self::from_private_pem(&pem).map_err(|e| IntegrityError::Io {
            path,
            message: e.to_string(),
        })
    }

    /// Writes the keypair into `dir` (created with mode 0700): the private
    /// key with mode 0600, the public key 0644. Refuses if either file
    /// exists.
    pub fn save(&self, dir: &Path) -> Result<(), IntegrityError> {
        let private = dir.join(PRIVATE_FILE);
        let public = dir.join(PUBLIC_FILE);
        for path in [&private, &public] {
            if path.exists() {
                return Err(IntegrityError::KeyExists { path: path.clone() });
            }
        }
        std::fs::create_dir_all(dir).map_err(|e| IntegrityError::io(dir, e))?;
        set_mode(dir, 0o700)?;
        write_new(&private, self.private_pem()?.as_bytes(), 0o600)?;
        write_new(&public, self.public.pem().as_bytes(), 0o644)
    }
}

/// Creates `path` (failing if it exists) with `mode` from the start, so the
/// content is never readable by others.
fn write_new(path: &Path, bytes: &[u8], mode: u32) -> Result<(), IntegrityError> {
    use std::io::Write;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, mode);
    let mut file = options.open(path).map_err(|e| match e.kind() {
        std::io::ErrorKind::AlreadyExists => IntegrityError::KeyExists {
            path: path.to_owned(),
        },
        _ => IntegrityError::io(path, e),
    })?;
    file.write_all(bytes)
        .and_then(|()| file.sync_all())
        .map_err(|e| IntegrityError::io(path, e))?;
    set_mode(path, mode)
}

fn set_mode(path: &Path, mode: u32) -> Result<(), IntegrityError> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
            .map_err(|e| IntegrityError::io(path, e))?;
    }
    #[cfg(not(unix))]
    let _ = (path, mode);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_round_trip_through_their_files() {
        let dir = tempfile::tempdir().unwrap();
        let keys = dir.path().join("signing");
        let made = Keypair::generate().unwrap();
        made.save(&keys).unwrap();
        let read = Keypair::load(&keys).unwrap();
        assert_eq!(read.fingerprint(), made.fingerprint());
        let pem = std::fs::read_to_string(keys.join(PUBLIC_FILE)).unwrap();
        assert!(pem.starts_with("-----BEGIN PUBLIC KEY-----\n"));
        assert!(pem.ends_with("-----END PUBLIC KEY-----\n"));
        assert_eq!(fingerprint_of_pem(&pem), made.fingerprint());
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode(&keys.join(PRIVATE_FILE)), 0o600);
            assert_eq!(mode(&keys), 0o700);
        }
        assert!(matches!(
            Keypair::generate().unwrap().save(&keys),
            Err(IntegrityError::KeyExists { .. })
        ));
        assert_eq!(
            Keypair::load(&keys).unwrap().fingerprint(),
            made.fingerprint()
        );
    }

    #[test]
    fn signatures_are_deterministic_and_checked() {
        let keys = Keypair::generate().unwrap();
        let hash = "ab".repeat(32);
        let sig = keys.sign_hash(&hash);
        assert_eq!(sig, keys.sign_hash(&hash));
        assert!(keys.public().verifies(&hash, &sig));
        assert!(!keys.public().verifies(&"cd".repeat(32), &sig));
        let crlf = keys.public().pem().replace('\n', "\r\n");
        assert_eq!(
            PublicKey::from_pem(&format!("  {}  ", keys.public().pem()))
                .unwrap()
                .fingerprint(),
            keys.fingerprint()
        );
        assert!(PublicKey::from_pem(&crlf).is_ok());
    }
}
