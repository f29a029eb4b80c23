//! What a run touched in its workspace, told by the kernel while it ran
//! (inotify), so that reading the run back need not stat every file of
//! a large project when the run wrote only its own state.
//!
//! The folders watched are the project's root, its `.ai/` and every
//! folder holding an item of the snapshot; each event names a path that
//! may have changed. What this cannot see (a file written through a
//! memory map, or through a hard link made in a folder not watched)
//! the walk that follows every such run finds, so a fast answer is
//! checked all the same, only after it is given.

use std::collections::BTreeSet;

/// What a watch saw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Seen {
    /// Every path (relative to the root, `""` for the root itself) an
    /// event named.
    Paths(BTreeSet<String>),
    /// The kernel dropped events, or a watched folder itself went: what
    /// changed is not known.
    Lost,
}

impl Seen {
    /// Whether what was seen leaves the manifest of the space as it was:
    /// every path lies inside `.ai/` but outside its item folders (the
    /// run's own state, which no manifest holds).
    pub fn leaves_items(&self) -> bool {
        let Seen::Paths(paths) = self else {
            return false;
        };
        paths.iter().all(|path| {
            let Some(rest) = path.strip_prefix(".ai/") else {
                return false;
            };
            let top = rest.split('/').next().unwrap_or_default();
            !top.is_empty()
                && !rye_sync::manifest::ITEM_FOLDERS
                    .iter()
                    .any(|(folder, _)| *folder == top)
        })
    }
}

#[cfg(target_os = "linux")]
pub use linux::Watch;

#[cfg(target_os = "linux")]
mod linux {
    use std::collections::{BTreeSet, HashMap};
    use std::mem::MaybeUninit;
    use std::os::fd::OwnedFd;
    use std::path::Path;

    use rustix::fs::inotify::{self, CreateFlags, ReadFlags, WatchFlags};
    use rustix::io::Errno;

    use super::Seen;

    /// Folders being watched.
    pub struct Watch {
        fd: OwnedFd,
        /// Watch descriptor to the folder's path relative to the root.
        folders: HashMap<i32, String>,
    }

    impl Watch {
        /// Watches `root`, `root/.ai` and each of `folders` (relative to
        /// `root`); `None` when any of them cannot be watched (missing,
        /// not a folder, a link, or the kernel's limit on watches
        /// reached): the run is then read back by a walk.
        pub fn start<'a>(root: &Path, folders: impl IntoIterator<Item = &'a str>) -> Option<Watch> {
            let fd = inotify::init(CreateFlags::CLOEXEC | CreateFlags::NONBLOCK).ok()?;
            let flags = WatchFlags::MODIFY
                | WatchFlags::ATTRIB
                | WatchFlags::CLOSE_WRITE
                | WatchFlags::CREATE
                | WatchFlags::DELETE
                | WatchFlags::MOVED_FROM
                | WatchFlags::MOVED_TO
                | WatchFlags::DELETE_SELF
                | WatchFlags::MOVE_SELF
                | WatchFlags::DONT_FOLLOW
                | WatchFlags::ONLYDIR;
            let mut watch = Watch {
                fd,
                folders: HashMap::new(),
            };
            for rel in ["", ".ai"].into_iter().chain(folders) {
                let path = if rel.is_empty() {
                    root.to_owned()
                } else {
                    root.join(rel)
                };
                let wd = inotify::add_watch(&watch.fd, &path, flags).ok()?;
                watch.folders.insert(wd, rel.to_owned());
            }
            Some(watch)
        }

        /// What was seen since the watch began. The watch ends off the
        /// caller's path: closing an inotify instance waits out an SRCU
        /// grace period, up to tens of milliseconds.
        pub fn seen(self) -> Seen {
            let seen = self.read();
            let Watch { fd, .. } = self;
            // Were no thread to be had, the closure and its descriptor
            // are dropped here instead.
            let _ = std::thread::Builder::new()
                .name("rye-unwatch".into())
                .spawn(move || drop(fd));
            seen
        }

        fn read(&self) -> Seen {
            let mut buf = vec![MaybeUninit::<u8>::uninit(); 64 * 1024];
            let mut reader = inotify::Reader::new(&self.fd, &mut buf);
            let mut paths = BTreeSet::new();
            loop {
                let event = match reader.next() {
                    Ok(event) => event,
                    Err(Errno::AGAIN) => break,
                    Err(Errno::INTR) => continue,
                    Err(_) => return Seen::Lost,
                };
                let flags = event.events();
                if flags.contains(ReadFlags::QUEUE_OVERFLOW) {
                    return Seen::Lost;
                }
                let Some(folder) = self.folders.get(&event.wd()) else {
                    // A watch the kernel dropped after its folder went.
                    continue;
                };
                match event.file_name() {
                    Some(name) => {
                        let Ok(name) = name.to_str() else {
                            // A name no manifest can hold: what it is
                            // remains for the walk to say.
                            return Seen::Lost;
                        };
                        paths.insert(if folder.is_empty() {
                            name.to_owned()
                        } else {
                            format!("{folder}/{name}")
                        });
                    }
                    None if flags.intersects(
                        ReadFlags::DELETE_SELF | ReadFlags::MOVE_SELF | ReadFlags::IGNORED,
                    ) =>
                    {
                        if folder.is_empty() || folder == ".ai" {
                            return Seen::Lost;
                        }
                        paths.insert(folder.clone());
                    }
                    None => {
                        paths.insert(folder.clone());
                    }
                }
            }
            Seen::Paths(paths)
        }
    }
}

