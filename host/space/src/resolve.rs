//! Finding items through the spaces.

use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::{FileStamp, ItemKind, Space, SpaceError, Spaces};

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
    /// The file's stamp when it was listed.
    pub stamp: FileStamp,
    /// Other files in the same space with the same id (an error to report).
    pub conflicts: Vec<PathBuf>,
    /// For a symbolic link out of the space, where it leads: such an entry
    /// is no item, only an error to report (a link to a folder outside is
    /// listed under the folder's id).
    pub escape: Option<PathBuf>,
}

impl Listed {
    /// The error an escaping entry stands for, naming the link.
    pub fn escape_error(&self, space_dir: &Path) -> Option<SpaceError> {
        self.escape
            .clone()
            .map(|target| crate::escape_error(space_dir, &self.path, target))
    }
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
        for root in self
            .roots()
            .iter()
            .filter(|r| only.is_none_or(|s| s == r.space))
        {
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
                    if let Some(target) = crate::escape_of(&root.ai_dir, &path) {
                        return Err(crate::escape_error(&root.ai_dir, &path, target));
                    }
                    found = Some(Location {
                        space: root.space,
                        path,
                    });
                }
            } else {
                shadowed.extend(candidates.into_iter().map(|path| Location {
                    space: root.space,
                    path,
                }));
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
    /// Symbolic links are followed (a link back up the tree is skipped);
    /// each file is `stat`ed once, for its stamp.
    pub fn list(
        &self,
        kind: ItemKind,
        space: Space,
        extensions: &[String],
    ) -> Result<Vec<Listed>, SpaceError> {
        let Some(root) = self.root(space) else {
            return Ok(Vec::new());
        };
        let dir = root.kind_dir(kind);
        if !dir.is_dir() {
            return Ok(Vec::new());
        }
        let found = crate::walk::list_files(&dir, extensions, &|_| true)?;
        Ok(group(kind, space, found)
            .into_iter()
            .map(|(listed, _)| listed)
            .collect())
    }
}

/// Sorts found files by id and extension rank and folds files of one id
/// into the first one's conflicts; keeps, per item, whether its file is a
/// symbolic link.
pub(crate) fn group(
    kind: ItemKind,
    space: Space,
    mut found: crate::walk::Found,
) -> Vec<(Listed, bool)> {
    found.sort_by(|a, b| (&a.0, a.1).cmp(&(&b.0, b.1)));
    let mut listed: Vec<(Listed, bool)> = Vec::with_capacity(found.len());
    for (id, rank, path, stamp, linked, escape) in found {
        match listed.last_mut() {
            // A folder and a file may share an id (`x/` beside `x.md`).
            Some((last, _)) if last.id == id && rank == crate::walk::FOLDER_RANK => {}
            Some((last, _)) if last.id == id => last.conflicts.push(path),
            _ => listed.push((
                Listed {
                    kind,
                    space,
                    id,
                    path,
                    stamp,
                    conflicts: Vec::new(),
                    escape,
                },
                linked,
            )),
        }
    }
    listed
}

