//! The trust store: which public keys may sign items.
//!
//! Keys come from three places: keys built into the host (the system
//! space's own key), keys the host is given directly (a CI job's), and
//! trusted-key TOML files at `.ai/config/keys/trusted/<fingerprint>.toml`
//! in the project, user and system spaces. A file counts only when
//!
//! - its PEM's fingerprint is the one it declares and its file name,
//! - it carries a valid signature line, and
//! - its signer is trusted: itself (self-signed) in the user or system
//!   space, or another key the store trusts. A project-space file must be
//!   signed by a key trusted outside the project, so a cloned repository
//!   can never vouch for its own keys. A cycle of keys signing each other
//!   with no trusted root is rejected.
//!
//! Every file left out is reported by [`TrustStore::ignored`] with why.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use rye_space::{ItemKind, Space, shorten};
use serde::Deserialize;
use sha2::{Digest, Sha256};

use crate::{Keypair, PublicKey, find_signature, format_for, hashed_text, sign_text};

/// How much of why a trusted-key file was left out is kept: a parse
/// error may quote the file, which can be any size.
const ECHOED_REASON: usize = 500;

/// The largest trusted-key file read.
const MAX_KEY_FILE: u64 = 64 << 10;

/// Where trusted-key files live under a space's `.ai/`.
pub const TRUSTED_DIR: &str = "config/keys/trusted";

/// Where a trusted key came from; as JSON `{"kind": "builtin"}`,
/// `{"kind": "given"}` or `{"kind": "file", "space": …, "path": …}`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum KeySource {
    /// Built into the host.
    Builtin,
    /// Given to the host directly (configuration, command line).
    Given,
    /// A trusted-key file in a space.
    File { space: Space, path: PathBuf },
}

impl KeySource {
    fn in_project(&self) -> bool {
        matches!(
            self,
            KeySource::File {
                space: Space::Project,
                ..
            }
        )
    }
}

/// A key the store trusts.
#[derive(Debug, Clone)]
pub struct TrustedKey {
    pub key: PublicKey,
    pub owner: String,
    pub source: KeySource,
}

/// The keys trusted for one set of spaces.
#[derive(Debug, Clone, Default)]
pub struct TrustStore {
    keys: BTreeMap<String, TrustedKey>,
    ignored: Vec<(PathBuf, String)>,
    id: [u8; 32],
}

impl TrustStore {
    pub fn builder() -> TrustStoreBuilder {
        TrustStoreBuilder::default()
    }

    pub fn get(&self, fingerprint: &str) -> Option<&TrustedKey> {
        self.keys.get(fingerprint)
    }

    /// The trusted fingerprints, sorted.
    pub fn fingerprints(&self) -> Vec<String> {
        self.keys.keys().cloned().collect()
    }

    pub fn keys(&self) -> impl Iterator<Item = &TrustedKey> {
        self.keys.values()
    }

    /// Trusted-key files left out, with the reason.
    pub fn ignored(&self) -> &[(PathBuf, String)] {
        &self.ignored
    }

    /// A digest of what the store trusts: equal ids, equal verdicts.
    pub fn id(&self) -> [u8; 32] {
        self.id
    }
}

/// Collects the sources of a [`TrustStore`].
#[derive(Default)]
pub struct TrustStoreBuilder {
    roots: Vec<TrustedKey>,
    dirs: Vec<(Space, PathBuf)>,
}

impl TrustStoreBuilder {
    /// A key trusted because the host was given it.
    pub fn anchor(mut self, key: PublicKey, owner: &str) -> Self {
        self.roots.push(TrustedKey {
            key,
            owner: owner.to_owned(),
            source: KeySource::Given,
        });
        self
    }

    /// A key built into the host.
    pub fn builtin(mut self, key: PublicKey, owner: &str) -> Self {
        self.roots.push(TrustedKey {
            key,
            owner: owner.to_owned(),
            source: KeySource::Builtin,
        });
        self
    }

    /// The trusted-key folder of a space (`<.ai>/config/keys/trusted`).
    /// Add them in precedence order: project, user, system.
    pub fn dir(mut self, space: Space, dir: impl Into<PathBuf>) -> Self {
        self.dirs.push((space, dir.into()));
        self
    }

