use std::path::Path;

/// What identifies a file's bytes without reading them: if every field is
/// unchanged, so is the content. The change time (`ctime`) moves on every
/// write and cannot be set back by user code, so even a write that restores
/// the modification time is noticed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FileStamp {
    len: u64,
    #[cfg(unix)]
    modified: (i64, i64),
    #[cfg(unix)]
    changed: (i64, i64),
    #[cfg(unix)]
    inode: (u64, u64),
    #[cfg(not(unix))]
    modified: Option<std::time::SystemTime>,
}

impl FileStamp {
    pub fn of(meta: &std::fs::Metadata) -> Self {
        #[cfg(unix)]
        {
            use std::os::unix::fs::MetadataExt;
            Self {
                len: meta.size(),
                modified: (meta.mtime(), meta.mtime_nsec()),
                changed: (meta.ctime(), meta.ctime_nsec()),
                inode: (meta.dev(), meta.ino()),
            }
        }
        #[cfg(not(unix))]
        {
            Self {
                len: meta.len(),
                modified: meta.modified().ok(),
            }
        }
    }

    #[cfg(unix)]
    #[allow(
        clippy::unnecessary_cast,
        reason = "the stat field types differ between platforms"
    )]
    pub(crate) fn of_stat(stat: &rustix::fs::Stat) -> Self {
        Self {
            len: stat.st_size as u64,
            modified: (stat.st_mtime as i64, stat.st_mtime_nsec as i64),
            changed: (stat.st_ctime as i64, stat.st_ctime_nsec as i64),
            inode: (stat.st_dev as u64, stat.st_ino as u64),
        }
    }

    /// The stamp of the file at `path` (following symlinks).
    pub fn read(path: &Path) -> std::io::Result<Self> {
        std::fs::metadata(path).map(|m| Self::of(&m))
    }
}
