//! Built against a contract version the host does not implement.

wit_bindgen::generate!({
    inline: r#"
        package rye:plugin@0.2.0;

        interface parsing {
            parse: func(content: string) -> result<string, string>;
        }

        world parser {
            export parsing;
        }
    "#,
});

struct Future;

impl exports::rye::plugin::parsing::Guest for Future {
    fn parse(content: String) -> Result<String, String> {
        Ok(content)
    }
}

export!(Future);
