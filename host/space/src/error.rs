use std::path::PathBuf;

use crate::{ItemKind, Space};

/// What can go wrong finding items and reading the data that describes
/// them. Every variant names the file or id it is about.
#[derive(Debug, thiserror::Error)]
pub enum SpaceError {
    #[error("invalid {what} {id:?}: {rule}")]
    InvalidId {
        what: &'static str,
        id: String,
        rule: &'static str,
    },

    #[error(transparent)]
    UnknownKind(#[from] crate::kind::UnknownKind),

    #[error(transparent)]
    UnknownSpace(#[from] crate::space::UnknownSpace),

    #[error("{kind} {id:?} not found (searched {})", display_paths(searched))]
    NotFound {
        kind: ItemKind,
        id: String,
        searched: Vec<PathBuf>,
    },

    #[error(
        "{kind} {id:?} is defined by more than one file in the {space} space: {}; keep one",
        display_paths(paths)
    )]
    Ambiguous {
        kind: ItemKind,
        id: String,
        space: Space,
        paths: Vec<PathBuf>,
    },

    #[error("no extractor for {kind} items in any space (expected {expected})")]
    NoExtractor { kind: ItemKind, expected: String },

    #[error("{}: {message}", path.display())]
    Data { path: PathBuf, message: String },

    #[error(
        "{}: a symbolic link out of its space: it leads to {}, outside {}; links may only point within the space",
        path.display(), target.display(), root.display()
    )]
    LinkEscape {
        path: PathBuf,
        target: PathBuf,
        root: PathBuf,
    },

    #[error("{}: is a symbolic link; writes into a space never follow links", path.display())]
    LinkOnWrite { path: PathBuf },

    #[error("{}: already exists; pass force to overwrite it", path.display())]
    Exists { path: PathBuf },

    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

impl SpaceError {
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        SpaceError::Io {
            path: path.into(),
            source,
        }
    }
}

/// Paths as an error message lists them.
pub fn display_paths(paths: &[PathBuf]) -> String {
    paths
        .iter()
        .map(|p| p.display().to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// `text` as an error message may echo it: whole when it is at most `max`
/// bytes, else its first `max` bytes (on a character boundary) and how
/// much was cut. Untrusted text (an id, a file's content quoted by a
/// parser) is never echoed at any length.
pub fn shorten(text: &str, max: usize) -> std::borrow::Cow<'_, str> {
    if text.len() <= max {
        return text.into();
    }
    let end = text.floor_char_boundary(max);
    format!("{}… ({} more bytes cut)", &text[..end], text.len() - end).into()
}

#[cfg(test)]
mod tests {
    #[test]
    fn long_text_is_cut_on_a_character_boundary_saying_how_much() {
        assert_eq!(super::shorten("short", 10), "short");
        assert_eq!(super::shorten("ééé", 3), "é… (4 more bytes cut)");
        assert_eq!(
            super::shorten(&"x".repeat(100_000), 5).len(),
            5 + "… (99995 more bytes cut)".len()
        );
    }
}
