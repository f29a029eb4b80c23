//! What the files of a folder looked like when they were last read, so
//! the next build of its manifest (or the next sync of it to a manifest)
//! reads only what changed: per path, the file's length, modification
//! and change times and inode, with the manifest entry its bytes gave
//! (an `item_source` hash for an item, a blob hash for a file).
//!
//! A stamp is trusted only for a file last modified before the stamps
//! were taken, less a margin wider than any file system's clock tick: a
//! file written within the tick it was read in could change again with
//! every stamped fact the same, so such a file is read again (git's
//! "racy" entries, handled the same way). The change time cannot be set
//! from user space, so a file whose modification time was put back still
//! differs from its stamp.

use std::collections::BTreeMap;
use std::fs::Metadata;
use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// How far before the taking a file must have been modified for its
/// stamp to be trusted.
const MARGIN: Duration = Duration::from_secs(2);

/// One file as it was read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stamp {
    len: u64,
    mtime: i64,
    ctime: i64,
    ino: u64,
    /// The manifest entry of the bytes read.
    pub entry: String,
}

impl Stamp {
    /// The stamp of a file with metadata `meta` (taken before its bytes
    /// were read) whose bytes gave `entry`.
    pub fn of(meta: &Metadata, entry: String) -> Stamp {
        let (mtime, ctime, ino) = facts(meta);
        Stamp {
            len: meta.len(),
            mtime,
            ctime,
            ino,
            entry,
        }
    }

    fn matches(&self, meta: &Metadata) -> bool {
        let (mtime, ctime, ino) = facts(meta);
        meta.is_file()
            && self.len == meta.len()
            && self.mtime == mtime
            && self.ctime == ctime
            && self.ino == ino
    }
}

#[cfg(unix)]
fn facts(meta: &Metadata) -> (i64, i64, u64) {
    use std::os::unix::fs::MetadataExt;
    let ns = |s: i64, n: i64| s.saturating_mul(1_000_000_000).saturating_add(n);
    (
        ns(meta.mtime(), meta.mtime_nsec()),
        ns(meta.ctime(), meta.ctime_nsec()),
        meta.ino(),
    )
}

/// Without change times and inodes nothing can be trusted: every stamp
/// differs.
#[cfg(not(unix))]
fn facts(_meta: &Metadata) -> (i64, i64, u64) {
    (i64::MIN, i64::MIN, u64::MAX)
}

/// The stamps of one folder's files, by relative path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stamps {
    /// Nanoseconds since the epoch: a file modified at or after this is
    /// read again whatever its stamp says.
    taken: i64,
    files: BTreeMap<String, Stamp>,
    /// The manifest (its hash, in hex) the stamped entries make up, when
    /// they make up one: then what changed since is read from two sets
    /// of stamps without the manifest.
    manifest: Option<String>,
}

impl Stamps {
    /// New, empty stamps, taken now: call before the files are read.
    pub fn begin() -> Stamps {
        let at = SystemTime::now()
            .checked_sub(MARGIN)
            .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
            .map_or(0, |d| d.as_nanos() as i64);
        Stamps {
            taken: at,
            files: BTreeMap::new(),
            manifest: None,
        }
    }

    /// The entry of the file at `rel` with metadata `meta`, when its
    /// stamp says its bytes are those it had and it is old enough to be
    /// trusted.
    pub fn known(&self, rel: &str, meta: &Metadata) -> Option<&Stamp> {
        let stamp = self.files.get(rel)?;
        (stamp.mtime < self.taken && stamp.matches(meta)).then_some(stamp)
    }

    pub fn insert(&mut self, rel: String, stamp: Stamp) {
        self.files.insert(rel, stamp);
        self.manifest = None;
    }

    pub fn remove(&mut self, rel: &str) {
        self.files.remove(rel);
        self.manifest = None;
    }

    /// Says that the stamped paths and entries are exactly those of the
    /// manifest `hash` (hex); any later change unsays it.
    pub fn make_up(&mut self, hash: String) {
        self.manifest = Some(hash);
    }

