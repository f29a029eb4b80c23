//! Paths of the components built from `tests/test-programs/` and
//! `examples/` for the host's tests: one constant per package, named after
//! it (`parser-loop` → `PARSER_LOOP`).

include!(concat!(env!("OUT_DIR"), "/components.rs"));
