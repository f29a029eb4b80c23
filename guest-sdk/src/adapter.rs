//! The `runtime-adapter` world: turn a resolved chain into a plan for its
//! primitive: a process, or an HTTP request.
//!
//! A runtime whose needs the standard YAML keys cannot express names its own
//! adapter (`adapter: <name>` in the runtime YAML). The adapter receives the
//! chain (tool first) with each element's metadata and the caller's
//! parameters, and returns exactly what the host's primitive will do: the
//! process the subprocess primitive runs ([`ProcessPlan`]) when the chain
//! ends in `rye/core/primitives/execute`, the request the HTTP primitive
//! sends ([`HttpPlan`]) when it ends in `rye/core/primitives/http_client`,
//! the tool call ([`McpPlan`]) when it ends in `rye/core/primitives/mcp_client`.
//! It never spawns or connects anything itself; for facts about the machine it asks
//! the host through [`host`], which answers under policy.
//!
//! Install a built adapter as `.ai/adapters/<name>.wasm`.
//!
//! # Examples
//!
//! ```no_run
//! use rye_guest::adapter::{PlanError, PlanInput, Planned, ProcessPlan, RuntimeAdapter};
//!
//! struct Echo;
//!
//! impl RuntimeAdapter for Echo {
//!     fn plan(input: PlanInput) -> Result<Planned, PlanError> {
//!         let tool = &input.chain[0];
//!         Ok(ProcessPlan::new("echo").arg(&tool.path).cwd(&input.project_path).into())
//!     }
//! }
//!
//! rye_guest::export_adapter!(Echo);
//! ```

#[doc(hidden)]
pub mod __wit {
    wit_bindgen::generate!({
        world: "runtime-adapter",
        path: "../wit/rye-plugin@0.1.0",
        pub_export_macro: true,
        export_macro_name: "export_adapter_world",
        default_bindings_module: "rye_guest::adapter::__wit",
        runtime_path: "rye_guest::__private::wit_bindgen::rt",
        generate_all,
    });
}

use __wit::exports::rye::plugin::planning as wit;

pub use __wit::rye::plugin::types::{Diagnostic, LocatedError, Position, Severity, Space};
pub use wit::{
    ChainElement, ElementError, EnvVar, Header, HttpPlan, McpPlan, PlanError, PlanInput, Planned,
    ProcessPlan, Retry, TraceNote,
};

/// Questions an adapter may ask the host. Each answer is subject to the
/// host's policy and recorded in the execution trace.
pub mod host {
    pub use super::__wit::rye::plugin::host::{
        environment, get_env, read_config, run_declared_command, which,
    };
}

crate::diagnostics::impl_type_helpers!(crate::adapter::__wit::rye::plugin::types);

impl ProcessPlan {
    /// A plan that runs `command` with no arguments, an empty environment,
    /// no stdin and the runtime's default timeout.
    pub fn new(command: impl Into<String>) -> Self {
        Self {
            command: command.into(),
            args: Vec::new(),
            env: Vec::new(),
            cwd: None,
            stdin: None,
            timeout_ms: None,
            notes: Vec::new(),
        }
    }

    /// Appends one argument.
    pub fn arg(mut self, arg: impl Into<String>) -> Self {
        self.args.push(arg.into());
        self
    }

    /// Sets one environment variable of the process.
    pub fn env(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.env.push(EnvVar {
            name: name.into(),
            value: value.into(),
        });
        self
    }

    /// Sets the working directory.
    pub fn cwd(mut self, cwd: impl Into<String>) -> Self {
        self.cwd = Some(cwd.into());
        self
    }

    /// Bytes written to the process's stdin.
    pub fn stdin(mut self, bytes: impl Into<Vec<u8>>) -> Self {
        self.stdin = Some(bytes.into());
        self
    }

    /// Kills the process after this many milliseconds.
    pub fn timeout_ms(mut self, ms: u64) -> Self {
        self.timeout_ms = Some(ms);
        self
    }

    /// Adds a step to show in the caller's trace; `detail` is JSON.
    pub fn note(mut self, step: impl Into<String>, detail: serde_json::Value) -> Self {
        self.notes.push(TraceNote::new(step, detail));
        self
    }
}

impl TraceNote {
    /// A step to show in the caller's trace; `detail` is JSON.
    pub fn new(step: impl Into<String>, detail: serde_json::Value) -> Self {
        Self {
            step: step.into(),
            detail: detail.to_string(),
        }
    }
}

impl From<ProcessPlan> for Planned {
    fn from(plan: ProcessPlan) -> Self {
        Planned::Process(plan)
    }
}

impl From<HttpPlan> for Planned {
    fn from(plan: HttpPlan) -> Self {
        Planned::Http(plan)
    }
}

impl From<McpPlan> for Planned {
    fn from(plan: McpPlan) -> Self {
        Planned::Mcp(plan)
    }
}

impl HttpPlan {
    /// A request of `method` to `url` with no headers or body, under the
    /// runtime's default limits.
    pub fn new(method: impl Into<String>, url: impl Into<String>) -> Self {
        Self {
            method: method.into(),
            url: url.into(),
            headers: Vec::new(),
            body: None,
            timeout_ms: None,
            max_response_bytes: None,
            max_redirects: None,
            retry: None,
            notes: Vec::new(),
        }
    }

    /// Adds one header.
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers.push(Header {
            name: name.into(),
            value: value.into(),
        });
        self
    }

    /// The request body.
    pub fn body(mut self, bytes: impl Into<Vec<u8>>) -> Self {
        self.body = Some(bytes.into());
        self
    }

    /// Fails the run after this many milliseconds.
    pub fn timeout_ms(mut self, ms: u64) -> Self {
        self.timeout_ms = Some(ms);
        self
    }

    /// Adds a step to show in the caller's trace; `detail` is JSON.
    pub fn note(mut self, step: impl Into<String>, detail: serde_json::Value) -> Self {
        self.notes.push(TraceNote::new(step, detail));
        self
    }
}

impl PlanError {
    /// Element `item_id`'s configuration cannot be used.
    pub fn config(item_id: impl Into<String>, message: impl Into<String>) -> Self {
        Self::Config(ElementError {
            item_id: item_id.into(),
            message: message.into(),
        })
    }
}

/// A runtime adapter component. Implement it and pass the type to
/// [`export_adapter!`].
pub trait RuntimeAdapter {
    /// Plans one execution: the process or the request its primitive
    /// carries out.
    fn plan(input: PlanInput) -> Result<Planned, PlanError>;
}

#[doc(hidden)]
pub use wit::Guest as __Guest;

/// Exports a [`RuntimeAdapter`](adapter::RuntimeAdapter) implementation as
/// this component's `rye:plugin/planning` interface.
#[macro_export]
macro_rules! export_adapter {
    ($adapter:ty) => {
        // Exports exist only in the component; a native build (the crate's
        // unit tests) compiles the implementation without them.
        #[cfg(target_arch = "wasm32")]
        const _: () = {
            struct RyeAdapterExport;
            impl $crate::adapter::__Guest for RyeAdapterExport {
                fn plan(
                    input: $crate::adapter::PlanInput,
                ) -> ::core::result::Result<$crate::adapter::Planned, $crate::adapter::PlanError>
                {
                    <$adapter as $crate::adapter::RuntimeAdapter>::plan(input)
                }
            }
            $crate::adapter::__wit::export_adapter_world!(
                RyeAdapterExport with_types_in $crate::adapter::__wit
            );
        };
    };
}
