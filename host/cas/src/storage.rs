//! Where content lives: a key-to-bytes storage. Keys are the store's own
//! (`blobs/ab/cd/<hash>`, `objects/ab/cd/<hash>.json`) and each is written
//! only with the bytes its hash promises, so a storage needs no
//! conditional writes and no locks.

use std::future::Future;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// Bytes by key. A node implements it over an object store; here,
/// [`LocalStorage`] keeps files.
pub trait Storage: Send + Sync {
    /// The bytes at `key`, or `None` when there are none.
    fn get(&self, key: &str) -> impl Future<Output = io::Result<Option<Vec<u8>>>> + Send;

    /// Makes `key` hold `bytes`, whole or not at all: a reader never sees
    /// part of them. The storage may skip the write when it already holds
    /// them.
    fn put(&self, key: &str, bytes: &[u8]) -> impl Future<Output = io::Result<()>> + Send;

    /// [`Storage::put`] for bytes the caller knows are new (they name
    /// something just made, such as a fresh thread id), so the storage
    /// need not look for them first. Were they there after all, the same
    /// bytes are written again.
    fn put_new(&self, key: &str, bytes: &[u8]) -> impl Future<Output = io::Result<()>> + Send {
        self.put(key, bytes)
    }

    /// Whether `key` holds anything.
    fn exists(&self, key: &str) -> impl Future<Output = io::Result<bool>> + Send;

    /// Removes `key`; removing what is not there is not an error.
    fn delete(&self, key: &str) -> impl Future<Output = io::Result<()>> + Send;
}

/// Files under one folder (a project's `.ai/state/objects/`). A write goes
/// to a file with no name linked in as its target on Linux, elsewhere to
/// a temporary file beside its target renamed into place, so a crash
/// leaves either the whole file or none; a file already there with
/// the right length is kept (a write cut short by a crash leaves a shorter
/// one, which the next write replaces, and every read checks the hash).
/// The calls do their file work inline: content is small, and a caller
/// with large blobs on a busy reactor moves the call to a blocking thread.
#[derive(Debug, Clone)]
pub struct LocalStorage {
    root: PathBuf,
}

static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

impl LocalStorage {
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The file of `key`; keys are relative paths of plain segments.
    fn path(&self, key: &str) -> io::Result<PathBuf> {
        let plain = !key.is_empty()
            && key.split('/').all(|segment| {
                !segment.is_empty()
                    && segment != "."
                    && segment != ".."
                    && !segment.contains(['\\', '\0'])
            });
        if !plain {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{key:?} is not a storage key (relative segments, no '.' or '..')"),
            ));
        }
        Ok(self.root.join(key))
    }

    /// The file's bytes. Never through a link, and only from a regular
    /// file: a FIFO or a device put in the store's place would hang or
    /// never end.
    pub(crate) fn read(&self, key: &str) -> io::Result<Option<Vec<u8>>> {
        use rustix::fs::{Mode, OFlags};
        use std::io::Read;
        let path = self.path(key)?;
        let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
        let fd = match rustix::fs::open(&path, flags, Mode::empty()) {
            Ok(fd) => fd,
            Err(rustix::io::Errno::NOENT) => return Ok(None),
            Err(rustix::io::Errno::LOOP) => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "a symbolic link where content should be",
                ));
            }
            Err(e) => return Err(e.into()),
        };
        let mut file = std::fs::File::from(fd);
        let meta = file.metadata()?;
        if !meta.is_file() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "not a regular file where content should be",
            ));
        }
        let mut bytes = Vec::with_capacity(meta.len() as usize);
        file.read_to_end(&mut bytes)?;
        Ok(Some(bytes))
    }

    /// Writes `bytes` at `key`, keeping a file already there with their
    /// length unless `fresh` says not to look for one.
    fn write(&self, key: &str, bytes: &[u8], fresh: bool) -> io::Result<()> {
        let target = self.path(key)?;
        if !fresh {
            let kept = std::fs::symlink_metadata(&target);
            if kept.is_ok_and(|m| m.is_file() && m.len() == bytes.len() as u64) {
                return Ok(());
            }
        }
        let dir = target.parent().unwrap_or(&self.root);
        #[cfg(target_os = "linux")]
        if unnamed_then_linked(dir, &target, bytes)? {
            return Ok(());
        }
        self.renamed_into_place(dir, &target, bytes)
    }

    /// Writes `bytes` to a temporary file beside `target` and renames it
    /// over `target`.
    fn renamed_into_place(&self, dir: &Path, target: &Path, bytes: &[u8]) -> io::Result<()> {
        use std::io::Write;
        let name = target
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("content");
        let temp = dir.join(format!(
            "{name}.tmp.{}.{}",
            std::process::id(),
            TEMP_COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        let written = (|| {
            let open = || {
                std::fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .open(&temp)
            };
            // The folder is made only when it is missing: trying to make
            // one that is there costs as much as the write.
            let mut file = match open() {
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    std::fs::create_dir_all(dir)?;
                    open()?
                }
                opened => opened?,
            };
            file.write_all(bytes)?;
            std::fs::rename(&temp, target)
        })();
        if written.is_err() {
            let _ = std::fs::remove_file(&temp);
        }
        written
    }
}

