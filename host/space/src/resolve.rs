//! Finding items through the spaces.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::{ItemKind, Space, SpaceError, Spaces};

/// Where one file of an item is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Location {
    pub space: Space,
    pub path: PathBuf,
}

/// The file an id resolved to, and the files of the same id it hides in
/// lower-precedence spaces.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Resolved {
    pub kind: ItemKind,
    pub id: String,
    pub location: Location,
    pub shadowed: Vec<Location>,
}

/// One item found by listing a space.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listed {
    pub kind: ItemKind,
    pub space: Space,
    pub id: String,
    pub path: PathBuf,
    /// Other files in the same space with the same id (an error to report).
    pub conflicts: Vec<PathBuf>,
}

impl Spaces {
    /// Resolves `id` to a file, trying `extensions` in order in each space,
    /// highest precedence first, or only in `only`.
    ///
    /// Two files of the id in one space (say `x.py` and `x.yaml`) are an
    /// error listing both, not a silent pick.
    pub fn resolve(
        &self,
        kind: ItemKind,
        id: &str,
        extensions: &[String],
        only: Option<Space>,
    ) -> Result<Resolved, SpaceError> {
        crate::validate_id(id)?;
        let mut found: Option<Location> = None;
        let mut shadowed = Vec::new();
        let mut searched = Vec::new();
        for root in self.roots().iter().filter(|r| only.is_none_or(|s| s == r.space)) {
            let dir = root.kind_dir(kind);
            let candidates: Vec<PathBuf> = extensions
                .iter()
                .map(|ext| dir.join(format!("{id}{ext}")))
                .filter(|p| p.is_file())
                .collect();
            searched.push(dir);
            if found.is_none() {
                if candidates.len() > 1 {
                    return Err(SpaceError::Ambiguous {
                        kind,
                        id: id.to_owned(),
                        space: root.space,
                        paths: candidates,
                    });
                }
                if let Some(path) = candidates.into_iter().next() {
                    found = Some(Location { space: root.space, path });
                }
            } else {
                shadowed.extend(candidates.into_iter().map(|path| Location { space: root.space, path }));
            }
        }
        match found {
            Some(location) => Ok(Resolved {
                kind,
                id: id.to_owned(),
                location,
                shadowed,
            }),
            None => Err(SpaceError::NotFound {
                kind,
                id: id.to_owned(),
                searched,
            }),
        }
    }

    /// Every item of `kind` in `space`, sorted by id: each file under
    /// `.ai/<folder>/` whose extension is in `extensions`, skipping names
    /// that start with `.` or `_` and dependency or cache folders.
    pub fn list(&self, kind: ItemKind, space: Space, extensions: &[String]) -> Result<Vec<Listed>, SpaceError> {
        let Some(root) = self.root(space) else { return Ok(Vec::new()) };
        let dir = root.kind_dir(kind);
        if !dir.is_dir() {
            return Ok(Vec::new());
        }
        let mut by_id: BTreeMap<String, Vec<(usize, PathBuf)>> = BTreeMap::new();
        let walker = walkdir::WalkDir::new(&dir)
            .follow_links(true)
            .sort_by_file_name()
            .into_iter()
            .filter_entry(|e| e.depth() == 0 || !skipped_name(e.file_name().to_str()));
        for entry in walker {
            let entry = match entry {
                Ok(entry) => entry,
                Err(e) if e.loop_ancestor().is_some() => continue,
                Err(e) => {
                    let path = e.path().map(Path::to_owned).unwrap_or_else(|| dir.clone());
                    return Err(SpaceError::io(path, e.into()));
                }
            };
            if !entry.file_type().is_file() {
                continue;
            }
            let Some((id, rank)) = item_id(&dir, entry.path(), extensions) else { continue };
            by_id.entry(id).or_default().push((rank, entry.into_path()));
        }
        Ok(by_id
            .into_iter()
            .map(|(id, mut files)| {
                files.sort();
                let mut paths = files.into_iter().map(|(_, p)| p);
                let path = paths.next().expect("at least one file per id");
                Listed {
                    kind,
                    space,
                    id,
                    path,
                    conflicts: paths.collect(),
                }
            })
            .collect())
    }
}

