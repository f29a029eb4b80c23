//! Listings kept between requests by a long-running host.
//!
//! Listing a big tree means a `stat` per file, and a warm search is mostly
//! that. On Linux a [`ListingCache`] watches every folder of a listed tree
//! with inotify, adding each watch before the folder is read. A later
//! listing first drains the tree's events without blocking: events are
//! queued when the change's system call returns, so every change completed
//! before the request began is seen. Within a [`RequestScope`] the queue
//! is read once, by the first check, and the scope's later checks take
//! that reading: every change completed before the request began is still
//! seen, for one read instead of one per check. No event means the last
//! listing still holds and nothing is read from disk, except files reached
//! through a symbolic link, whose targets live outside the watched folders
//! and are `stat`ed every time. Any event, or a full queue, makes the next listing
//! walk the tree again (with fresh watches).
//!
//! The same watches keep the stamps of a fixed set of files and folders
//! ([`ListingCache::stamps`]): the configuration a request reads from a
//! few known paths (extractors, trusted keys) is `stat`ed again only after
//! a folder on the way to one of them reported a change.
//!
//! All of it goes through one inotify instance per process, whatever the
//! number of trees and stamp sets: a user may hold only a few instances.
//!
//! What a caller works out from listings and stamps alone can be kept as
//! long as they hold: a [`Quiet`] token names the events seen so far, and
//! stays current until any watched folder reports one. A result worked out
//! while something was read that no watch vouches for (a link's target, a
//! folder that could not be watched) must not be kept on it; the cache
//! counts such reads, and [`ListingCache::vouched_since`] says whether any
//! happened.
//!
//! Not noticed, as with any inotify user: writes through a memory map,
//! and writes through a hard link from outside the tree. Where inotify is
//! unavailable (another OS, or the watch limit reached) every listing walks.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use crate::resolve::group;
use crate::{FileStamp, ItemKind, Listed, Space, SpaceError, Spaces};

/// A map keyed by paths, looked up on every request: hashed with a fast
/// seeded hasher, where the standard one costs more than the lookup.
type PathMap<K, V> = HashMap<K, V, foldhash::quality::RandomState>;

/// Listings of item trees, kept fresh by watching them. Share one per
/// process.
#[derive(Default)]
pub struct ListingCache {
    trees: Mutex<PathMap<TreeKey, Arc<Mutex<Tree>>>>,
    stamped: Mutex<PathMap<Vec<PathBuf>, Arc<Mutex<Stamped>>>>,
    /// Off: every listing walks (for short-lived processes, where setting
    /// up watches, and the kernel tearing them down at exit, costs more
    /// than it saves).
    unwatched: bool,
    /// Each tree is listed once and its listing kept for the life of the
    /// cache: for one command in one process, over a tree nobody changes
    /// meanwhile.
    snapshot: bool,
    /// Reads no complete watch vouches for, so far.
    unvouched: std::sync::atomic::AtomicU64,
}

/// The watches' events up to a moment, and the reads made without one
/// (see [`ListingCache::quiet`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Quiet {
    events: u64,
    epoch: u64,
    unvouched: u64,
}

impl Quiet {
    /// Whether no watched folder has reported a change between this token
    /// and the later token `now`: what was worked out from listings and
    /// stamps then still holds.
    pub fn holds_at(self, now: Quiet) -> bool {
        now.events == self.events && now.epoch == self.epoch
    }
}

/// One request's checks on this thread, from its making until it is
/// dropped: the watches' queue is read by the first check and not again
/// (see the module docs). A change completed before the scope began is
/// seen by every check in it; one made while it is open is seen from the
/// next read after it. Scopes nest; the outermost decides. It stays on
/// its thread: a request's work that crosses an `await` opens a scope for
/// each stretch between them.
pub struct RequestScope {
    _on_this_thread: std::marker::PhantomData<*const ()>,
}

impl RequestScope {
    pub fn begin() -> Self {
        #[cfg(target_os = "linux")]
        inotify::enter();
        Self {
            _on_this_thread: std::marker::PhantomData,
        }
    }
}

impl Drop for RequestScope {
    fn drop(&mut self) {
        #[cfg(target_os = "linux")]
        inotify::leave();
    }
}

/// A tree is a kind's folder listed for a set of extensions.
type TreeKey = (PathBuf, Vec<String>);

#[derive(Default)]
struct Tree {
    /// The last listing, valid while the watches report nothing.
    listed: Option<Arc<Vec<Listed>>>,
    /// Indexes (into `listed`) of files that are symbolic links.
    linked: Vec<usize>,
    #[cfg(target_os = "linux")]
    watch: Option<inotify::Watch>,
}

