//! Keeping file access inside a space.
//!
//! A space is its `.ai/` folder. A symbolic link inside it may point
//! elsewhere inside it; one that leads out (to `/etc/passwd`, to a file in
//! the home folder) is an error naming the link and where it leads, for
//! reads as for listings. Writes follow no link at all: every folder on
//! the way is opened without following links and the file is put in place
//! by renaming, so a link planted on the destination path is refused, not
//! written through.
//!
//! On Linux reads go through `openat2(RESOLVE_BENEATH)` from a descriptor
//! of the space, so the kernel resolves the path and refuses an escape in
//! the same step that opens the file: a link swapped in after a check
//! cannot redirect the read. Elsewhere the resolved path is compared with
//! the space's before reading.

use std::io::Read;
use std::path::{Component, Path, PathBuf};

use crate::SpaceError;

/// Where `path` (inside `root`, possibly through links) really leads when
/// that is outside `root`; `None` when it stays inside or cannot be
/// resolved (a dangling link is not an escape; reading it fails anyway).
pub fn escape_of(root: &Path, path: &Path) -> Option<PathBuf> {
    let real_root = root.canonicalize().ok()?;
    let real = path.canonicalize().ok()?;
    (!real.starts_with(&real_root)).then_some(real)
}

/// The error for a link out of its space.
pub fn escape_error(root: &Path, path: &Path, target: PathBuf) -> SpaceError {
    SpaceError::LinkEscape {
        path: path.to_owned(),
        target,
        root: root.to_owned(),
    }
}

/// `path` relative to `root`, refusing `..` and absolute parts.
fn relative<'a>(root: &Path, path: &'a Path) -> Result<&'a Path, SpaceError> {
    let rel = path.strip_prefix(root).map_err(|_| SpaceError::Data {
        path: path.to_owned(),
        message: format!("not inside the space {}", root.display()),
    })?;
    if rel.components().any(|c| !matches!(c, Component::Normal(_))) {
        return Err(SpaceError::Data {
            path: path.to_owned(),
            message: "the path climbs out with `..`".into(),
        });
    }
    Ok(rel)
}

/// Reads the file at `path`, which lies under the space folder `root`,
/// following links only while they stay inside `root`.
pub fn read_within(root: &Path, path: &Path) -> Result<Vec<u8>, SpaceError> {
    let mut file = open_within(root, path)?;
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes)
        .map_err(|e| SpaceError::io(path, e))?;
    Ok(bytes)
}

/// Opens the file at `path` under `root` for reading, as [`read_within`].
pub fn open_within(root: &Path, path: &Path) -> Result<std::fs::File, SpaceError> {
    let rel = relative(root, path)?;
    #[cfg(target_os = "linux")]
    {
        use rustix::fs::{Mode, OFlags, ResolveFlags};
        let dir = rustix::fs::open(
            root,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| SpaceError::io(root, e.into()))?;
        let open = |rel: &Path| {
            rustix::fs::openat2(
                &dir,
                rel,
                OFlags::RDONLY | OFlags::CLOEXEC,
                Mode::empty(),
                ResolveFlags::BENEATH | ResolveFlags::NO_MAGICLINKS,
            )
        };
        match open(rel) {
            Ok(fd) => return Ok(std::fs::File::from(fd)),
            Err(rustix::io::Errno::XDEV) => {
                // Refused: a link leads out, or it is an absolute link
                // (which the kernel refuses even when it leads back in).
                // Read an absolute link that stays inside by the path it
                // resolves to, still beneath the space's descriptor.
                let target = path.canonicalize().unwrap_or_else(|_| path.to_owned());
                let inside = root
                    .canonicalize()
                    .ok()
                    .and_then(|real_root| target.strip_prefix(real_root).ok().map(Path::to_owned));
                return match inside.map(|rel| open(&rel)) {
                    Some(Ok(fd)) => Ok(std::fs::File::from(fd)),
                    Some(Err(rustix::io::Errno::XDEV)) | None => {
                        Err(escape_error(root, path, target))
                    }
                    Some(Err(e)) => Err(SpaceError::io(path, e.into())),
                };
            }
            // No openat2 (a kernel before 5.6, or a sandbox that forbids
            // it): check the resolved path instead.
            Err(rustix::io::Errno::NOSYS | rustix::io::Errno::PERM) => {}
            Err(e) => return Err(SpaceError::io(path, e.into())),
        }
    }
    if let Some(target) = escape_of(root, path) {
        return Err(escape_error(root, path, target));
    }
    std::fs::File::open(path).map_err(|e| SpaceError::io(path, e))
}

