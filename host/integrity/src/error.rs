use std::path::PathBuf;

/// Why a file's integrity could not be established or a key used. Errors
/// about a file's content do not name the file; callers add it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IntegrityError {
    #[error("unsigned: the file has no signature line (sign it with `rye sign`)")]
    Unsigned,

    #[error("unsigned: no detached signature {} beside the component (sign it with `rye sign`)", path.display())]
    NoDetachedSignature { path: PathBuf },

    #[error(
        "content modified since signing: the signature covers hash {}…, the content now hashes to {}…",
        &expected[..16],
        &actual[..16]
    )]
    Modified { expected: String, actual: String },

    #[error(
        "untrusted key: signed by {fingerprint}, which no trust store entry vouches for (trusted: {}); \
         trust the key with `rye keys trust`",
        if trusted.is_empty() { "none".to_owned() } else { trusted.join(", ") }
    )]
    Untrusted {
        fingerprint: String,
        trusted: Vec<String>,
    },

    #[error(
        "signature verification failed: the signature does not match the content with trusted key {fingerprint}"
    )]
    BadSignature { fingerprint: String },

    #[error("stale lockfile: {0}")]
    StaleLock(String),

    #[error("{0}")]
    Escape(String),

    #[error("malformed signature line: {0}")]
    Malformed(String),

    #[error("no signature format for {kind} files ending in {extension:?}")]
    NoFormat { kind: String, extension: String },

    #[error("no <directive …>…</directive> block, which the original signature rule covers")]
    NoDirectiveBlock,

    #[error("not UTF-8 text, so it cannot hold a signature line")]
    NotText,

    #[error("no signing key in {}: create one with `rye keys generate`", dir.display())]
    NoKeys { dir: PathBuf },

    #[error("{} already exists; keys are never overwritten", path.display())]
    KeyExists { path: PathBuf },

    #[error("bad key: {0}")]
    Key(String),

    #[error("{}: {message}", path.display())]
    Io { path: PathBuf, message: String },
}

impl IntegrityError {
    pub(crate) fn io(path: &std::path::Path, error: std::io::Error) -> Self {
        Self::Io {
            path: path.to_owned(),
            message: error.to_string(),
        }
    }

    /// Whether the file carries no signature at all.
    pub fn is_unsigned(&self) -> bool {
        matches!(self, Self::Unsigned | Self::NoDetachedSignature { .. })
    }

    /// A short name of the failure, for results and reports.
    pub fn code(&self) -> &'static str {
        match self {
            Self::Unsigned | Self::NoDetachedSignature { .. } => "unsigned",
            Self::Modified { .. } => "modified",
            Self::Untrusted { .. } => "untrusted",
            Self::BadSignature { .. } => "bad_signature",
            Self::Malformed(_) => "malformed",
            Self::StaleLock(_) => "stale_lock",
            Self::Escape(_) => "escape",
            Self::NoFormat { .. } => "no_format",
            Self::NoDirectiveBlock => "no_directive_block",
            Self::NotText => "not_text",
            Self::NoKeys { .. } => "no_keys",
            Self::KeyExists { .. } => "key_exists",
            Self::Key(_) => "bad_key",
            Self::Io { .. } => "io",
        }
    }
}