/// Names never listed: hidden and private files, and folders of caches and
/// dependencies that sit beside tools.
fn skipped_name(name: Option<&str>) -> bool {
    match name {
        None => true,
        Some(n) => n.starts_with('.') || n.starts_with('_') || n == "node_modules",
    }
}

/// The id of `path` under `dir` and the rank of its extension, if the
/// extension is one of `extensions`. Only the last suffix is an extension:
/// `foo.config-schema.yaml` has id `foo.config-schema`.
fn item_id(dir: &Path, path: &Path, extensions: &[String]) -> Option<(String, usize)> {
    let relative = path.strip_prefix(dir).ok()?.to_str()?;
    let dot = relative.rfind('.').filter(|&i| !relative[i..].contains('/'))?;
    let rank = extensions.iter().position(|e| *e == relative[dot..])?;
    let id = relative[..dot].replace(std::path::MAIN_SEPARATOR, "/");
    crate::validate_id(&id).ok()?;
    Some((id, rank))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    fn exts() -> Vec<String> {
        vec![".py".into(), ".yaml".into()]
    }

    fn write(path: &Path) {
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, "x").unwrap();
    }

    #[test]
    fn project_shadows_system() {
        let tmp = tempfile::tempdir().unwrap();
        let (project, system) = (tmp.path().join("p"), tmp.path().join("s"));
        write(&project.join(".ai/tools/a/b.py"));
        write(&system.join(".ai/tools/a/b.yaml"));
        let spaces = Spaces::new(Some(&project), None, &system);
        let r = spaces.resolve(ItemKind::Tool, "a/b", &exts(), None).unwrap();
        assert_eq!(r.location.space, Space::Project);
        assert_eq!(r.shadowed, vec![Location { space: Space::System, path: system.join(".ai/tools/a/b.yaml") }]);
        let only = spaces.resolve(ItemKind::Tool, "a/b", &exts(), Some(Space::System)).unwrap();
        assert_eq!(only.location.space, Space::System);
    }

    #[test]
    fn two_files_of_one_id_in_a_space_are_an_error() {
        let tmp = tempfile::tempdir().unwrap();
        write(&tmp.path().join(".ai/tools/x.py"));
        write(&tmp.path().join(".ai/tools/x.yaml"));
        let spaces = Spaces::new(None, None, tmp.path());
        let err = spaces.resolve(ItemKind::Tool, "x", &exts(), None).unwrap_err();
        assert!(matches!(err, SpaceError::Ambiguous { ref paths, .. } if paths.len() == 2), "{err}");
        let listed = spaces.list(ItemKind::Tool, Space::System, &exts()).unwrap();
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0].conflicts.len(), 1);
    }

    #[test]
    fn listing_skips_hidden_private_and_foreign_files() {
        let tmp = tempfile::tempdir().unwrap();
        for f in ["a.py", "_private.py", ".hidden/x.py", "__pycache__/a.py", "lib/b.py", "readme.txt", "c.config-schema.yaml"] {
            write(&tmp.path().join(".ai/tools").join(f));
        }
        let spaces = Spaces::new(None, None, tmp.path());
        let ids: Vec<_> = spaces.list(ItemKind::Tool, Space::System, &exts()).unwrap().into_iter().map(|l| l.id).collect();
        assert_eq!(ids, ["a", "c.config-schema", "lib/b"]);
    }

    #[test]
    fn not_found_lists_where_it_looked() {
        let tmp = tempfile::tempdir().unwrap();
        let spaces = Spaces::new(Some(&tmp.path().join("p")), None, tmp.path());
        let err = spaces.resolve(ItemKind::Tool, "nope", &exts(), None).unwrap_err();
        assert!(matches!(err, SpaceError::NotFound { ref searched, .. } if searched.len() == 2));
    }
}
