//! The `yaml/yaml` parser: a YAML tool or runtime file is its own metadata.
//!
//! The document is the file's top-level mapping, keys as written (`version`,
//! `tool_type`, `executor_id`, `config`, `env_config`, …). An empty file is
//! an empty mapping. Unlike the original host, which read malformed YAML as
//! empty metadata, a syntax error is reported with its line and column.

use rye_guest::parser::{ParseError, ParseInput, Parsed, Parser};

pub struct YamlParser;

impl Parser for YamlParser {
    fn parse(input: ParseInput) -> Result<Parsed, ParseError> {
        let content = input
            .content
            .strip_prefix('\u{feff}')
            .unwrap_or(&input.content);
        Ok(Parsed::new(rye_parse_support::yaml::mapping(content, 0)?))
    }
}

rye_guest::export_parser!(YamlParser);