/// The stamps of a set of paths, valid while the watches report nothing.
#[derive(Default)]
struct Stamped {
    stamps: Option<Arc<Vec<Option<FileStamp>>>>,
    #[cfg(target_os = "linux")]
    watch: Option<inotify::Watch>,
}

impl ListingCache {
    /// A cache that watches the trees it lists.
    pub fn new() -> Self {
        Self::default()
    }

    /// A cache that never watches: each listing walks its tree.
    pub fn unwatched() -> Self {
        Self {
            unwatched: true,
            ..Self::default()
        }
    }

    /// A cache that lists each tree once and never looks again: for a
    /// one-shot command (a `validate` builds thousands of chains, each of
    /// which would otherwise walk the trees it resolves through).
    pub fn snapshot() -> Self {
        Self {
            unwatched: true,
            snapshot: true,
            ..Self::default()
        }
    }
}

impl ListingCache {
    /// Every event queued so far read, the token of this moment; `None`
    /// where nothing is watched (another OS, a cache that does not watch,
    /// a queue that could not be read).
    pub fn quiet(&self) -> Option<Quiet> {
        if self.unwatched {
            return None;
        }
        #[cfg(target_os = "linux")]
        {
            let (events, epoch) = inotify::events()?;
            Some(Quiet {
                events,
                epoch,
                unvouched: self.unvouched.load(std::sync::atomic::Ordering::SeqCst),
            })
        }
        #[cfg(not(target_os = "linux"))]
        None
    }

    /// Whether, since `token`, no watched folder changed and nothing was
    /// read that no watch vouches for (by any caller: a concurrent one
    /// makes this answer no, never a wrong yes).
    pub fn vouched_since(&self, token: Quiet) -> bool {
        self.quiet() == Some(token)
    }

    fn unvouched_read(&self) {
        self.unvouched
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }

    /// The stamps of `paths`, files or folders (`None` for one that cannot
    /// be read), in order. Watched, the folders from each path's `.ai`
    /// folder down to the path are watched before the stamps are read, and
    /// the stamps are read again only once one of them reported a change.
    /// A path that is a symbolic link (its target is not watched) or lies
    /// in no `.ai` folder makes the set read every time.
    pub fn stamps(&self, paths: &[PathBuf]) -> Arc<Vec<Option<FileStamp>>> {
        let read = || Arc::new(paths.iter().map(|p| FileStamp::read(p).ok()).collect());
        if self.unwatched && !self.snapshot {
            return read();
        }
        let entry = {
            let mut stamped = self.stamped.lock().expect("stamp cache lock");
            match stamped.get(paths) {
                Some(entry) => entry.clone(),
                None => stamped.entry(paths.to_vec()).or_default().clone(),
            }
        };
        let mut entry = entry.lock().expect("stamps lock");
        if self.snapshot {
            return entry.stamps.get_or_insert_with(read).clone();
        }
        #[cfg(target_os = "linux")]
        {
            if let Some(stamps) = &entry.stamps
                && entry.watch.as_ref().is_some_and(inotify::Watch::quiet)
            {
                return stamps.clone();
            }
            entry.stamps = None;
            entry.watch = watch_paths(paths);
            let stamps = read();
            if entry.watch.is_some() {
                entry.stamps = Some(stamps.clone());
            } else {
                self.unvouched_read();
            }
            stamps
        }
        #[cfg(not(target_os = "linux"))]
        read()
    }
}

impl ListingCache {
    /// The stamp of one file, kept as [`ListingCache::stamps`] keeps a
    /// set's; the error of reading it when it cannot be read.
    pub fn stamp(&self, path: &Path) -> std::io::Result<FileStamp> {
        let paths = [path.to_owned()];
        match self.stamps(&paths)[0] {
            Some(stamp) => Ok(stamp),
            None => FileStamp::read(path),
        }
    }
}

