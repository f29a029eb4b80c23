//! The one place `bindgen!` runs: host bindings for the plugin worlds,
//! generated from `wit/`, kept private to this crate.

pub(crate) mod parser {
    wasmtime::component::bindgen!({
        world: "parser",
        path: "../../wit/rye-plugin@0.1.0",
    });
}

/// A plan is called asynchronously, so that it may run on the task that
/// awaits it; the host's services stay synchronous.
pub(crate) mod adapter {
    wasmtime::component::bindgen!({
        world: "runtime-adapter",
        path: "../../wit/rye-plugin@0.1.0",
        exports: { default: async },
    });
}

pub(crate) mod validator {
    wasmtime::component::bindgen!({
        world: "validator",
        path: "../../wit/rye-plugin@0.1.0",
    });
}

pub(crate) mod walker {
    wasmtime::component::bindgen!({
        world: "graph-walker",
        path: "../../wit/rye-plugin@0.1.0",
    });
}

pub(crate) mod tool {
    wasmtime::component::bindgen!({
        world: "tool",
        path: "../../wit/rye-plugin@0.1.0",
    });
}