    /// The manifest the stamps make up, if said.
    pub fn manifest(&self) -> Option<&str> {
        self.manifest.as_deref()
    }

    /// What differs from `earlier`, path by path in order: each path
    /// whose entry is new or other (with it) or gone (`None`).
    pub fn changes_since<'a>(&'a self, earlier: &'a Stamps) -> Vec<(&'a str, Option<&'a str>)> {
        use std::cmp::Ordering;
        let mut changes = Vec::new();
        let mut old = earlier.files.iter().peekable();
        let mut new = self.files.iter().peekable();
        loop {
            let order = match (old.peek(), new.peek()) {
                (None, None) => break,
                (Some(_), None) => Ordering::Less,
                (None, Some(_)) => Ordering::Greater,
                (Some((o, _)), Some((n, _))) => o.as_str().cmp(n.as_str()),
            };
            match order {
                Ordering::Less => {
                    let (path, _) = old.next().expect("peeked");
                    changes.push((path.as_str(), None));
                }
                Ordering::Greater => {
                    let (path, stamp) = new.next().expect("peeked");
                    changes.push((path.as_str(), Some(stamp.entry.as_str())));
                }
                Ordering::Equal => {
                    let (_, was) = old.next().expect("peeked");
                    let (path, stamp) = new.next().expect("peeked");
                    if was.entry != stamp.entry {
                        changes.push((path.as_str(), Some(stamp.entry.as_str())));
                    }
                }
            }
        }
        changes
    }

    /// Every stamped path's entry.
    pub fn entries(&self) -> impl Iterator<Item = (&str, &str)> {
        self.files
            .iter()
            .map(|(p, s)| (p.as_str(), s.entry.as_str()))
    }

    pub fn len(&self) -> usize {
        self.files.len()
    }

    pub fn is_empty(&self) -> bool {
        self.files.is_empty()
    }

    /// The stamps as text: a first line `rye-stamps 1 <taken>` (and the
    /// manifest they make up), then a line a file, `<len> <mtime> <ctime>
    /// <inode> <entry>` and a tab before its path. (A path holding a line
    /// break is left out: its file is read again next time, and the
    /// stamps then make up no manifest.) Ten thousand files take about a
    /// megabyte and a millisecond, where JSON took tens.
    pub fn to_text(&self) -> String {
        use std::fmt::Write as _;
        let unwritable =
            |rel: &str, s: &Stamp| rel.contains('\n') || s.entry.contains(['\t', '\n', ' ']);
        let mut out = String::with_capacity(64 + self.files.len() * 140);
        let _ = write!(out, "{HEADER} {}", self.taken);
        match &self.manifest {
            Some(hash)
                if !hash.contains([' ', '\n'])
                    && !self.files.iter().any(|(rel, s)| unwritable(rel, s)) =>
            {
                let _ = writeln!(out, " {hash}");
            }
            _ => out.push('\n'),
        }
        for (rel, s) in &self.files {
            if unwritable(rel, s) {
                continue;
            }
            let _ = writeln!(
                out,
                "{} {} {} {} {}\t{rel}",
                s.len, s.mtime, s.ctime, s.ino, s.entry
            );
        }
        out
    }

    /// Stamps from text [`Stamps::to_text`] wrote; `None` for anything
    /// else (stamps are a cache: bad ones are dropped, never trusted).
    pub fn from_text(text: &str) -> Option<Stamps> {
        let mut lines = text.split_terminator('\n');
        let mut header = lines.next()?.strip_prefix(HEADER)?.trim().split(' ');
        let taken = header.next()?.parse().ok()?;
        let manifest = header.next().map(str::to_owned);
        if header.next().is_some() {
            return None;
        }
        // Written in order, so the map is built in one go rather than
        // path by path.
        let mut files = Vec::new();
        for line in lines {
            let (facts, rel) = line.split_once('\t')?;
            let mut facts = facts.split(' ');
            let len = facts.next()?.parse::<u64>().ok()?;
            let mtime = facts.next()?.parse::<i64>().ok()?;
            let ctime = facts.next()?.parse::<i64>().ok()?;
            let ino = facts.next()?.parse::<u64>().ok()?;
            let entry = facts.next()?.to_owned();
            if facts.next().is_some() || rel.is_empty() {
                return None;
            }
            files.push((
                rel.to_owned(),
                Stamp {
                    len,
                    mtime,
                    ctime,
                    ino,
                    entry,
                },
            ));
        }
        let files: BTreeMap<String, Stamp> = files.into_iter().collect();
        Some(Stamps {
            taken,
            files,
            manifest,
        })
    }

    /// The stamps in `file`, if it holds good ones.
    pub fn load(file: &Path) -> Option<Stamps> {
        Stamps::from_text(&std::fs::read_to_string(file).ok()?)
    }

    /// Writes the stamps to `file` (through a temporary file renamed into
    /// place).
    pub fn save(&self, file: &Path) -> std::io::Result<()> {
        if let Some(parent) = file.parent() {
            std::fs::create_dir_all(parent)?;
        }
        let temp = file.with_extension(format!("tmp.{}", std::process::id()));
        std::fs::write(&temp, self.to_text())?;
        std::fs::rename(&temp, file)
    }

    /// The same stamps, taken now: for a folder no one but the stamper
    /// has written since the stamps began (a node's own workspace,
    /// which it has just brought to a snapshot), so that a file stamped
    /// more than the margin before now is trusted. Whatever changes it
    /// after this changes it at least the margin after such a file's
    /// modification time, which therefore differs from its stamp.
    pub fn retaken(mut self) -> Stamps {
        let now = Stamps::begin().taken;
        self.taken = self.taken.max(now);
        self
    }

    /// The same stamps, taken `by` nanoseconds later (for tests that
    /// need stamps old enough to be trusted).
    #[doc(hidden)]
    pub fn later(mut self, by: i64) -> Stamps {
        self.taken += by;
        self
    }

    /// Whether these stamps, taken after `earlier`, add nothing to them:
    /// the same files stamped the same, none of them too new for
    /// `earlier` to vouch for.
    pub fn says_what(&self, earlier: &Stamps) -> bool {
        self.files == earlier.files
            && self.manifest == earlier.manifest
            && self.files.values().all(|s| s.mtime < earlier.taken)
    }

    /// The stamp of `rel`, if there is one.
    pub fn get(&self, rel: &str) -> Option<&Stamp> {
        self.files.get(rel)
    }
}