/// Watches the folders from each path's `.ai` folder down to the path
/// (the path too, if a folder); where the `.ai` folder is missing, the
/// folder it would be made in. `None` when a path cannot be watched so.
#[cfg(target_os = "linux")]
fn watch_paths(paths: &[PathBuf]) -> Option<inotify::Watch> {
    let watch = inotify::Watch::new()?;
    let mut watched = std::collections::HashSet::new();
    for path in paths {
        let meta = std::fs::symlink_metadata(path);
        if meta.as_ref().is_ok_and(|m| m.file_type().is_symlink()) {
            return None;
        }
        let ai = path
            .ancestors()
            .find(|a| a.file_name().is_some_and(|n| n == ".ai"))?;
        let folders = path
            .ancestors()
            .skip(usize::from(!meta.is_ok_and(|m| m.is_dir())))
            .take_while(|a| a.starts_with(ai));
        let mut any = false;
        for folder in folders {
            if folder.is_dir() {
                any = true;
                if watched.insert(folder.to_owned()) && !watch.add(folder) {
                    return None;
                }
            }
        }
        if !any {
            let base = ai.parent()?;
            if watched.insert(base.to_owned()) && !watch.add(base) {
                return None;
            }
        }
    }
    Some(watch)
}

impl Spaces {
    /// [`Spaces::list`], reusing `cache`'s last listing of the same tree
    /// when nothing in it has changed since.
    pub fn list_cached(
        &self,
        cache: &ListingCache,
        kind: ItemKind,
        space: Space,
        extensions: &[String],
    ) -> Result<Arc<Vec<Listed>>, SpaceError> {
        let Some(root) = self.root(space) else {
            return Ok(Arc::default());
        };
        let dir = root.kind_dir(kind);
        let tree = cache
            .trees
            .lock()
            .expect("listing cache lock")
            .entry((dir.clone(), extensions.to_vec()))
            .or_default()
            .clone();
        let mut tree = tree.lock().expect("listing lock");

        if cache.snapshot
            && let Some(listed) = &tree.listed
        {
            return Ok(listed.clone());
        }
        if let Some(listed) = tree.fresh() {
            if !tree.linked.is_empty() {
                cache.unvouched_read();
            }
            if let Some(listed) = refresh_links(&mut tree, listed) {
                return Ok(listed);
            }
        }
        // A missing folder is known missing until a watch on where it
        // would be made reports a change.
        if cache.stamps(std::slice::from_ref(&dir))[0].is_none() || !dir.is_dir() {
            tree.listed = None;
            return Ok(Arc::default());
        }
        #[cfg(target_os = "linux")]
        let found = {
            let watch = if cache.unwatched {
                None
            } else {
                inotify::Watch::new()
            };
            let found = match &watch {
                Some(w) => crate::walk::list_files(&dir, extensions, &|path| w.add(path))?,
                None => crate::walk::list_files(&dir, extensions, &|_| true)?,
            };
            tree.watch = watch.filter(|w| w.complete());
            if tree.watch.is_none() {
                cache.unvouched_read();
            }
            found
        };
        #[cfg(not(target_os = "linux"))]
        let found = crate::walk::list_files(&dir, extensions, &|_| true)?;

        let (listed, linked): (Vec<Listed>, Vec<bool>) =
            group(kind, space, found).into_iter().unzip();
        tree.linked = linked
            .iter()
            .enumerate()
            .filter(|(_, l)| **l)
            .map(|(i, _)| i)
            .collect();
        let listed = Arc::new(listed);
        tree.listed = Some(listed.clone());
        Ok(listed)
    }
}

impl Spaces {
    /// [`Spaces::resolve`] through `cache`'s listings, looking only in
    /// `within` (in precedence order): a lookup in a watched, unchanged tree
    /// reads nothing from disk. Also returns the resolved file's stamp.
    pub fn resolve_cached(
        &self,
        cache: &ListingCache,
        kind: ItemKind,
        id: &str,
        extensions: &[String],
        within: &[Space],
    ) -> Result<(crate::Resolved, FileStamp), SpaceError> {
        crate::validate_id(id)?;
        let mut found: Option<(crate::Location, FileStamp)> = None;
        let mut shadowed = Vec::new();
        let mut searched = Vec::new();
        for root in self.roots().iter().filter(|r| within.contains(&r.space)) {
            searched.push(root.kind_dir(kind));
            let listed = self.list_cached(cache, kind, root.space, extensions)?;
            let Ok(at) = listed.binary_search_by(|l| l.id.as_str().cmp(id)) else {
                if found.is_none()
                    && let Some(link) = escaping_folder(&listed, id)
                {
                    return Err(link.escape_error(&root.ai_dir).expect("an escape"));
                }
                continue;
            };
            let item = &listed[at];
            if let Some(escape) = item.escape_error(&root.ai_dir) {
                return Err(escape);
            }
            if found.is_none() {
                if !item.conflicts.is_empty() {
                    let mut paths = vec![item.path.clone()];
                    paths.extend(item.conflicts.iter().cloned());
                    return Err(SpaceError::Ambiguous {
                        kind,
                        id: id.to_owned(),
                        space: root.space,
                        paths,
                    });
                }
                found = Some((
                    crate::Location {
                        space: root.space,
                        path: item.path.clone(),
                    },
                    item.stamp,
                ));
            } else {
                shadowed.extend(
                    std::iter::once(&item.path)
                        .chain(&item.conflicts)
                        .map(|path| crate::Location {
                            space: root.space,
                            path: path.clone(),
                        }),
                );
            }
        }
        match found {
            Some((location, stamp)) => Ok((
                crate::Resolved {
                    kind,
                    id: id.to_owned(),
                    location,
                    shadowed,
                },
                stamp,
            )),
            None => Err(SpaceError::NotFound {
                kind,
                id: id.to_owned(),
                searched,
            }),
        }
    }
}