/// Writes `bytes` to `path` under the space folder `root`, making the
/// folders on the way, following no link: a link anywhere below `root` on
/// the way, or at `path` itself, is refused. An existing file is replaced
/// only when `replace` (keeping its permissions); the new content appears
/// whole or not at all.
pub fn write_within(
    root: &Path,
    path: &Path,
    bytes: &[u8],
    replace: bool,
) -> Result<(), SpaceError> {
    let rel = relative(root, path)?;
    #[cfg(unix)]
    {
        unix::write(root, path, rel, bytes, replace)
    }
    #[cfg(not(unix))]
    {
        let _ = rel;
        let mut at = root.to_path_buf();
        for part in rel.parent().into_iter().flat_map(Path::components) {
            at.push(part);
            if std::fs::symlink_metadata(&at).is_ok_and(|m| m.file_type().is_symlink()) {
                return Err(SpaceError::LinkOnWrite { path: at });
            }
        }
        if std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink()) {
            return Err(SpaceError::LinkOnWrite {
                path: path.to_owned(),
            });
        }
        if !replace && path.exists() {
            return Err(SpaceError::Exists {
                path: path.to_owned(),
            });
        }
        std::fs::create_dir_all(path.parent().unwrap_or(root))
            .map_err(|e| SpaceError::io(path, e))?;
        std::fs::write(path, bytes).map_err(|e| SpaceError::io(path, e))
    }
}

#[cfg(unix)]
mod unix {
    use std::os::fd::OwnedFd;

    use rustix::fs::{AtFlags, FileType, Mode, OFlags};
    use rustix::io::Errno;

    use super::*;

    fn io(path: &Path, e: Errno) -> SpaceError {
        SpaceError::io(path, e.into())
    }

    /// Opens folder `name` in `dir` without following a link, making it
    /// when missing.
    fn open_or_make(dir: &OwnedFd, name: &Path, shown: &Path) -> Result<OwnedFd, SpaceError> {
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        for _ in 0..2 {
            match rustix::fs::openat(dir, name, flags, Mode::empty()) {
                Ok(fd) => return Ok(fd),
                Err(Errno::NOENT) => match rustix::fs::mkdirat(dir, name, Mode::from(0o755)) {
                    Ok(()) | Err(Errno::EXIST) => continue,
                    Err(e) => return Err(io(shown, e)),
                },
                Err(Errno::LOOP | Errno::NOTDIR) if is_link(dir, name) => {
                    return Err(SpaceError::LinkOnWrite {
                        path: shown.to_owned(),
                    });
                }
                Err(e) => return Err(io(shown, e)),
            }
        }
        Err(io(shown, Errno::NOENT))
    }

    fn is_link(dir: &OwnedFd, name: &Path) -> bool {
        rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW)
            .is_ok_and(|s| FileType::from_raw_mode(s.st_mode) == FileType::Symlink)
    }

    pub(super) fn write(
        root: &Path,
        path: &Path,
        rel: &Path,
        bytes: &[u8],
        replace: bool,
    ) -> Result<(), SpaceError> {
        // The space folder itself is where the space is, link or not.
        std::fs::create_dir_all(root).map_err(|e| SpaceError::io(root, e))?;
        let mut dir = rustix::fs::open(
            root,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| io(root, e))?;
        let mut shown = root.to_path_buf();
        let name = rel.file_name().ok_or_else(|| SpaceError::Data {
            path: path.to_owned(),
            message: "no file name".into(),
        })?;
        for part in rel.parent().into_iter().flat_map(Path::components) {
            shown.push(part);
            dir = open_or_make(&dir, Path::new(&part), &shown)?;
        }
        let mode = match rustix::fs::statat(&dir, name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(stat) => {
                let file_type = FileType::from_raw_mode(stat.st_mode);
                if file_type == FileType::Symlink {
                    return Err(SpaceError::LinkOnWrite {
                        path: path.to_owned(),
                    });
                }
                if file_type != FileType::RegularFile {
                    return Err(SpaceError::Data {
                        path: path.to_owned(),
                        message: "exists and is not a regular file".into(),
                    });
                }
                if !replace {
                    return Err(SpaceError::Exists {
                        path: path.to_owned(),
                    });
                }
                Mode::from_raw_mode(stat.st_mode) & Mode::from(0o7777)
            }
            Err(Errno::NOENT) => Mode::from(0o644),
            Err(e) => return Err(io(path, e)),
        };
        let tmp = format!(".{}.{}.tmp", name.to_string_lossy(), std::process::id());
        let fd = rustix::fs::openat(
            &dir,
            tmp.as_str(),
            OFlags::WRONLY | OFlags::CREATE | OFlags::TRUNC | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            mode,
        )
        .map_err(|e| io(path, e))?;
        let mut file = std::fs::File::from(fd);
        let written = std::io::Write::write_all(&mut file, bytes)
            .and_then(|()| file.sync_all())
            .map_err(|e| SpaceError::io(path, e))
            .and_then(|()| {
                // The umask narrowed the mode the file was made with.
                rustix::fs::fchmod(&file, mode).map_err(|e| io(path, e))
            })
            .and_then(|()| {
                rustix::fs::renameat(&dir, tmp.as_str(), &dir, name).map_err(|e| io(path, e))
            });
        if written.is_err() {
            let _ = rustix::fs::unlinkat(&dir, tmp.as_str(), AtFlags::empty());
        } else {
            remove_abandoned(&dir, &name.to_string_lossy());
        }
        written
    }

    /// Removes the temporary files of `name` that writers killed midway
    /// left behind (`.<name>.<pid>.tmp` of a process that is gone).
    fn remove_abandoned(dir: &OwnedFd, name: &str) {
        let prefix = format!(".{name}.");
        let Ok(mut entries) = rustix::fs::Dir::read_from(dir) else {
            return;
        };
        let mut abandoned = Vec::new();
        while let Some(Ok(entry)) = entries.read() {
            let Ok(file) = entry.file_name().to_str() else {
                continue;
            };
            let pid = file
                .strip_prefix(prefix.as_str())
                .and_then(|rest| rest.strip_suffix(".tmp"))
                .and_then(|pid| pid.parse::<i32>().ok());
            if let Some(pid) = pid
                && pid != std::process::id() as i32
                && !process_exists(pid as u32).unwrap_or(true)
            {
                abandoned.push(file.to_owned());
            }
        }
        for file in abandoned {
            let _ = rustix::fs::unlinkat(dir, file.as_str(), AtFlags::empty());
        }
    }
}