/// Writes `bytes` to a file with no name in `dir` (`O_TMPFILE`) and
/// links it in as `target`: the file appears whole or not at all, a crash
/// leaves no temporary file behind, and the kernel does less than for a
/// named file created and then renamed. False, having written nothing,
/// when this cannot be done here (a filesystem without `O_TMPFILE`, no
/// `/proc`) or `target` is already there (the caller then replaces it).
#[cfg(target_os = "linux")]
fn unnamed_then_linked(dir: &Path, target: &Path, bytes: &[u8]) -> io::Result<bool> {
    use rustix::fs::{AtFlags, CWD, Mode, OFlags};
    use rustix::io::Errno;
    use std::io::Write;
    use std::os::fd::AsRawFd;
    let flags = OFlags::WRONLY | OFlags::TMPFILE | OFlags::CLOEXEC;
    let mode = Mode::from_raw_mode(0o666);
    let open = || rustix::fs::open(dir, flags, mode);
    // The folder is made only when it is missing, as for a named file.
    let opened = match open() {
        Err(Errno::NOENT) => {
            std::fs::create_dir_all(dir)?;
            open()
        }
        opened => opened,
    };
    let fd = match opened {
        Ok(fd) => fd,
        Err(Errno::OPNOTSUPP | Errno::ISDIR | Errno::INVAL) => return Ok(false),
        Err(e) => return Err(e.into()),
    };
    let mut file = std::fs::File::from(fd);
    file.write_all(bytes)?;
    let by_fd = format!("/proc/self/fd/{}", file.as_raw_fd());
    match rustix::fs::linkat(CWD, by_fd.as_str(), CWD, target, AtFlags::SYMLINK_FOLLOW) {
        Ok(()) => Ok(true),
        Err(Errno::EXIST | Errno::NOENT | Errno::PERM | Errno::ACCESS) => Ok(false),
        Err(e) => Err(e.into()),
    }
}

impl Storage for LocalStorage {
    async fn get(&self, key: &str) -> io::Result<Option<Vec<u8>>> {
        self.read(key)
    }

    async fn put(&self, key: &str, bytes: &[u8]) -> io::Result<()> {
        self.write(key, bytes, false)
    }

    async fn put_new(&self, key: &str, bytes: &[u8]) -> io::Result<()> {
        self.write(key, bytes, true)
    }

    async fn exists(&self, key: &str) -> io::Result<bool> {
        match std::fs::symlink_metadata(self.path(key)?) {
            Ok(meta) => Ok(meta.is_file()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(e),
        }
    }

    async fn delete(&self, key: &str) -> io::Result<()> {
        match std::fs::remove_file(self.path(key)?) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(e),
        }
    }
}