    pub fn build(self) -> TrustStore {
        let mut ignored = Vec::new();
        let mut candidates = Vec::new();
        for (space, dir) in &self.dirs {
            let Ok(entries) = std::fs::read_dir(dir) else {
                continue;
            };
            let mut paths: Vec<PathBuf> = entries
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|e| e == "toml"))
                .collect();
            paths.sort();
            for path in paths {
                match Candidate::read(*space, &path) {
                    Ok(candidate) => candidates.push(candidate),
                    Err(reason) => {
                        ignored.push((path, shorten(&reason, ECHOED_REASON).into_owned()))
                    }
                }
            }
        }
        let resolver = Resolver {
            roots: &self.roots,
            candidates: &candidates,
        };
        let mut keys = BTreeMap::new();
        for root in &self.roots {
            keys.entry(root.key.fingerprint().to_owned())
                .or_insert_with(|| root.clone());
        }
        for candidate in &candidates {
            match resolver.check(candidate, &mut Vec::new()) {
                Ok(key) => {
                    keys.entry(candidate.fingerprint().to_owned())
                        .or_insert(key);
                }
                Err(reason) => ignored.push((
                    candidate.path.clone(),
                    shorten(&reason, ECHOED_REASON).into_owned(),
                )),
            }
        }
        let mut digest = Sha256::new();
        for (fp, key) in &keys {
            digest.update(fp.as_bytes());
            digest.update([0]);
            digest.update(key.owner.as_bytes());
            digest.update([0]);
            digest.update(format!("{:?}", key.source).as_bytes());
            digest.update([0]);
        }
        TrustStore {
            keys,
            ignored,
            id: digest.finalize().into(),
        }
    }
}

#[derive(Deserialize)]
struct KeyFile {
    fingerprint: String,
    #[serde(default)]
    owner: String,
    public_key: PemTable,
}

#[derive(Deserialize)]
struct PemTable {
    pem: String,
}

/// A trusted-key file, read but not yet judged.
struct Candidate {
    space: Space,
    path: PathBuf,
    key: PublicKey,
    owner: String,
    /// The file's signature; `None` when unsigned, the reason when its
    /// line cannot be read.
    signed: Result<Option<FileSignature>, String>,
}

#[derive(Clone)]
struct FileSignature {
    signer: String,
    /// The hash the signature claims, and the hash of the content.
    claimed: String,
    actual: String,
    signature: [u8; 64],
}

impl Candidate {
    fn fingerprint(&self) -> &str {
        self.key.fingerprint()
    }

    fn read(space: Space, path: &Path) -> Result<Self, String> {
        let size = std::fs::metadata(path)
            .map_err(|e| format!("unreadable: {e}"))?
            .len();
        if size > MAX_KEY_FILE {
            return Err(format!(
                "{size} bytes: a trusted-key file is a few hundred bytes, and at most {MAX_KEY_FILE}"
            ));
        }
        let text = std::fs::read_to_string(path).map_err(|e| format!("unreadable: {e}"))?;
        let body: String = text
            .split_inclusive('\n')
            .filter(|line| !line.starts_with("# rye:signed:"))
            .collect();
        let file: KeyFile =
            toml::from_str(&body).map_err(|e| format!("not a trusted-key TOML: {e}"))?;
        let key = PublicKey::from_pem(&file.public_key.pem).map_err(|e| e.to_string())?;
        if key.fingerprint() != file.fingerprint {
            return Err(format!(
                "its PEM's fingerprint is {}, not the declared {}",
                key.fingerprint(),
                file.fingerprint
            ));
        }
        let stem = path
            .file_stem()
            .and_then(|s| s.to_str())
            .unwrap_or_default();
        if stem != key.fingerprint() {
            return Err(format!(
                "the file name must be its fingerprint ({}.toml)",
                key.fingerprint()
            ));
        }
        let format = format_for(ItemKind::Config, "key.toml", &[]).expect("config TOML format");
        let signed = find_signature(&text, &format)
            .map_err(|e| e.to_string())
            .and_then(|located| {
                let Some(located) = located else {
                    return Ok(None);
                };
                let (hashed, _) = hashed_text(
                    &text,
                    ItemKind::Config,
                    Some(&located),
                    located.signature.rule,
                )
                .map_err(|e| e.to_string())?;
                let sig = located.signature;
                Ok(Some(FileSignature {
                    signer: sig.fingerprint,
                    claimed: sig.hash,
                    actual: hex::encode(Sha256::digest(hashed.as_bytes())),
                    signature: sig.signature,
                }))
            });
        Ok(Self {
            space,
            path: path.to_owned(),
            key,
            owner: file.owner,
            signed,
        })
    }
}

struct Resolver<'a> {
    roots: &'a [TrustedKey],
    candidates: &'a [Candidate],
}

