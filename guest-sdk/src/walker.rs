//! The `graph-walker` world: walk state graphs, one decided step at a time.
//!
//! A walker turns a graph tool (`tool_type: graph`) into a sequence of
//! decisions. It never acts: each call returns an [`Outcome`] that says
//! what the step changed in the state and what the host is to do next
//! (take actions, go on, or end the run). The host performs every action
//! under the graph's permissions and stores each outcome, so a run goes on
//! after a crash from its last one through [`GraphWalker::resume`].
//!
//! One instance walks one run, so a walker may keep the parsed graph and
//! the state in a `static` between calls. It has no filesystem, network,
//! environment or clock: each call is told the time.
//!
//! Install a built walker as `.ai/walkers/<name>.wasm`; a graph's runtime
//! names the walker it uses.

#[doc(hidden)]
pub mod __wit {
    wit_bindgen::generate!({
        world: "graph-walker",
        path: "../wit/rye-plugin@0.1.0",
        pub_export_macro: true,
        export_macro_name: "export_walker_world",
        default_bindings_module: "rye_guest::walker::__wit",
        runtime_path: "rye_guest::__private::wit_bindgen::rt",
        generate_all,
    });
}

use __wit::exports::rye::plugin::walking as wit;

pub use wit::{Action, Change, Clock, Dispatch, Event, Next, Outcome, WalkInput};

/// A graph walker component. Implement it and pass the type to
/// [`export_walker!`](crate::export_walker).
pub trait GraphWalker {
    /// Starts a run.
    fn start(input: WalkInput, now: Clock) -> Result<Outcome, String>;

    /// Goes on with a run from the state and cursor of its last stored
    /// outcome; `inputs` is what a caller sent to a waiting run (JSON).
    fn resume(
        input: WalkInput,
        state: Vec<(String, String)>,
        cursor: String,
        inputs: String,
        now: Clock,
    ) -> Result<Outcome, String>;

    /// The results of the last dispatch, in its order, and on.
    fn advance(results: Vec<String>, now: Clock) -> Result<Outcome, String>;

    /// The graph's static analysis as JSON text.
    fn analyze(input: WalkInput) -> String;
}

#[doc(hidden)]
pub use wit::Guest as __Guest;

/// Exports a [`GraphWalker`] implementation as this component's
/// `rye:plugin/walking` interface.
#[macro_export]
macro_rules! export_walker {
    ($walker:ty) => {
        // Exports exist only in the component; a native build (the crate's
        // unit tests) compiles the implementation without them.
        #[cfg(target_arch = "wasm32")]
        const _: () = {
            struct RyeWalkerExport;
            impl $crate::walker::__Guest for RyeWalkerExport {
                fn start(
                    input: $crate::walker::WalkInput,
                    now: $crate::walker::Clock,
                ) -> ::core::result::Result<$crate::walker::Outcome, ::std::string::String>
                {
                    <$walker as $crate::walker::GraphWalker>::start(input, now)
                }
                fn resume(
                    input: $crate::walker::WalkInput,
                    state: ::std::vec::Vec<(::std::string::String, ::std::string::String)>,
                    cursor: ::std::string::String,
                    inputs: ::std::string::String,
                    now: $crate::walker::Clock,
                ) -> ::core::result::Result<$crate::walker::Outcome, ::std::string::String>
                {
                    <$walker as $crate::walker::GraphWalker>::resume(
                        input, state, cursor, inputs, now,
                    )
                }
                fn advance(
                    results: ::std::vec::Vec<::std::string::String>,
                    now: $crate::walker::Clock,
                ) -> ::core::result::Result<$crate::walker::Outcome, ::std::string::String>
                {
                    <$walker as $crate::walker::GraphWalker>::advance(results, now)
                }
                fn analyze(input: $crate::walker::WalkInput) -> ::std::string::String {
                    <$walker as $crate::walker::GraphWalker>::analyze(input)
                }
            }
            $crate::walker::__wit::export_walker_world!(
                RyeWalkerExport with_types_in $crate::walker::__wit
            );
        };
    };
}
