//! What the host tells a runtime adapter when it asks, and the record of
//! every answer for the trace.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rye_components::{AdapterServices, PluginSpace};
use serde_json::{Value, json};

use crate::trace::{CommandResult, Event, Step};

/// How long an interpreter's resolve command may take.
const RESOLVE_TIMEOUT: Duration = Duration::from_secs(10);

/// Answers an adapter's questions for one execution.
pub(crate) struct HostServices {
    /// The host process environment as the gate shows it (less what the
    /// user withholds; the process the adapter plans runs with no more).
    pub env: Arc<Vec<(String, String)>>,
    /// Each chain element's declared `env_config.interpreter.resolve_cmd`.
    pub commands: HashMap<String, Vec<String>>,
    /// `.ai/config` of each space.
    pub config_dirs: HashMap<PluginSpace, PathBuf>,
    /// Every answer, for the trace.
    pub log: Arc<Mutex<Vec<Event>>>,
    /// Config files may be unsigned, but one that carries a signature must
    /// verify against this store (`None`: verification is off).
    pub trust: Option<Arc<rye_integrity::TrustStore>>,
}

impl HostServices {
    fn record(&self, step: Step) {
        self.log.lock().expect("trace log lock").push(step.into());
    }
}

impl AdapterServices for HostServices {
    /// Not when a chain element declares a resolve command, which runs
    /// until it exits.
    fn answers_at_once(&self) -> bool {
        self.commands.is_empty()
    }

    fn get_env(&mut self, name: &str) -> Option<String> {
        self.env
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
    }

    fn environment(&mut self) -> Vec<(String, String)> {
        self.env.to_vec()
    }

    fn which(&mut self, binary: &str) -> Option<String> {
        let found = if binary.starts_with('/') {
            // An absolute path is answered only when it is what a variable
            // the adapter is shown already says (an interpreter the user
            // set, such as RYE_PYTHON, outside the adapter's folders), so
            // no other path on the host can be probed.
            let named = self.env.iter().any(|(_, value)| value == binary);
            (named && is_executable(Path::new(binary))).then(|| binary.to_owned())
        } else {
            let path = self.get_env("PATH").unwrap_or_default();
            which(binary, &path)
        };
        self.record(Step::Which {
            binary: binary.to_owned(),
            found: found.clone(),
        });
        found
    }

    fn run_declared_command(&mut self, item_id: &str) -> Result<String, String> {
        let Some(argv) = self.commands.get(item_id).cloned() else {
            return Err(format!(
                "{item_id} declares no env_config.interpreter.resolve_cmd"
            ));
        };
        let result = run_resolve(&argv, &self.env);
        self.record(Step::ResolveCommand {
            item_id: item_id.to_owned(),
            argv,
            result: match &result {
                Ok(line) => CommandResult::Ok(line.clone()),
                Err(e) => CommandResult::Error(e.clone()),
            },
        });
        result
    }

    fn read_config(&mut self, space: PluginSpace, path: &str) -> Result<Option<String>, String> {
        rye_space::validate_plugin_name(path).map_err(|e| e.to_string())?;
        let Some(dir) = self.config_dirs.get(&space) else {
            return Ok(None);
        };
        let file = dir.join(path);
        let text = match std::fs::read_to_string(&file) {
            Ok(text) => Some(text),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(format!("{}: {e}", file.display())),
        };
        let signature = match (&text, &self.trust) {
            (Some(text), Some(trust)) => config_signature(&file, text, trust)?,
            _ => Value::Null,
        };
        self.record(Step::ReadConfig {
            space,
            path: file,
            found: text.is_some(),
            signature,
        });
        Ok(text)
    }
}

