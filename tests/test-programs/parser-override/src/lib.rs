use rye_guest::parser::{ParseError, ParseInput, Parsed, Parser};
use rye_guest::serde_json::{Map, Value};

struct Marker;

impl Parser for Marker {
    fn parse(input: ParseInput) -> Result<Parsed, ParseError> {
        let mut document = Map::new();
        document.insert("__version__".into(), Value::from("9.9.9"));
        document.insert(
            "__tool_description__".into(),
            Value::from(format!("read by the override: {}", input.item_id)),
        );
        Ok(Parsed::new(document))
    }
}

rye_guest::export_parser!(Marker);