/// Elsewhere nothing is watched: every run is read back by a walk.
#[cfg(not(target_os = "linux"))]
pub struct Watch;

#[cfg(not(target_os = "linux"))]
impl Watch {
    pub fn start<'a>(
        _root: &std::path::Path,
        _folders: impl IntoIterator<Item = &'a str>,
    ) -> Option<Watch> {
        None
    }

    pub fn seen(self) -> Seen {
        Seen::Lost
    }
}

/// The folders holding the items of `manifest` (a `source_manifest`),
/// each with every folder above it up to the root.
pub fn folders_of(manifest: &serde_json::Value) -> BTreeSet<&str> {
    let mut folders = BTreeSet::new();
    let items = manifest.get("items").and_then(serde_json::Value::as_object);
    for path in items.into_iter().flat_map(|m| m.keys()) {
        rye_sync::manifest::add_folders_above(path, &mut folders);
    }
    folders
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use std::path::Path;

    use super::*;

    fn seen_after(root: &Path, folders: &[&str], act: impl FnOnce()) -> Seen {
        let watch = Watch::start(root, folders.iter().copied()).expect("watched");
        act();
        watch.seen()
    }

    #[test]
    fn a_watch_names_what_changed_and_says_whether_items_could_have() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        for folder in [".ai/knowledge/notes", ".ai/tools"] {
            std::fs::create_dir_all(root.join(folder)).unwrap();
        }
        std::fs::write(root.join(".ai/knowledge/notes/a.md"), "a").unwrap();
        let folders = [".ai/knowledge", ".ai/knowledge/notes", ".ai/tools"];

        // Nothing done: nothing seen, the items as they were.
        let seen = seen_after(root, &folders, || {});
        assert_eq!(seen, Seen::Paths(BTreeSet::new()));
        assert!(seen.leaves_items());

        // The run's own state only: the items as they were.
        let seen = seen_after(root, &folders, || {
            std::fs::create_dir_all(root.join(".ai/state/out")).unwrap();
            std::fs::write(root.join(".ai/state/out/t.txt"), "t").unwrap();
        });
        assert_eq!(seen, Seen::Paths([".ai/state".to_owned()].into()));
        assert!(seen.leaves_items());

        // A file rewritten, one made in a new folder, one beside `.ai/`.
        for (act, path) in [
            (
                Box::new(|| std::fs::write(root.join(".ai/knowledge/notes/a.md"), "b").unwrap())
                    as Box<dyn FnOnce()>,
                ".ai/knowledge/notes/a.md",
            ),
            (
                Box::new(|| std::fs::create_dir_all(root.join(".ai/tools/new/deep")).unwrap()),
                ".ai/tools/new",
            ),
            (
                Box::new(|| std::fs::write(root.join("beside.txt"), "x").unwrap()),
                "beside.txt",
            ),
            (
                Box::new(|| std::fs::create_dir(root.join(".ai/directives")).unwrap()),
                ".ai/directives",
            ),
        ] {
            let seen = seen_after(root, &folders, act);
            let Seen::Paths(paths) = &seen else {
                panic!("{seen:?}")
            };
            assert!(paths.contains(path), "{paths:?}");
            assert!(!seen.leaves_items(), "{path}: {paths:?}");
        }

        // A watched folder moved away: it is named; `.ai/` itself moved
        // away: nothing is known.
        let seen = seen_after(root, &folders, || {
            std::fs::rename(root.join(".ai/tools"), root.join("tools-away")).unwrap();
        });
        assert!(!seen.leaves_items(), "{seen:?}");
        std::fs::rename(root.join("tools-away"), root.join(".ai/tools")).unwrap();
        let seen = seen_after(root, &folders, || {
            std::fs::rename(root.join(".ai"), root.join("ai-away")).unwrap();
        });
        assert!(!seen.leaves_items(), "{seen:?}");
        std::fs::rename(root.join("ai-away"), root.join(".ai")).unwrap();

        // A folder that is missing, or a link, is not watched at all.
        assert!(Watch::start(root, [".ai/missing"]).is_none());
        std::os::unix::fs::symlink(root.join(".ai/knowledge"), root.join(".ai/linked")).unwrap();
        assert!(Watch::start(root, [".ai/linked"]).is_none());
    }

    #[test]
    fn the_folders_above_a_manifests_items() {
        let manifest = serde_json::json!({"items": {
            ".ai/knowledge/a/b.md": "h", ".ai/knowledge/a/c.md": "h", ".ai/tools/t.yaml": "h"
        }});
        let folders: Vec<&str> = folders_of(&manifest).into_iter().collect();
        assert_eq!(
            folders,
            [".ai", ".ai/knowledge", ".ai/knowledge/a", ".ai/tools"]
        );
    }
}
