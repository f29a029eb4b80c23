//! The `tool` world: a tool item's own code, answering one call.
//!
//! A tool item (`tool_type: wasm_component`) names a `.wasm` beside it.
//! When it is of this world, each execute calls [`Tool::run`] with the
//! caller's parameters and the tool's answer becomes the execute's `data`;
//! an error is typed, so the caller learns whether to fix its parameters
//! or look elsewhere. The tool reaches folders, variables and hosts through
//! the standard library (and `wasi:http`), and only those its signed item
//! grants under `config.capabilities`.
//!
//! ```no_run
//! # #[cfg(feature = "tool")] mod doc {
//! use rye_guest::serde_json::{Value, json};
//! use rye_guest::tool::{Call, Tool, ToolError};
//!
//! /// Counts the words of a text.
//! struct WordCount;
//!
//! impl Tool for WordCount {
//!     fn run(call: Call) -> Result<Value, ToolError> {
//!         let text = call.parameters["text"]
//!             .as_str()
//!             .ok_or_else(|| ToolError::InvalidParameters("text is required".into()))?;
//!         Ok(json!({"words": text.split_whitespace().count()}))
//!     }
//! }
//!
//! rye_guest::export_tool!(WordCount);
//! # }
//! ```

#[doc(hidden)]
pub mod __wit {
    wit_bindgen::generate!({
        world: "tool",
        path: "../wit/rye-plugin@0.1.0",
        pub_export_macro: true,
        export_macro_name: "export_tool_world",
        default_bindings_module: "rye_guest::tool::__wit",
        runtime_path: "rye_guest::__private::wit_bindgen::rt",
        generate_all,
    });
}

use __wit::exports::rye::plugin::running as wit;

pub use wit::ToolError;

use serde_json::{Map, Value};

/// One call of a tool.
#[derive(Debug, Clone)]
pub struct Call {
    /// The tool item's id, as `examples/word-count`.
    pub item_id: String,
    /// The caller's parameters (an object; empty when none were given).
    pub parameters: Value,
    /// The project's folder, at the same path inside the tool as outside;
    /// readable only if the item grants it.
    pub project_path: Option<String>,
}

/// A tool component. Implement it and pass the type to
/// [`export_tool!`](crate::export_tool).
pub trait Tool {
    /// Answers one call: the data, or why there is none.
    fn run(call: Call) -> Result<Value, ToolError>;
}

/// Runs `T` on a call as the host sends it: parameters that are not a
/// JSON object are the caller's error, the answer goes back as JSON text.
#[doc(hidden)]
pub fn __run<T: Tool>(call: wit::Call) -> Result<String, ToolError> {
    let parameters = if call.parameters.trim().is_empty() {
        Value::Object(Map::new())
    } else {
        match serde_json::from_str::<Value>(&call.parameters) {
            Ok(Value::Object(map)) => Value::Object(map),
            Ok(other) => {
                return Err(ToolError::InvalidParameters(format!(
                    "the parameters are {other}, not an object"
                )));
            }
            Err(e) => {
                return Err(ToolError::InvalidParameters(format!(
                    "the parameters are not JSON: {e}"
                )));
            }
        }
    };
    let answer = T::run(Call {
        item_id: call.item_id,
        parameters,
        project_path: call.project_path,
    })?;
    Ok(answer.to_string())
}

#[doc(hidden)]
pub use wit::Guest as __Guest;

/// Exports a [`Tool`] implementation as this component's
/// `rye:plugin/running` interface.
#[macro_export]
macro_rules! export_tool {
    ($tool:ty) => {
        // Exports exist only in the component; a native build (the crate's
        // unit tests) compiles the implementation without them.
        #[cfg(target_arch = "wasm32")]
        const _: () = {
            struct RyeToolExport;
            impl $crate::tool::__Guest for RyeToolExport {
                fn run(
                    call: $crate::tool::__wit::exports::rye::plugin::running::Call,
                ) -> ::core::result::Result<::std::string::String, $crate::tool::ToolError>
                {
                    $crate::tool::__run::<$tool>(call)
                }
            }
            $crate::tool::__wit::export_tool_world!(
                RyeToolExport with_types_in $crate::tool::__wit
            );
        };
    };
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    struct Echo;

    impl Tool for Echo {
        fn run(call: Call) -> Result<Value, ToolError> {
            match call.parameters.get("fail") {
                Some(_) => Err(ToolError::NotFound("nothing here".into())),
                None => Ok(json!({"id": call.item_id, "got": call.parameters})),
            }
        }
    }

    fn call(parameters: &str) -> wit::Call {
        wit::Call {
            item_id: "demo/echo".into(),
            parameters: parameters.into(),
            project_path: None,
        }
    }

    #[test]
    fn parameters_in_and_the_answer_out_as_json_text() {
        let answer = __run::<Echo>(call(r#"{"a": 1}"#)).unwrap();
        assert_eq!(
            serde_json::from_str::<Value>(&answer).unwrap(),
            json!({"id": "demo/echo", "got": {"a": 1}})
        );
        let empty = __run::<Echo>(call("")).unwrap();
        assert!(empty.contains(r#""got":{}"#), "{empty}");
    }

    #[test]
    fn parameters_that_are_no_object_are_the_callers_error() {
        for bad in ["[1]", "nope", "7"] {
            assert!(
                matches!(
                    __run::<Echo>(call(bad)),
                    Err(ToolError::InvalidParameters(_))
                ),
                "{bad}"
            );
        }
        assert!(matches!(
            __run::<Echo>(call(r#"{"fail": true}"#)),
            Err(ToolError::NotFound(_))
        ));
    }
}