/// A listed link to a folder outside the space that `id` would lie under.
fn escaping_folder<'a>(listed: &'a [Listed], id: &str) -> Option<&'a Listed> {
    id.match_indices('/').find_map(|(end, _)| {
        let folder = &id[..end];
        let at = listed
            .binary_search_by(|l| l.id.as_str().cmp(folder))
            .ok()?;
        listed[at].escape.is_some().then(|| &listed[at])
    })
}

impl Tree {
    /// The last listing, if the watches say nothing has changed since.
    fn fresh(&mut self) -> Option<Arc<Vec<Listed>>> {
        #[cfg(target_os = "linux")]
        {
            let listed = self.listed.clone()?;
            let unchanged = self.watch.as_ref().is_some_and(inotify::Watch::quiet);
            if unchanged {
                return Some(listed);
            }
            self.listed = None;
            self.watch = None;
            None
        }
        #[cfg(not(target_os = "linux"))]
        None
    }
}

/// Re-`stat`s the listed files that are symbolic links (their targets are
/// not watched), copying the listing only if one changed. `None` if one is
/// gone, so the tree is listed again.
fn refresh_links(tree: &mut Tree, listed: Arc<Vec<Listed>>) -> Option<Arc<Vec<Listed>>> {
    let mut changed: Option<Vec<Listed>> = None;
    for &i in &tree.linked {
        let item = &listed[i];
        if item.escape.is_some() {
            continue;
        }
        match FileStamp::read(&item.path) {
            Ok(stamp) if stamp == item.stamp => {}
            Ok(stamp) => changed.get_or_insert_with(|| listed.as_ref().clone())[i].stamp = stamp,
            Err(_) => {
                tree.listed = None;
                return None;
            }
        }
    }
    match changed {
        Some(listing) => {
            let listing = Arc::new(listing);
            tree.listed = Some(listing.clone());
            Some(listing)
        }
        None => Some(listed),
    }
}

#[cfg(target_os = "linux")]
mod inotify {
    use std::cell::Cell;
    use std::collections::HashMap;
    use std::mem::MaybeUninit;
    use std::os::fd::OwnedFd;
    use std::path::Path;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{LazyLock, Mutex};

    use rustix::fs::inotify::{self, CreateFlags, ReadFlags, WatchFlags};
    use rustix::io::Errno;

    /// The one inotify instance of the process. Every tree and stamp set
    /// watches through it: a user has few instances (128 by default), and
    /// one per watcher would run out with a few projects or files.
    ///
    /// Each watched folder has a generation, raised by every event on it;
    /// a [`Watch`] remembers the generations its folders had when it added
    /// them, and is quiet while none has moved. A full queue raises the
    /// epoch, which every watch remembers too. Folders are never unwatched
    /// (the kernel drops the watch of a folder that goes); adding a
    /// watched folder again gives its existing watch.
    struct Shared {
        fd: OwnedFd,
        state: Mutex<State>,
    }

    #[derive(Default)]
    struct State {
        generations: HashMap<i32, u64, foldhash::fast::RandomState>,
        /// Every event read, on any folder.
        events: u64,
        epoch: u64,
        /// A failed read of the queue: nothing can be trusted any more.
        broken: bool,
    }

    static SHARED: LazyLock<Option<Shared>> = LazyLock::new(|| {
        let fd = inotify::init(CreateFlags::CLOEXEC | CreateFlags::NONBLOCK).ok()?;
        Some(Shared {
            fd,
            state: Mutex::new(State::default()),
        })
    });

    thread_local! {
        /// The [`super::RequestScope`]s open on this thread, and whether
        /// the queue was read in the outermost one.
        static SCOPE: Cell<(u32, bool)> = const { Cell::new((0, false)) };
    }