/// The extension of `path` with its dot (`.py`), without allocating: only
/// the last suffix counts, and a dotted folder name is not an extension.
pub fn extension_of(path: &Path) -> Option<&str> {
    let text = path.as_os_str().to_str()?;
    let name = text.rsplit(std::path::MAIN_SEPARATOR).next()?;
    name.rfind('.').filter(|&i| i > 0).map(|i| &name[i..])
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    fn exts() -> Vec<String> {
        vec![".py".into(), ".yaml".into()]
    }

    fn ids(spaces: &Spaces) -> Vec<String> {
        let listed = spaces.list(ItemKind::Tool, Space::System, &exts()).unwrap();
        listed.into_iter().map(|l| l.id).collect()
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
        let r = spaces
            .resolve(ItemKind::Tool, "a/b", &exts(), None)
            .unwrap();
        assert_eq!(r.location.space, Space::Project);
        assert_eq!(
            r.shadowed,
            vec![Location {
                space: Space::System,
                path: system.join(".ai/tools/a/b.yaml")
            }]
        );
        let only = spaces
            .resolve(ItemKind::Tool, "a/b", &exts(), Some(Space::System))
            .unwrap();
        assert_eq!(only.location.space, Space::System);
    }

    #[test]
    fn two_files_of_one_id_in_a_space_are_an_error() {
        let tmp = tempfile::tempdir().unwrap();
        write(&tmp.path().join(".ai/tools/x.py"));
        write(&tmp.path().join(".ai/tools/x.yaml"));
        let spaces = Spaces::new(None, None, tmp.path());
        let err = spaces
            .resolve(ItemKind::Tool, "x", &exts(), None)
            .unwrap_err();
        assert!(
            matches!(err, SpaceError::Ambiguous { ref paths, .. } if paths.len() == 2),
            "{err}"
        );
        let listed = spaces.list(ItemKind::Tool, Space::System, &exts()).unwrap();
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0].conflicts.len(), 1);
    }

    #[test]
    fn listing_skips_hidden_private_and_foreign_files() {
        let tmp = tempfile::tempdir().unwrap();
        for f in [
            "a.py",
            "_private.py",
            ".hidden/x.py",
            "__pycache__/a.py",
            "lib/b.py",
            "readme.txt",
            "c.config-schema.yaml",
        ] {
            write(&tmp.path().join(".ai/tools").join(f));
        }
        let spaces = Spaces::new(None, None, tmp.path());
        assert_eq!(ids(&spaces), ["a", "c.config-schema", "lib/b"]);
    }

    #[cfg(unix)]
    #[test]
    fn symlinks_are_followed_but_loops_are_not() {
        let tmp = tempfile::tempdir().unwrap();
        write(&tmp.path().join(".ai/elsewhere/linked.py"));
        let tools = tmp.path().join(".ai/tools");
        write(&tools.join("a/b.py"));
        std::os::unix::fs::symlink(tmp.path().join(".ai/elsewhere"), tools.join("ext")).unwrap();
        std::os::unix::fs::symlink(&tools, tools.join("a/loop")).unwrap();
        let spaces = Spaces::new(None, None, tmp.path());
        assert_eq!(ids(&spaces), ["a/b", "ext/linked"]);
    }

    #[cfg(unix)]
    #[test]
    fn links_out_of_the_space_are_errors_naming_them() {
        let tmp = tempfile::tempdir().unwrap();
        write(&tmp.path().join("outside/secret.py"));
        write(&tmp.path().join("outside/deeper/x.py"));
        let tools = tmp.path().join(".ai/tools");
        write(&tools.join("a/b.py"));
        std::os::unix::fs::symlink(tmp.path().join("outside/secret.py"), tools.join("a/s.py"))
            .unwrap();
        std::os::unix::fs::symlink(tmp.path().join("outside"), tools.join("out")).unwrap();
        let spaces = Spaces::new(None, None, tmp.path());
        let listed = spaces.list(ItemKind::Tool, Space::System, &exts()).unwrap();
        let escapes: Vec<(&str, bool)> = listed
            .iter()
            .map(|l| (l.id.as_str(), l.escape.is_some()))
            .collect();
        assert_eq!(escapes, [("a/b", false), ("a/s", true), ("out", true)]);
        let cache = crate::ListingCache::new();
        for id in ["a/s", "out/secret", "out/deeper/x"] {
            let plain = spaces.resolve(ItemKind::Tool, id, &exts(), None);
            let cached =
                spaces.resolve_cached(&cache, ItemKind::Tool, id, &exts(), &[Space::System]);
            for result in [plain.map(|_| ()), cached.map(|_| ())] {
                let err = result.unwrap_err();
                assert!(matches!(err, SpaceError::LinkEscape { .. }), "{id}: {err}");
                assert!(err.to_string().contains("outside"), "{err}");
            }
        }
    }

    #[test]
    fn not_found_lists_where_it_looked() {
        let tmp = tempfile::tempdir().unwrap();
        let spaces = Spaces::new(Some(&tmp.path().join("p")), None, tmp.path());
        let err = spaces
            .resolve(ItemKind::Tool, "nope", &exts(), None)
            .unwrap_err();
        assert!(matches!(err, SpaceError::NotFound { ref searched, .. } if searched.len() == 2));
    }
}
