//! The wasmtime configuration every Rye component is compiled under.
//!
//! It lives apart so that the build of the bundled system space and the
//! host agree on it exactly: components precompiled when the binary is
//! built load only into an engine with the same code-generation settings,
//! and wasmtime refuses (it never misruns) an artifact made under others.

use wasmtime::{Config, Engine};

/// The settings that decide the machine code of a component: the
/// component model, epoch interruption (deadlines), parallel compilation.
/// Allocation strategy and profiling are the host's to add.
pub fn config() -> Config {
    let mut config = Config::new();
    config.wasm_component_model(true);
    config.epoch_interruption(true);
    config.parallel_compilation(true);
    config
}

/// Compiles a component for this machine under [`config`], as bytes the
/// host deserializes instead of compiling.
pub fn precompile(wasm: &[u8]) -> Result<Vec<u8>, wasmtime::Error> {
    Engine::new(&config())?.precompile_component(wasm)
}