impl Resolver<'_> {
    /// The trusted key with fingerprint `fp`, judged from outside the
    /// project when `outside_project`.
    fn resolve(
        &self,
        fp: &str,
        visiting: &mut Vec<String>,
        outside_project: bool,
    ) -> Result<TrustedKey, String> {
        if let Some(root) = self.roots.iter().find(|r| r.key.fingerprint() == fp) {
            return Ok(root.clone());
        }
        let mut reasons = Vec::new();
        for candidate in self.candidates.iter().filter(|c| c.fingerprint() == fp) {
            if outside_project && candidate.space == Space::Project {
                continue;
            }
            match self.check(candidate, visiting) {
                Ok(key) => return Ok(key),
                Err(reason) => reasons.push(format!("{}: {reason}", candidate.path.display())),
            }
        }
        Err(if reasons.is_empty() {
            "no trust entry for it".into()
        } else {
            reasons.join("; ")
        })
    }

    fn check(
        &self,
        candidate: &Candidate,
        visiting: &mut Vec<String>,
    ) -> Result<TrustedKey, String> {
        let fp = candidate.fingerprint().to_owned();
        let Some(FileSignature {
            signer,
            claimed,
            actual,
            signature,
        }) = candidate.signed.clone()?
        else {
            return Err("unsigned: a trusted-key file must be signed".into());
        };
        if claimed != actual {
            return Err(format!(
                "content modified since signing (signed {}…, now {}…)",
                &claimed[..16],
                &actual[..16]
            ));
        }
        let signer_key = if signer == fp {
            if candidate.space == Space::Project {
                return Err(
                    "self-signed in the project space: a project cannot vouch for its own keys; \
                     sign the file with a key trusted in the user space (`rye keys trust --space project`)"
                        .into(),
                );
            }
            candidate.key.clone()
        } else if visiting.contains(&signer) {
            let mut cycle = visiting.clone();
            cycle.push(fp.clone());
            cycle.push(signer.clone());
            return Err(format!(
                "trust cycle with no trusted root: {}",
                cycle.join(" -> ")
            ));
        } else {
            visiting.push(fp.clone());
            let outside = candidate.space == Space::Project;
            let found = self.resolve(&signer, visiting, outside);
            visiting.pop();
            let found =
                found.map_err(|why| format!("signed by {signer}, which is not trusted ({why})"))?;
            if outside && found.source.in_project() {
                return Err(format!(
                    "signed by {signer}, which is trusted only by the project"
                ));
            }
            found.key
        };
        if !signer_key.verifies(&claimed, &signature) {
            return Err(format!("the signature by {signer} does not verify"));
        }
        Ok(TrustedKey {
            key: candidate.key.clone(),
            owner: candidate.owner.clone(),
            source: KeySource::File {
                space: candidate.space,
                path: candidate.path.clone(),
            },
        })
    }
}

/// A public key given as PEM text or as a trusted-key TOML (whose PEM must
/// match its declared fingerprint), with the TOML's owner.
pub fn read_public_key(text: &str) -> Result<(PublicKey, Option<String>), crate::IntegrityError> {
    if !text.contains("[public_key]") {
        return Ok((PublicKey::from_pem(text)?, None));
    }
    let body: String = text
        .split_inclusive('\n')
        .filter(|line| !line.starts_with("# rye:signed:"))
        .collect();
    let file: KeyFile = toml::from_str(&body)
        .map_err(|e| crate::IntegrityError::Key(format!("not a trusted-key TOML: {e}")))?;
    let key = PublicKey::from_pem(&file.public_key.pem)?;
    if key.fingerprint() != file.fingerprint {
        return Err(crate::IntegrityError::Key(format!(
            "its PEM's fingerprint is {}, not the declared {}",
            key.fingerprint(),
            file.fingerprint
        )));
    }
    Ok((key, Some(file.owner).filter(|o| !o.is_empty())))
}