/// Whether process `pid` exists, where the system can say (Linux, through
/// `/proc`); `None` elsewhere. For telling a leftover of a dead process
/// (a temporary file named by its pid) from the work of a live one.
pub fn process_exists(pid: u32) -> Option<bool> {
    cfg!(target_os = "linux").then(|| Path::new("/proc").join(pid.to_string()).exists())
}

#[cfg(all(test, unix))]
mod tests {
    use std::os::unix::fs::symlink;

    use super::*;

    fn space() -> (tempfile::TempDir, PathBuf) {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join(".ai");
        std::fs::create_dir_all(root.join("knowledge/a")).unwrap();
        std::fs::write(root.join("knowledge/a/in.md"), "inside").unwrap();
        std::fs::write(tmp.path().join("secret"), "outside").unwrap();
        (tmp, root)
    }

    #[test]
    fn reads_follow_links_inside_and_refuse_links_out() {
        let (tmp, root) = space();
        let knowledge = root.join("knowledge");
        symlink(knowledge.join("a/in.md"), knowledge.join("near.md")).unwrap();
        symlink("a", knowledge.join("dir")).unwrap();
        symlink(tmp.path().join("secret"), knowledge.join("out.md")).unwrap();
        symlink("../../../secret", knowledge.join("a/up.md")).unwrap();
        symlink(tmp.path(), knowledge.join("outdir")).unwrap();
        assert_eq!(
            read_within(&root, &knowledge.join("near.md")).unwrap(),
            b"inside"
        );
        assert_eq!(
            read_within(&root, &knowledge.join("dir/in.md")).unwrap(),
            b"inside"
        );
        for escaping in ["out.md", "a/up.md", "outdir/secret"] {
            let err = read_within(&root, &knowledge.join(escaping)).unwrap_err();
            assert!(
                matches!(err, SpaceError::LinkEscape { .. }),
                "{escaping}: {err}"
            );
            let text = err.to_string();
            assert!(text.contains(escaping) && text.contains("secret"), "{text}");
        }
        assert!(escape_of(&root, &knowledge.join("out.md")).is_some());
        assert!(escape_of(&root, &knowledge.join("near.md")).is_none());
    }

    #[test]
    fn writes_follow_no_link_and_replace_only_when_asked() {
        let (tmp, root) = space();
        let secret = tmp.path().join("secret");
        let knowledge = root.join("knowledge");
        symlink(&secret, knowledge.join("target.md")).unwrap();
        symlink(tmp.path(), knowledge.join("linkdir")).unwrap();
        symlink("a", knowledge.join("inner")).unwrap();
        for (path, replace) in [
            (knowledge.join("target.md"), true),
            (knowledge.join("target.md"), false),
            (knowledge.join("linkdir/secret"), true),
            (knowledge.join("linkdir/new.md"), false),
            (knowledge.join("inner/in.md"), true),
        ] {
            let err = write_within(&root, &path, b"overwritten", replace).unwrap_err();
            assert!(
                matches!(err, SpaceError::LinkOnWrite { .. }),
                "{}: {err}",
                path.display()
            );
        }
        assert_eq!(std::fs::read(&secret).unwrap(), b"outside");
        assert!(!tmp.path().join("new.md").exists());

        let fresh = knowledge.join("b/c/new.md");
        write_within(&root, &fresh, b"one", false).unwrap();
        assert!(matches!(
            write_within(&root, &fresh, b"two", false),
            Err(SpaceError::Exists { .. })
        ));
        // What a writer killed midway left: removed by the next write.
        let abandoned = knowledge.join("b/c/.new.md.999999999.tmp");
        std::fs::write(&abandoned, "half").unwrap();
        write_within(&root, &fresh, b"two", true).unwrap();
        assert_eq!(std::fs::read(&fresh).unwrap(), b"two");
        assert!(!abandoned.exists() || !cfg!(target_os = "linux"));
        let leftovers: Vec<_> = std::fs::read_dir(knowledge.join("b/c")).unwrap().collect();
        assert_eq!(leftovers.len(), 1);
        assert!(write_within(&root, &knowledge.join("../escape.md"), b"x", true).is_err());
        assert!(write_within(&root, &tmp.path().join("secret"), b"x", true).is_err());
    }
}
