//! The host services an adapter may ask for through `rye:plugin/host`,
//! and the spaces as the contract names them.

/// The spaces, as the contract names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum PluginSpace {
    Project,
    User,
    System,
}

/// Answers to the questions `rye:plugin/host` lets an adapter ask. The item
/// host implements it with its policy; every answer it gives should be
/// recorded where the caller's trace can show it.
pub trait AdapterServices: Send {
    /// A variable of the host environment, if policy exposes it.
    fn get_env(&mut self, name: &str) -> Option<String>;
    /// The host environment as policy exposes it.
    fn environment(&mut self) -> Vec<(String, String)>;
    /// `binary` looked up on the host's `PATH`.
    fn which(&mut self, binary: &str) -> Option<String>;
    /// Runs the interpreter resolve command chain element `item_id`
    /// declares, returning the first line it printed.
    fn run_declared_command(&mut self, item_id: &str) -> Result<String, String>;
    /// The text of `.ai/config/<path>` in `space`, if the file exists.
    fn read_config(&mut self, space: PluginSpace, path: &str) -> Result<Option<String>, String>;
    /// Whether every answer comes at once: false when one may wait on
    /// something outside the host (a declared command to run), so that a
    /// plan asking it is not made on an async task.
    fn answers_at_once(&self) -> bool {
        true
    }
}
