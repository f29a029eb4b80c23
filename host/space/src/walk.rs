//! Listing the item files under one folder, fast: a warm search is mostly
//! this walk, and it runs on every request.
//!
//! On Unix each directory is read through its own descriptor and each file
//! `stat`ed relative to it, so the kernel resolves one path component per
//! file rather than the whole path. Top-level folders are walked on a few
//! threads. Symbolic links are followed while they stay inside the space
//! (its `.ai/` folder): a link that leads out is listed as an escape, with
//! where it leads, and neither read nor walked into; a link back to a
//! folder already being walked is skipped. Names starting with `.` or `_`,
//! and `node_modules`, are never listed.

use std::path::{Path, PathBuf};

use crate::{FileStamp, SpaceError};

/// One item file: its id, the rank of its extension, its path and stamp,
/// whether it was reached through a symbolic link to a file, and, for a
/// link out of the space (to a file or a folder), where it leads.
pub(crate) type Found = Vec<(String, usize, PathBuf, FileStamp, bool, Option<PathBuf>)>;

/// The rank given to a link to a folder outside the space: it sorts after
/// every file of the same id.
pub(crate) const FOLDER_RANK: usize = usize::MAX;

/// The space folder (`.ai/`) that a kind's folder `base` belongs to,
/// resolved, for checking where links lead.
fn space_root(base: &Path) -> Option<PathBuf> {
    base.parent()?.canonicalize().ok()
}

/// Where the link at `path` leads, when that is outside `root` (the
/// resolved space folder).
fn escape(root: Option<&Path>, path: &Path) -> Option<PathBuf> {
    let real = path.canonicalize().ok()?;
    root.is_some_and(|root| !real.starts_with(root))
        .then_some(real)
}

/// Called with each folder just before it is read (to watch it); returns
/// false if it could not.
pub(crate) type Hook<'a> = &'a (dyn Fn(&Path) -> bool + Sync);

/// Names never listed: hidden and private files, and folders of caches and
/// dependencies that sit beside tools.
fn skipped_name(name: &str) -> bool {
    name.starts_with('.') || name.starts_with('_') || name == "node_modules"
}

/// The id and extension rank of a file named `name` in the folder whose
/// id prefix is `prefix` (empty or ending in `/`), if its extension is one
/// of `extensions`. Only the last suffix is an extension:
/// `foo.config-schema.yaml` has id `foo.config-schema`.
fn item_id(prefix: &str, name: &str, extensions: &[String]) -> Option<(String, usize)> {
    let dot = name.rfind('.').filter(|&i| i > 0)?;
    let rank = extensions.iter().position(|e| *e == name[dot..])?;
    let id = format!("{prefix}{}", &name[..dot]);
    crate::validate_id(&id).ok()?;
    Some((id, rank))
}

#[cfg(unix)]
pub(crate) use unix::list_files;

#[cfg(not(unix))]
pub(crate) use portable::list_files;

#[cfg(unix)]
mod unix {
    use std::os::fd::OwnedFd;

    use rustix::fs::{AtFlags, Dir, FileType, Mode, OFlags};

    use super::*;

    /// (device, inode) of a directory, to notice a link leading back up.
    type DirId = (u64, u64);

    fn io(path: &Path, e: rustix::io::Errno) -> SpaceError {
        SpaceError::Io {
            path: path.to_owned(),
            source: e.into(),
        }
    }