/// A trusted-key TOML for `key`, signed by `signer`, in the layout the
/// original system writes.
pub fn trusted_key_toml(
    key: &PublicKey,
    owner: &str,
    signer: &Keypair,
    now: SystemTime,
) -> Result<String, crate::IntegrityError> {
    let text = format!(
        "version = \"1.0.0\"\ncategory = \"keys/trusted\"\nfingerprint = \"{}\"\nowner = {}\nattestation = \"\"\n\n[public_key]\npem = \"\"\"\n{}\"\"\"\n",
        key.fingerprint(),
        toml::Value::String(owner.to_owned()),
        key.pem(),
    );
    let format = format_for(ItemKind::Config, "key.toml", &[])?;
    sign_text(&text, &format, signer, now)
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Spaces {
        _tmp: tempfile::TempDir,
        project: PathBuf,
        user: PathBuf,
    }

    fn spaces() -> Spaces {
        let tmp = tempfile::tempdir().unwrap();
        let project = tmp.path().join("project");
        let user = tmp.path().join("user");
        std::fs::create_dir_all(&project).unwrap();
        std::fs::create_dir_all(&user).unwrap();
        Spaces {
            _tmp: tmp,
            project,
            user,
        }
    }

    fn put(dir: &Path, key: &PublicKey, signer: &Keypair) -> PathBuf {
        let path = dir.join(format!("{}.toml", key.fingerprint()));
        let text = trusted_key_toml(key, "local", signer, SystemTime::now()).unwrap();
        std::fs::write(&path, text).unwrap();
        path
    }

    fn store(s: &Spaces) -> TrustStore {
        TrustStore::builder()
            .dir(Space::Project, &s.project)
            .dir(Space::User, &s.user)
            .build()
    }

    #[test]
    fn self_signed_user_keys_and_the_keys_they_sign_are_trusted() {
        let s = spaces();
        let me = Keypair::generate().unwrap();
        let colleague = Keypair::generate().unwrap();
        put(&s.user, me.public(), &me);
        put(&s.user, colleague.public(), &me);
        let trust = store(&s);
        assert!(trust.get(me.fingerprint()).is_some());
        assert!(trust.get(colleague.fingerprint()).is_some());
        assert!(trust.ignored().is_empty(), "{:?}", trust.ignored());
    }

    #[test]
    fn a_project_cannot_vouch_for_itself() {
        let s = spaces();
        let me = Keypair::generate().unwrap();
        let intruder = Keypair::generate().unwrap();
        let team = Keypair::generate().unwrap();
        put(&s.user, me.public(), &me);
        put(&s.project, intruder.public(), &intruder);
        put(&s.project, team.public(), &me);
        let trust = store(&s);
        assert!(trust.get(intruder.fingerprint()).is_none());
        assert!(trust.get(team.fingerprint()).is_some());
        assert!(trust.ignored()[0].1.contains("project cannot vouch"));
    }

    #[test]
    fn mismatched_pem_unsigned_files_and_cycles_are_ignored() {
        let s = spaces();
        let a = Keypair::generate().unwrap();
        let b = Keypair::generate().unwrap();
        // a and b sign each other; neither is a root.
        put(&s.user, a.public(), &b);
        put(&s.user, b.public(), &a);
        // A file whose PEM is another key's.
        let c = Keypair::generate().unwrap();
        let lying = s.user.join(format!("{}.toml", c.fingerprint()));
        let text = trusted_key_toml(c.public(), "x", &c, SystemTime::now())
            .unwrap()
            .replace(c.public().pem(), a.public().pem());
        std::fs::write(&lying, text).unwrap();
        // An unsigned file.
        let d = Keypair::generate().unwrap();
        let unsigned = trusted_key_toml(d.public(), "x", &d, SystemTime::now()).unwrap();
        let unsigned: String = unsigned.lines().skip(1).map(|l| format!("{l}\n")).collect();
        std::fs::write(s.user.join(format!("{}.toml", d.fingerprint())), unsigned).unwrap();

        let trust = store(&s);
        assert!(
            trust.fingerprints().is_empty(),
            "{:?}",
            trust.fingerprints()
        );
        let reasons: Vec<&str> = trust.ignored().iter().map(|(_, r)| r.as_str()).collect();
        assert!(
            reasons.iter().any(|r| r.contains("trust cycle")),
            "{reasons:?}"
        );
        assert!(
            reasons.iter().any(|r| r.contains("not the declared")),
            "{reasons:?}"
        );
        assert!(
            reasons.iter().any(|r| r.contains("unsigned")),
            "{reasons:?}"
        );
    }

    #[test]
    fn given_keys_root_the_store_and_change_its_id() {
        let s = spaces();
        let ci = Keypair::generate().unwrap();
        let team = Keypair::generate().unwrap();
        put(&s.user, team.public(), &ci);
        let without = store(&s);
        assert!(without.get(team.fingerprint()).is_none());
        let with = TrustStore::builder()
            .anchor(ci.public().clone(), "ci")
            .dir(Space::User, &s.user)
            .build();
        assert!(with.get(team.fingerprint()).is_some());
        assert_ne!(with.id(), without.id());
    }
}
