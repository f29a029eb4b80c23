use std::path::Path;
use std::time::SystemTime;

/// What identifies a file's bytes without reading them: if every field is
/// unchanged, so is the content. The change time (`ctime`) moves on every
/// write and cannot be set back by user code, so even a write that restores
/// the modification time is noticed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileStamp {
    len: u64,
    modified: Option<SystemTime>,
    #[cfg(unix)]
    changed: (i64, i64),
    #[cfg(unix)]
    inode: (u64, u64),
}

impl FileStamp {
    pub fn of(meta: &std::fs::Metadata) -> Self {
        #[cfg(unix)]
        use std::os::unix::fs::MetadataExt;
        Self {
            len: meta.len(),
            modified: meta.modified().ok(),
            #[cfg(unix)]
            changed: (meta.ctime(), meta.ctime_nsec()),
            #[cfg(unix)]
            inode: (meta.dev(), meta.ino()),
        }
    }

    /// The stamp of the file at `path` (following symlinks).
    pub fn read(path: &Path) -> std::io::Result<Self> {
        std::fs::metadata(path).map(|m| Self::of(&m))
    }
}
