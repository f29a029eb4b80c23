//! Bound straight to the WIT with wit-bindgen (no SDK), returning a
//! document that breaks the contract: a JSON array.

wit_bindgen::generate!({
    world: "parser",
    path: "../../../wit/rye-plugin@0.1.0",
});

use exports::rye::plugin::parsing::{Guest, ParseError, ParseInput, Parsed};

struct Listy;

impl Guest for Listy {
    fn parse(_input: ParseInput) -> Result<Parsed, ParseError> {
        Ok(Parsed {
            document: "[1, 2, 3]".into(),
            diagnostics: Vec::new(),
        })
    }
}

export!(Listy);
