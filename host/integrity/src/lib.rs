//! Integrity of Rye items: who signed a file and whether it changed since.
//!
//! A signed item carries one **signature line** in its own comment syntax
//! (first line, or second after a `#!/` shebang for script tools):
//!
//! ```text
//! # rye:signed:v2:2026-11-22T10:00:00Z:<sha256 hex>:<base64url Ed25519 sig>:<key fingerprint>
//! ```
//!
//! The signed message is the 64-character hex SHA-256 of the file's hashed
//! text; the fingerprint is the first 16 hex characters of the SHA-256 of
//! the signer's public key PEM. Two hashing rules exist, told apart by the
//! marker after `rye:signed:`:
//!
//! - **`v2`** (written here): the whole file but the signature line itself,
//!   shebang included. Everything the host reads from the file is covered.
//! - **none** (the original system's lines, verified for compatibility):
//!   tools and config hash the file without the signature line and without
//!   a shebang; directives only their `<directive>` block; knowledge with
//!   `---` front matter only the body after it. [`Verified::uncovered`]
//!   names the part such a signature leaves open.
//!
//! WebAssembly components cannot hold a comment: they are signed by a
//! detached file beside them (`<name>.wasm.sig`) holding one signature line
//! over the SHA-256 of the component's bytes.
//!
//! Keys are trusted through a [`TrustStore`] built from trusted-key TOML
//! files in the spaces and from keys the host is given directly.

mod content;
mod error;
mod format;
mod keys;
mod line;
mod sign;
mod time;
mod trust;
mod verify;

pub use content::hashed_text;
pub use error::IntegrityError;
pub use format::{DETACHED_EXTENSION, SignatureFormat, detached_path, format_for};
pub use keys::{Keypair, PublicKey, fingerprint_of_pem, normalize_pem};
pub use line::{Located, Rule, Signature, find_signature};
pub use sign::{sign_detached, sign_text, strip_signature};
pub use time::{is_utc_timestamp, parse_utc_timestamp, utc_timestamp};
pub use trust::{
    KeySource, TRUSTED_DIR, TrustStore, TrustStoreBuilder, TrustedKey, read_public_key,
    trusted_key_toml,
};
pub use verify::{Verified, verify_detached, verify_text};