/// How a config file's signature stands: unsigned is allowed (config files
/// are often edited by hand), a signature that does not verify is not.
fn config_signature(
    file: &Path,
    text: &str,
    trust: &rye_integrity::TrustStore,
) -> Result<Value, String> {
    let name = file
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or_default();
    let Ok(format) = rye_integrity::format_for(rye_space::ItemKind::Config, name, &[]) else {
        return Ok(json!("unsigned"));
    };
    match rye_integrity::verify_text(text, rye_space::ItemKind::Config, &format, trust) {
        Ok(verified) => Ok(json!({"status": "verified", "fingerprint": verified.fingerprint})),
        Err(e) if e.is_unsigned() => Ok(json!("unsigned")),
        Err(e) => Err(format!("{}: {e}", file.display())),
    }
}

/// `binary` (a plain name) in the folders of `path`, if it is an
/// executable file there.
fn which(binary: &str, path: &str) -> Option<String> {
    if binary.is_empty() || binary.contains('/') {
        return None;
    }
    std::env::split_paths(path)
        .map(|dir| dir.join(binary))
        .find(|candidate| is_executable(candidate))
        .map(|p| p.display().to_string())
}

fn is_executable(path: &Path) -> bool {
    let Ok(meta) = std::fs::metadata(path) else {
        return false;
    };
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        meta.is_file() && meta.permissions().mode() & 0o111 != 0
    }
    #[cfg(not(unix))]
    meta.is_file()
}

/// Runs a declared resolve command (through the one spawner, contained
/// like any run) and returns the first line it printed.
fn run_resolve(argv: &[String], env: &[(String, String)]) -> Result<String, String> {
    let (program, args) = argv.split_first().ok_or("the resolve command is empty")?;
    let plan = rye_process::Plan {
        command: program.clone(),
        args: args.to_vec(),
        env: env.to_vec(),
        timeout: Some(RESOLVE_TIMEOUT),
        ..rye_process::Plan::default()
    };
    let capture = rye_process::Capture {
        stdout: 64 << 10,
        stderr: 0,
    };
    let outcome = rye_process::run_blocking(&plan, &capture)
        .map_err(|e| format!("cannot run {program}: {}", e.source))?;
    if outcome.timed_out {
        return Err(format!(
            "{program} ran past {} s and was killed",
            RESOLVE_TIMEOUT.as_secs()
        ));
    }
    if !outcome.success() {
        return Err(match (outcome.code, outcome.signal) {
            (Some(code), _) => format!("{program} exited with code {code}"),
            (None, Some(signal)) => format!("{program} was killed by signal {signal}"),
            (None, None) => format!("{program} ended abnormally"),
        });
    }
    let out = String::from_utf8_lossy(&outcome.stdout);
    Ok(out.lines().next().unwrap_or_default().trim().to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn services(env: &[(&str, &str)]) -> HostServices {
        HostServices {
            env: Arc::new(
                env.iter()
                    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                    .collect(),
            ),
            commands: HashMap::new(),
            config_dirs: HashMap::new(),
            log: Arc::default(),
            trust: None,
        }
    }

    /// An absolute path is answered only when a shown variable holds it:
    /// an adapter cannot probe the host's files through `which`.
    #[test]
    fn which_answers_an_absolute_path_only_when_a_variable_names_it() {
        let dir = tempfile::tempdir().unwrap();
        let program = dir.path().join("python");
        std::fs::write(&program, "#!/bin/sh\n").unwrap();
        #[cfg(unix)]
        std::fs::set_permissions(
            &program,
            std::os::unix::fs::PermissionsExt::from_mode(0o755),
        )
        .unwrap();
        let program = program.display().to_string();
        let mut named = services(&[("RYE_PYTHON", &program)]);
        assert_eq!(named.which(&program), Some(program.clone()));
        let mut unnamed = services(&[("PATH", "/usr/bin:/bin")]);
        assert_eq!(unnamed.which(&program), None);
        assert_eq!(unnamed.which("/bin/sh"), None);
        let data = dir.path().join("data").display().to_string();
        std::fs::write(&data, "not a program").unwrap();
        let mut not_executable = services(&[("X", &data)]);
        assert_eq!(not_executable.which(&data), None);
    }
}
