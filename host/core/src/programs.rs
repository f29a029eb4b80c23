//! Programs found on the host's `PATH`, remembered for a moment.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Programs found on `PATH`, each looked for again once what was found is
/// [`FOUND_FOR`] old: a warm call does not stat a file in every folder of
/// `PATH`, and a program installed earlier on it is still picked up (its
/// server then gets a session of its own).
#[derive(Default)]
pub(crate) struct Programs(Mutex<HashMap<(String, String), Found>>);

/// Where a program was found on `PATH` (or why not), and when.
type Found = (Result<String, String>, Instant);

/// How long a program found on `PATH` is taken as found.
pub(crate) const FOUND_FOR: Duration = Duration::from_secs(1);

/// Distinct (PATH, command) pairs remembered at most.
const PROGRAMS_KEPT: usize = 256;

impl Programs {
    pub(crate) fn found(&self, path: &str, command: &str, now: Instant) -> Result<String, String> {
        let key = (path.to_owned(), command.to_owned());
        let known = self
            .0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&key)
            .cloned();
        if let Some((found, at)) = known
            && now.saturating_duration_since(at) < FOUND_FOR
        {
            return found;
        }
        let found = look_on_path(path, command);
        let mut kept = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if kept.len() >= PROGRAMS_KEPT {
            kept.clear();
        }
        kept.insert(key, (found.clone(), now));
        found
    }
}

/// The first executable file `command` in the folders of `path`.
pub(crate) fn look_on_path(path: &str, command: &str) -> Result<String, String> {
    std::env::split_paths(path)
        .map(|dir| dir.join(command))
        .find(|candidate| {
            use std::os::unix::fs::PermissionsExt;
            std::fs::metadata(candidate)
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
        .map(|found| found.display().to_string())
        .ok_or_else(|| format!("command {command:?} is not on the host's PATH"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    #[test]
    fn a_program_found_on_path_is_looked_for_again_once_a_second() {
        use std::os::unix::fs::PermissionsExt;
        let (early, late) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let install = |dir: &Path| {
            let program = dir.join("server");
            std::fs::write(&program, "#!/bin/sh\n").unwrap();
            std::fs::set_permissions(&program, std::fs::Permissions::from_mode(0o755)).unwrap();
            program.display().to_string()
        };
        let path = format!("{}:{}", early.path().display(), late.path().display());
        let programs = Programs::default();
        let start = Instant::now();
        assert!(programs.found(&path, "server", start).is_err());
        let in_late = install(late.path());
        // What was found (here, nothing) holds for a second.
        assert!(programs.found(&path, "server", start).is_err());
        let later = start + FOUND_FOR;
        assert_eq!(programs.found(&path, "server", later), Ok(in_late.clone()));
        let in_early = install(early.path());
        assert_eq!(programs.found(&path, "server", later), Ok(in_late));
        assert_eq!(
            programs.found(&path, "server", later + FOUND_FOR),
            Ok(in_early)
        );
        // Another PATH is another question.
        let other = late.path().display().to_string();
        assert!(
            programs
                .found(&other, "server", later)
                .unwrap()
                .starts_with(&other)
        );
    }
}