/// The first word of a stamps file.
const HEADER: &str = "rye-stamps 1";

#[cfg(test)]
mod tests {
    use super::*;

    /// Stamps of a folder its stamper alone wrote, taken again once
    /// the writing is done, trust what was written more than the margin
    /// before, and not what was written since.
    #[test]
    fn stamps_taken_again_trust_what_was_written_before_the_margin() {
        let dir = tempfile::tempdir().unwrap();
        let (older, newer) = (dir.path().join("older.md"), dir.path().join("newer.md"));
        let mut stamps = Stamps::begin();
        stamps.taken -= 60_000_000_000;
        for file in [&older, &newer] {
            std::fs::write(file, "text").unwrap();
        }
        std::fs::File::options()
            .write(true)
            .open(&older)
            .unwrap()
            .set_modified(std::time::SystemTime::now() - Duration::from_secs(30))
            .unwrap();
        for (rel, file) in [("older.md", &older), ("newer.md", &newer)] {
            let meta = std::fs::symlink_metadata(file).unwrap();
            stamps.insert(rel.into(), Stamp::of(&meta, rel.into()));
            assert!(stamps.known(rel, &meta).is_none(), "after the first taking");
        }
        let stamps = stamps.retaken();
        let meta = |file: &Path| std::fs::symlink_metadata(file).unwrap();
        assert_eq!(
            stamps.known("older.md", &meta(&older)).unwrap().entry,
            "older.md"
        );
        assert!(
            stamps.known("newer.md", &meta(&newer)).is_none(),
            "within the margin"
        );
        // Never taken earlier than it was.
        let later = stamps.clone().later(3_600_000_000_000);
        assert_eq!(later.clone().retaken().taken, later.taken);
    }