    fn open_dir(path: &Path) -> Result<(OwnedFd, DirId), SpaceError> {
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
        let fd = rustix::fs::open(path, flags, Mode::empty()).map_err(|e| io(path, e))?;
        let stat = rustix::fs::fstat(&fd).map_err(|e| io(path, e))?;
        #[allow(
            clippy::unnecessary_cast,
            reason = "the stat field types differ between platforms"
        )]
        let id = (stat.st_dev as u64, stat.st_ino as u64);
        Ok((fd, id))
    }

    pub(crate) fn list_files(
        base: &Path,
        extensions: &[String],
        hook: Hook<'_>,
    ) -> Result<Found, SpaceError> {
        hook(base);
        let root = space_root(base);
        let root = root.as_deref();
        let (fd, id) = open_dir(base)?;
        let mut found = Found::new();
        let mut subdirs = Vec::new();
        visit(&fd, base, "", extensions, root, &mut found, &mut subdirs)?;
        drop(fd);

        let threads = std::thread::available_parallelism()
            .map_or(1, |n| n.get())
            .min(4);
        if threads < 2 || subdirs.len() < 2 {
            for sub in subdirs {
                walk(sub, extensions, root, hook, &mut vec![id], &mut found)?;
            }
            return Ok(found);
        }
        let mut shares: Vec<Vec<Subdir>> = (0..threads).map(|_| Vec::new()).collect();
        for (i, sub) in subdirs.into_iter().enumerate() {
            shares[i % threads].push(sub);
        }
        let results: Vec<Result<Found, SpaceError>> = std::thread::scope(|scope| {
            let handles: Vec<_> = shares
                .into_iter()
                .map(|share| {
                    scope.spawn(move || {
                        let mut found = Found::new();
                        for sub in share {
                            walk(sub, extensions, root, hook, &mut vec![id], &mut found)?;
                        }
                        Ok(found)
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().expect("listing thread panicked"))
                .collect()
        });
        for result in results {
            found.extend(result?);
        }
        Ok(found)
    }

    /// A folder still to walk: its path and id prefix. It is opened only
    /// when walked, so a wide tree never holds many descriptors.
    struct Subdir {
        path: PathBuf,
        prefix: String,
    }

    fn walk(
        dir: Subdir,
        extensions: &[String],
        root: Option<&Path>,
        hook: Hook<'_>,
        ancestors: &mut Vec<DirId>,
        found: &mut Found,
    ) -> Result<(), SpaceError> {
        hook(&dir.path);
        let (fd, id) = open_dir(&dir.path)?;
        if ancestors.contains(&id) {
            return Ok(());
        }
        ancestors.push(id);
        let mut subdirs = Vec::new();
        visit(
            &fd,
            &dir.path,
            &dir.prefix,
            extensions,
            root,
            found,
            &mut subdirs,
        )?;
        drop(fd);
        for sub in subdirs {
            walk(sub, extensions, root, hook, ancestors, found)?;
        }
        ancestors.pop();
        Ok(())
    }

    fn visit(
        fd: &OwnedFd,
        path: &Path,
        prefix: &str,
        extensions: &[String],
        root: Option<&Path>,
        found: &mut Found,
        subdirs: &mut Vec<Subdir>,
    ) -> Result<(), SpaceError> {
        let mut dir = Dir::read_from(fd).map_err(|e| io(path, e))?;
        while let Some(entry) = dir.read() {
            let entry = entry.map_err(|e| io(path, e))?;
            let Ok(name) = entry.file_name().to_str() else {
                continue;
            };
            if name == "." || name == ".." || skipped_name(name) {
                continue;
            }
            let mut file_type = entry.file_type();
            let linked = file_type == FileType::Symlink;
            let mut stat = None;
            if matches!(file_type, FileType::Symlink | FileType::Unknown) {
                // Follows the link; a dangling one is not an item.
                let Ok(target) = rustix::fs::statat(fd, name, AtFlags::empty()) else {
                    continue;
                };
                file_type = FileType::from_raw_mode(target.st_mode);
                if linked && let Some(out) = escape(root, &path.join(name)) {
                    let id = match file_type {
                        FileType::Directory => Some((format!("{prefix}{name}"), FOLDER_RANK)),
                        _ => item_id(prefix, name, extensions),
                    };
                    if let Some((id, rank)) = id {
                        let stamp = FileStamp::of_stat(&target);
                        found.push((id, rank, path.join(name), stamp, true, Some(out)));
                    }
                    continue;
                }
                stat = Some(target);
            }
            match file_type {
                FileType::Directory => subdirs.push(Subdir {
                    path: path.join(name),
                    prefix: format!("{prefix}{name}/"),
                }),
                FileType::RegularFile => {
                    let Some((id, rank)) = item_id(prefix, name, extensions) else {
                        continue;
                    };
                    let stat = match stat {
                        Some(stat) => stat,
                        None => rustix::fs::statat(fd, name, AtFlags::empty())
                            .map_err(|e| io(&path.join(name), e))?,
                    };
                    found.push((
                        id,
                        rank,
                        path.join(name),
                        FileStamp::of_stat(&stat),
                        linked,
                        None,
                    ));
                }
                _ => {}
            }
        }
        Ok(())
    }
}

#[cfg(not(unix))]
mod portable {
    use super::*;

    pub(crate) fn list_files(
        base: &Path,
        extensions: &[String],
        _hook: Hook<'_>,
    ) -> Result<Found, SpaceError> {
        let mut found = Found::new();
        let mut ancestors = Vec::new();
        let root = space_root(base);
        walk(
            base,
            "",
            extensions,
            root.as_deref(),
            &mut ancestors,
            &mut found,
        )?;
        Ok(found)
    }

    fn walk(
        dir: &Path,
        prefix: &str,
        extensions: &[String],
        root: Option<&Path>,
        ancestors: &mut Vec<PathBuf>,
        found: &mut Found,
    ) -> Result<(), SpaceError> {
        let canonical = dir.canonicalize().map_err(|e| SpaceError::io(dir, e))?;
        if ancestors.contains(&canonical) {
            return Ok(());
        }
        ancestors.push(canonical);
        for entry in std::fs::read_dir(dir).map_err(|e| SpaceError::io(dir, e))? {
            let entry = entry.map_err(|e| SpaceError::io(dir, e))?;
            let Ok(name) = entry.file_name().into_string() else {
                continue;
            };
            if skipped_name(&name) {
                continue;
            }
            let path = entry.path();
            let Ok(meta) = std::fs::metadata(&path) else {
                continue;
            };
            let linked = entry.file_type().is_ok_and(|t| t.is_symlink());
            if linked && let Some(out) = escape(root, &path) {
                let id = if meta.is_dir() {
                    Some((format!("{prefix}{name}"), FOLDER_RANK))
                } else {
                    item_id(prefix, &name, extensions)
                };
                if let Some((id, rank)) = id {
                    found.push((id, rank, path, FileStamp::of(&meta), true, Some(out)));
                }
                continue;
            }
            if meta.is_dir() {
                walk(
                    &path,
                    &format!("{prefix}{name}/"),
                    extensions,
                    root,
                    ancestors,
                    found,
                )?;
            } else if meta.is_file()
                && let Some((id, rank)) = item_id(prefix, &name, extensions)
            {
                found.push((id, rank, path, FileStamp::of(&meta), linked, None));
            }
        }
        ancestors.pop();
        Ok(())
    }
}