    pub(super) fn enter() {
        SCOPE.with(|scope| {
            let (depth, read) = scope.get();
            scope.set((depth + 1, read && depth > 0));
        });
    }

    pub(super) fn leave() {
        SCOPE.with(|scope| {
            let (depth, read) = scope.get();
            let depth = depth.saturating_sub(1);
            scope.set((depth, read && depth > 0));
        });
    }

    #[cfg(test)]
    thread_local! {
        /// Reads of the queue so far on this thread.
        pub(super) static READS: Cell<u64> = const { Cell::new(0) };
    }

    impl Shared {
        /// Reads every queued event into the generations, unless this
        /// thread's request scope has read them already; the state after.
        fn drain(&self) -> std::sync::MutexGuard<'_, State> {
            let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
            let in_scope = SCOPE.with(|scope| {
                let (depth, read) = scope.get();
                scope.set((depth, depth > 0));
                (depth > 0).then_some(read)
            });
            if in_scope == Some(true) {
                return state;
            }
            #[cfg(test)]
            READS.with(|reads| reads.set(reads.get() + 1));
            let mut buf = [MaybeUninit::<u8>::uninit(); 4096];
            let mut reader = inotify::Reader::new(&self.fd, &mut buf);
            loop {
                match reader.next() {
                    Ok(event) => {
                        state.events += 1;
                        if event.events().contains(ReadFlags::QUEUE_OVERFLOW) {
                            state.epoch += 1;
                        } else if event.events().contains(ReadFlags::IGNORED) {
                            // The folder went: whoever watched it must look
                            // again, and a later watch is a new one.
                            state.generations.remove(&event.wd());
                        } else {
                            *state.generations.entry(event.wd()).or_default() += 1;
                        }
                    }
                    Err(Errno::AGAIN) => return state,
                    Err(_) => {
                        state.broken = true;
                        return state;
                    }
                }
            }
        }
    }

    /// Every queued event read, how many there were so far and the
    /// epoch; `None` if nothing can be trusted.
    pub(super) fn events() -> Option<(u64, u64)> {
        let state = SHARED.as_ref()?.drain();
        (!state.broken).then_some((state.events, state.epoch))
    }

    /// The folders of one tree or stamp set, watched through the shared
    /// instance.
    pub(super) struct Watch {
        /// Each folder's watch and its generation when it was added.
        folders: Mutex<Vec<(i32, u64)>>,
        epoch: u64,
        /// False once a watch could not be added (the tree is then walked
        /// every time).
        complete: AtomicBool,
    }

    /// Changes that can alter a listing or a file's content.
    fn interesting() -> WatchFlags {
        WatchFlags::CREATE
            | WatchFlags::DELETE
            | WatchFlags::MODIFY
            | WatchFlags::CLOSE_WRITE
            | WatchFlags::MOVED_FROM
            | WatchFlags::MOVED_TO
            | WatchFlags::ATTRIB
            | WatchFlags::DELETE_SELF
            | WatchFlags::MOVE_SELF
    }

    impl Watch {
        pub(super) fn new() -> Option<Self> {
            let shared = SHARED.as_ref()?;
            // Events still queued can only make this watch look changed
            // once too often, so there is no need to read them here.
            let state = shared.state.lock().unwrap_or_else(|e| e.into_inner());
            if state.broken {
                return None;
            }
            Some(Self {
                folders: Mutex::new(Vec::new()),
                epoch: state.epoch,
                complete: AtomicBool::new(true),
            })
        }

        /// Watches one folder; called before the folder is read.
        pub(super) fn add(&self, path: &Path) -> bool {
            let Some(shared) = SHARED.as_ref() else {
                self.complete.store(false, Ordering::Relaxed);
                return false;
            };
            // Under the state's lock, so no drain runs between the watch
            // and the reading of its generation.
            let mut state = shared.state.lock().unwrap_or_else(|e| e.into_inner());
            match inotify::add_watch(&shared.fd, path, interesting()) {
                Ok(wd) => {
                    let generation = *state.generations.entry(wd).or_default();
                    drop(state);
                    self.folders
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .push((wd, generation));
                    true
                }
                Err(_) => {
                    self.complete.store(false, Ordering::Relaxed);
                    false
                }
            }
        }

        pub(super) fn complete(&self) -> bool {
            self.complete.load(Ordering::Relaxed)
        }

        /// Reads the queued events; true if none touched this watch's
        /// folders since they were added.
        pub(super) fn quiet(&self) -> bool {
            let Some(shared) = SHARED.as_ref() else {
                return false;
            };
            if !self.complete() {
                return false;
            }
            let state = shared.drain();
            if state.broken || state.epoch != self.epoch {
                return false;
            }
            self.folders
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .iter()
                .all(|(wd, generation)| state.generations.get(wd) == Some(generation))
        }
    }

    /// How many inotify instances this process holds.
    #[cfg(test)]
    pub(super) fn instances() -> usize {
        std::fs::read_dir("/proc/self/fd")
            .map(|fds| {
                fds.filter_map(Result::ok)
                    .filter_map(|fd| std::fs::read_link(fd.path()).ok())
                    .filter(|target| target.as_os_str() == "anon_inode:inotify")
                    .count()
            })
            .unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn write(path: &Path, content: &str) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, content).unwrap();
    }

    fn ids(listed: &[Listed]) -> Vec<&str> {
        listed.iter().map(|l| l.id.as_str()).collect()
    }

    #[test]
    fn follows_every_kind_of_change() {
        let tmp = tempfile::tempdir().unwrap();
        let tools = tmp.path().join(".ai/tools");
        write(&tools.join("a/one.py"), "1");
        let spaces = Spaces::new(None, None, tmp.path());
        let cache = ListingCache::new();
        let exts = vec![".py".to_owned()];
        let list = || {
            spaces
                .list_cached(&cache, ItemKind::Tool, Space::System, &exts)
                .unwrap()
        };

        let first = list();
        assert_eq!(ids(&first), ["a/one"]);
        let again = list();
        #[cfg(target_os = "linux")]
        assert!(
            Arc::ptr_eq(&first, &again),
            "an unchanged tree is not read again"
        );
        assert_eq!(ids(&again), ["a/one"]);

        write(&tools.join("a/two.py"), "2");
        assert_eq!(ids(&list()), ["a/one", "a/two"]);

        let before = list()[0].stamp;
        write(&tools.join("a/one.py"), "changed");
        assert_ne!(list()[0].stamp, before, "an edit is seen at once");

        write(&tools.join("b/c/deep.py"), "3");
        assert_eq!(ids(&list()), ["a/one", "a/two", "b/c/deep"]);
        write(&tools.join("b/c/deeper.py"), "4");
        assert_eq!(ids(&list()), ["a/one", "a/two", "b/c/deep", "b/c/deeper"]);

        std::fs::rename(tools.join("b"), tools.join("z")).unwrap();
        assert_eq!(ids(&list()), ["a/one", "a/two", "z/c/deep", "z/c/deeper"]);

        std::fs::remove_dir_all(tools.join("a")).unwrap();
        assert_eq!(ids(&list()), ["z/c/deep", "z/c/deeper"]);
    }

    #[test]
    fn a_missing_folder_is_listed_once_it_is_made() {
        let tmp = tempfile::tempdir().unwrap();
        let spaces = Spaces::new(None, None, tmp.path());
        let cache = ListingCache::new();
        let exts = vec![".py".to_owned()];
        let list = || {
            spaces
                .list_cached(&cache, ItemKind::Tool, Space::System, &exts)
                .unwrap()
        };
        // Neither `.ai` nor its `tools` folder is there yet.
        assert!(list().is_empty());
        assert!(list().is_empty());
        std::fs::create_dir(tmp.path().join(".ai")).unwrap();
        assert!(list().is_empty());
        let tools = tmp.path().join(".ai/tools");
        write(&tools.join("one.py"), "1");
        assert_eq!(ids(&list()), ["one"]);
        std::fs::remove_dir_all(&tools).unwrap();
        assert!(list().is_empty());
        assert!(list().is_empty());
        write(&tools.join("deep/two.py"), "2");
        assert_eq!(ids(&list()), ["deep/two"]);
    }

    #[test]
    fn stamps_follow_every_change_on_the_way_to_their_paths() {
        let tmp = tempfile::tempdir().unwrap();
        let base = tmp.path();
        let file = base.join(".ai/config/deep/one.yaml");
        let folder = base.join(".ai/keys");
        let paths = vec![file.clone(), folder.clone()];
        let cache = ListingCache::new();
        let stamps = || cache.stamps(&paths);
        let truth = || -> Vec<Option<FileStamp>> {
            paths.iter().map(|p| FileStamp::read(p).ok()).collect()
        };
        let check = |what: &str| {
            let seen = stamps();
            assert_eq!(*seen, truth(), "after {what}");
            seen
        };

        // No `.ai` folder yet: its making is seen from the folder above.
        let first = check("nothing");
        assert_eq!(*first, [None, None]);
        #[cfg(target_os = "linux")]
        assert!(
            Arc::ptr_eq(&first, &stamps()),
            "nothing changed, nothing read"
        );
        std::fs::create_dir(base.join(".ai")).unwrap();
        check("the .ai folder made");
        write(&file, "a");
        let made = check("the file made, folders and all");
        assert!(made[0].is_some());
        #[cfg(target_os = "linux")]
        assert!(Arc::ptr_eq(&made, &stamps()));
        write(&file, "bb");
        check("an edit");
        std::fs::create_dir(&folder).unwrap();
        check("the folder made");
        write(&folder.join("k.toml"), "key");
        check("a file added in the folder");
        std::fs::rename(base.join(".ai/config/deep"), base.join(".ai/config/moved")).unwrap();
        assert_eq!(check("a folder on the way renamed")[0], None);
        std::fs::rename(base.join(".ai/config/moved"), base.join(".ai/config/deep")).unwrap();
        assert!(check("renamed back")[0].is_some());
        std::fs::remove_dir_all(base.join(".ai")).unwrap();
        assert_eq!(*check("the .ai folder removed"), [None, None]);

        // A path that is a link is read every time: its target is not
        // watched.
        #[cfg(unix)]
        {
            let outside = tempfile::tempdir().unwrap();
            let target = outside.path().join("t.yaml");
            std::fs::write(&target, "1").unwrap();
            std::fs::create_dir_all(file.parent().unwrap()).unwrap();
            std::os::unix::fs::symlink(&target, &file).unwrap();
            check("a link made");
            std::fs::write(&target, "changed").unwrap();
            check("the link's target changed");
        }
    }

    /// A request reads the watches' queue once, however many checks it
    /// makes, and sees every change completed before it began; a change
    /// made while it is open is seen from the first check after it.
    #[cfg(target_os = "linux")]
    #[test]
    fn a_request_reads_the_queue_once_and_sees_what_came_before_it() {
        let tmp = tempfile::tempdir().unwrap();
        let file = tmp.path().join(".ai/config/one.yaml");
        let other = tmp.path().join(".ai/tools/a/two.py");
        write(&file, "a");
        write(&other, "2");
        let spaces = Spaces::new(None, None, tmp.path());
        let cache = ListingCache::new();
        let exts = vec![".py".to_owned()];
        let paths = vec![file.clone()];
        let reads = || inotify::READS.with(std::cell::Cell::get);
        let first = cache.stamps(&paths);
        let listed = spaces
            .list_cached(&cache, ItemKind::Tool, Space::System, &exts)
            .unwrap();

        write(&file, "bb");
        let before = reads();
        let during = {
            let _request = RequestScope::begin();
            let seen = cache.stamps(&paths);
            assert_ne!(seen[0], first[0], "a change before the request is seen");
            assert_eq!(seen[0], FileStamp::read(&file).ok());
            assert_eq!(reads(), before + 1);
            write(&file, "ccc");
            write(&other, "22");
            // Whether these see the two changes depends on other threads'
            // reads (other tests run beside this one); that they read
            // nothing themselves does not.
            for _ in 0..10 {
                cache.stamps(&paths);
                spaces
                    .list_cached(&cache, ItemKind::Tool, Space::System, &exts)
                    .unwrap();
                assert!(cache.quiet().is_some());
            }
            {
                let _nested = RequestScope::begin();
                cache.stamps(&paths);
            }
            cache.stamps(&paths);
            assert_eq!(reads(), before + 1, "one read for the whole request");
            seen
        };
        let after = cache.stamps(&paths);
        assert_ne!(
            after[0], during[0],
            "the change made during it, once it ends"
        );
        assert_eq!(after[0], FileStamp::read(&file).ok());
        let listed_after = spaces
            .list_cached(&cache, ItemKind::Tool, Space::System, &exts)
            .unwrap();
        assert_ne!(listed_after[0].stamp, listed[0].stamp);
        assert!(reads() > before + 1, "out of the scope, each check reads");

        // Another thread's checks are not in this thread's scope.
        let _request = RequestScope::begin();
        cache.stamps(&paths);
        write(&file, "dddd");
        std::thread::scope(|s| {
            s.spawn(|| assert_eq!(cache.stamps(&paths)[0], FileStamp::read(&file).ok()));
        });
    }

    /// However many trees and stamp sets are watched, the process holds
    /// one inotify instance, and each set still sees its own changes.
    #[cfg(target_os = "linux")]
    #[test]
    fn every_watch_shares_one_inotify_instance() {
        let dir = tempfile::tempdir().unwrap();
        let cache = ListingCache::new();
        let mut sets = Vec::new();
        for n in 0..300 {
            let file = dir.path().join(format!("p{n}/.ai/config/x.yaml"));
            write(&file, "a: 1");
            sets.push(vec![file]);
        }
        let first: Vec<_> = sets.iter().map(|set| cache.stamps(set)).collect();
        assert!(first.iter().all(|stamps| stamps[0].is_some()));
        assert!(
            inotify::instances() <= 1,
            "{} inotify instances",
            inotify::instances()
        );
        for (n, set) in sets.iter().enumerate() {
            assert!(
                Arc::ptr_eq(&cache.stamps(set), &first[n]),
                "set {n} read again"
            );
        }
        // A change to one set's file is seen by that set alone.
        std::thread::sleep(std::time::Duration::from_millis(20));
        write(&sets[7][0], "a: 22");
        for (n, set) in sets.iter().enumerate() {
            let again = cache.stamps(set);
            if n == 7 {
                assert_ne!(again[0], first[n][0]);
            } else {
                assert!(Arc::ptr_eq(&again, &first[n]), "set {n} read again");
            }
        }
    }

    #[test]
    fn an_unwatched_cache_walks_every_time() {
        let tmp = tempfile::tempdir().unwrap();
        write(&tmp.path().join(".ai/tools/a.py"), "1");
        let spaces = Spaces::new(None, None, tmp.path());
        let cache = ListingCache::unwatched();
        let exts = vec![".py".to_owned()];
        let first = spaces
            .list_cached(&cache, ItemKind::Tool, Space::System, &exts)
            .unwrap();
        let second = spaces
            .list_cached(&cache, ItemKind::Tool, Space::System, &exts)
            .unwrap();
        assert!(!Arc::ptr_eq(&first, &second));
        write(&tmp.path().join(".ai/tools/b.py"), "2");
        assert_eq!(
            ids(&spaces
                .list_cached(&cache, ItemKind::Tool, Space::System, &exts)
                .unwrap()),
            ["a", "b"]
        );
    }

    #[test]
    fn resolves_through_listings_like_resolve() {
        let tmp = tempfile::tempdir().unwrap();
        let (project, system) = (tmp.path().join("p"), tmp.path().join("s"));
        write(&project.join(".ai/tools/a/b.py"), "1");
        write(&system.join(".ai/tools/a/b.yaml"), "2");
        write(&system.join(".ai/tools/only/system.py"), "3");
        let spaces = Spaces::new(Some(&project), None, &system);
        let cache = ListingCache::new();
        let exts = vec![".py".to_owned(), ".yaml".to_owned()];
        let all = [Space::Project, Space::User, Space::System];
        for id in ["a/b", "only/system"] {
            let (cached, _) = spaces
                .resolve_cached(&cache, ItemKind::Tool, id, &exts, &all)
                .unwrap();
            assert_eq!(
                cached,
                spaces.resolve(ItemKind::Tool, id, &exts, None).unwrap()
            );
        }
        let (system_only, _) = spaces
            .resolve_cached(&cache, ItemKind::Tool, "a/b", &exts, &[Space::System])
            .unwrap();
        assert_eq!(system_only.location.space, Space::System);
        assert!(matches!(
            spaces.resolve_cached(&cache, ItemKind::Tool, "nope", &exts, &all),
            Err(SpaceError::NotFound { .. })
        ));
        write(&project.join(".ai/tools/a/b.yaml"), "twice");
        assert!(matches!(
            spaces.resolve_cached(&cache, ItemKind::Tool, "a/b", &exts, &all),
            Err(SpaceError::Ambiguous { .. })
        ));
    }

    #[cfg(unix)]
    #[test]
    fn linked_files_are_checked_every_time() {
        let tmp = tempfile::tempdir().unwrap();
        let outside = tmp.path().join(".ai/src/tool.py");
        write(&outside, "1");
        let tools = tmp.path().join(".ai/tools");
        std::fs::create_dir_all(&tools).unwrap();
        std::os::unix::fs::symlink(&outside, tools.join("tool.py")).unwrap();
        let spaces = Spaces::new(None, None, tmp.path());
        let cache = ListingCache::new();
        let exts = vec![".py".to_owned()];
        let stamp = || {
            spaces
                .list_cached(&cache, ItemKind::Tool, Space::System, &exts)
                .unwrap()[0]
                .stamp
        };
        let before = stamp();
        write(&outside, "changed outside the watched folders");
        assert_ne!(stamp(), before);
    }
}