    #[test]
    fn a_file_is_trusted_only_unchanged_and_older_than_the_taking() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("a.md");
        std::fs::write(&file, "one").unwrap();
        let meta = std::fs::symlink_metadata(&file).unwrap();
        // Just written: within the margin, so not trusted.
        let mut fresh = Stamps::begin();
        fresh.insert("a.md".into(), Stamp::of(&meta, "e1".into()));
        assert!(fresh.known("a.md", &meta).is_none());
        // Taken long after the write: trusted while nothing changes.
        let mut old = Stamps::begin();
        old.taken += 10_000_000_000;
        old.insert("a.md".into(), Stamp::of(&meta, "e1".into()));
        assert_eq!(old.known("a.md", &meta).unwrap().entry, "e1");
        assert!(old.known("b.md", &meta).is_none());
        // Rewritten with the same length: the change time moved.
        std::thread::sleep(Duration::from_millis(20));
        std::fs::write(&file, "two").unwrap();
        let now = std::fs::symlink_metadata(&file).unwrap();
        assert!(old.known("a.md", &now).is_none());
        // Through text and back, and bad text is no stamps.
        assert_eq!(Stamps::from_text(&old.to_text()), Some(old.clone()));
        for bad in [
            "",
            "{\"taken\": 1}",
            "rye-stamps 1 x\n",
            "rye-stamps 1 5\n1 2 3 4\tmissing-entry\n",
            "rye-stamps 1 5\n1 2 3 4 e extra\ta\n",
            "rye-stamps 1 5\n-1 2 3 4 e\ta\n",
        ] {
            assert_eq!(Stamps::from_text(bad), None, "{bad:?}");
        }
        let saved = dir.path().join("s/stamps.json");
        old.save(&saved).unwrap();
        assert_eq!(Stamps::load(&saved), Some(old));
        std::fs::write(&saved, "{").unwrap();
        assert_eq!(Stamps::load(&saved), None);
    }

    #[test]
    fn what_changed_between_two_takings_and_the_manifest_they_make_up() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("a");
        std::fs::write(&file, "a").unwrap();
        let meta = std::fs::symlink_metadata(&file).unwrap();
        let stamps = |entries: &[(&str, &str)]| {
            let mut s = Stamps::begin();
            for (rel, entry) in entries {
                s.insert((*rel).into(), Stamp::of(&meta, (*entry).into()));
            }
            s
        };
        let mut before = stamps(&[("a", "1"), ("b", "2"), ("d", "4")]);
        let after = stamps(&[("b", "2"), ("c", "3"), ("d", "5"), ("e", "6")]);
        assert_eq!(
            after.changes_since(&before),
            vec![
                ("a", None),
                ("c", Some("3")),
                ("d", Some("5")),
                ("e", Some("6"))
            ]
        );
        assert!(after.changes_since(&after).is_empty());
        assert!(stamps(&[]).changes_since(&stamps(&[])).is_empty());

        // The manifest goes through text, and any change unsays it.
        before.make_up("abc".into());
        let again = Stamps::from_text(&before.to_text()).unwrap();
        assert_eq!(again.manifest(), Some("abc"));
        assert!(!before.says_what(&stamps(&[("a", "1"), ("b", "2"), ("d", "4")])));
        before.remove("d");
        assert_eq!(before.manifest(), None);
        // Stamps that cannot write every path make up no manifest.
        let mut odd = stamps(&[("line\nbreak", "1"), ("b", "2")]);
        odd.make_up("abc".into());
        let read = Stamps::from_text(&odd.to_text()).unwrap();
        assert_eq!((read.manifest(), read.len()), (None, 1));
        assert_eq!(Stamps::from_text("rye-stamps 1 5 h extra\n"), None);
    }
}
