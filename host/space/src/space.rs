use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::ItemKind;

/// The three spaces, highest precedence first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Space {
    Project,
    User,
    System,
}

impl Space {
    pub const ALL: [Space; 3] = [Space::Project, Space::User, Space::System];

    pub fn as_str(self) -> &'static str {
        match self {
            Space::Project => "project",
            Space::User => "user",
            Space::System => "system",
        }
    }

    /// Project 3, user 2, system 1: an item may depend only on items of
    /// equal or lower precedence.
    pub fn precedence(self) -> u8 {
        match self {
            Space::Project => 3,
            Space::User => 2,
            Space::System => 1,
        }
    }
}

impl fmt::Display for Space {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A name that is no space.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown space {0:?}: expected project, user or system")]
pub struct UnknownSpace(pub String);

impl FromStr for Space {
    type Err = UnknownSpace;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "project" => Ok(Space::Project),
            "user" => Ok(Space::User),
            "system" => Ok(Space::System),
            other => Err(UnknownSpace(other.to_owned())),
        }
    }
}

/// One space's `.ai/` directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpaceRoot {
    pub space: Space,
    /// The base directory that holds `.ai/`.
    pub base: PathBuf,
    /// `<base>/.ai`.
    pub ai_dir: PathBuf,
}

impl SpaceRoot {
    fn new(space: Space, base: &Path) -> Self {
        Self {
            space,
            base: base.to_owned(),
            ai_dir: base.join(".ai"),
        }
    }

    /// `<base>/.ai/<folder of kind>`.
    pub fn kind_dir(&self, kind: ItemKind) -> PathBuf {
        self.ai_dir.join(kind.folder())
    }
}

/// The spaces one request resolves through, in precedence order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Spaces {
    roots: Vec<SpaceRoot>,
}

impl Spaces {
    /// Spaces from their base directories (each holding a `.ai/`). A user
    /// base that is the project base (a project in the home directory) is
    /// the project space only, so no item shadows itself.
    pub fn new(project: Option<&Path>, user: Option<&Path>, system: &Path) -> Self {
        let user = user.filter(|user| !project.is_some_and(|p| same_dir(p, user)));
        Self::from_bases(project, user, system)
    }

    /// Spaces from bases already known to be distinct: no filesystem work,
    /// for callers that checked (and cached) that themselves.
    pub fn from_bases(project: Option<&Path>, user: Option<&Path>, system: &Path) -> Self {
        let mut roots = Vec::with_capacity(3);
        if let Some(project) = project {
            roots.push(SpaceRoot::new(Space::Project, project));
        }
        if let Some(user) = user {
            roots.push(SpaceRoot::new(Space::User, user));
        }
        roots.push(SpaceRoot::new(Space::System, system));
        Self { roots }
    }

    pub fn roots(&self) -> &[SpaceRoot] {
        &self.roots
    }

    pub fn root(&self, space: Space) -> Option<&SpaceRoot> {
        self.roots.iter().find(|r| r.space == space)
    }

    /// The project base directory, when there is a project.
    pub fn project_base(&self) -> Option<&Path> {
        self.root(Space::Project).map(|r| r.base.as_path())
    }
}

/// Whether two paths name the same folder (after resolving links).
pub fn same_dir(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => a == b,
    }
}
