use rye_guest::parser::{ParseError, ParseInput, Parsed, Parser};

struct Fragile;

impl Parser for Fragile {
    fn parse(input: ParseInput) -> Result<Parsed, ParseError> {
        panic!("cannot cope with {}", input.file_name);
    }
}

rye_guest::export_parser!(Fragile);
