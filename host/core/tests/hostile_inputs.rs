//! Item files built to hurt the parsers (deep nesting, size, garbage)
//! through the real components: each gets an answer (a document or a clear
//! parse error), never a trap, and the host keeps serving.

mod common;

use common::{write, write_unsigned};
use rye_host::{ItemKind, LoadRequest, Loaded, Rye};

fn load(rye: &Rye, project: &std::path::Path, kind: ItemKind, id: &str) -> Loaded {
    rye.load(&LoadRequest {
        project: Some(project.to_owned()),
        ..LoadRequest::new(kind, id)
    })
    .unwrap_or_else(|e| panic!("{kind} {id}: {e}"))
}

/// The parse error, asserting it is the parser's verdict and not a
/// component failure (those name the `.wasm` file).
fn verdict(loaded: &Loaded) -> String {
    let error = loaded.parse_error.clone().unwrap_or_default();
    assert!(
        !error.contains(".wasm"),
        "the component failed instead of answering: {error}"
    );
    error
}

#[test]
fn deep_nesting_gets_an_answer_from_every_parser() {
    let (project, user) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let p = project.path();
    let n = 5000;
    let (open, close) = ("[".repeat(n), "]".repeat(n));
    write(
        p,
        ".ai/tools/deep/py.py",
        format!("__version__ = '1.0.0'\nDEEP = {open}1{close}\n"),
    );
    write(
        p,
        ".ai/tools/deep/js.js",
        format!("export const __version__ = '1.0.0';\nconst DEEP = {open}1{close};\n"),
    );
    write(
        p,
        ".ai/tools/deep/yaml.yaml",
        format!("version: '1.0.0'\ndeep: {open}1{close}\n"),
    );
    write(
        p,
        ".ai/knowledge/deep/k.md",
        format!("```yaml\nname: k\ndeep: {open}1{close}\n```\nbody\n"),
    );
    write(
        p,
        ".ai/directives/deep/d.md",
        format!(
            "```xml\n<directive name=\"d\" version=\"1.0.0\">\n{}{}\n</directive>\n```\n",
            "<a>".repeat(n),
            "</a>".repeat(n)
        ),
    );
    let rye = common::rye(user.path());

    let py = load(&rye, p, ItemKind::Tool, "deep/py");
    assert_eq!(py.metadata["version"], "1.0.0");
    assert!(
        py.diagnostics
            .iter()
            .any(|d| d.message.contains("`DEEP`") && d.message.contains("levels deep")),
        "{:?}",
        py.diagnostics
    );

    let js = load(&rye, p, ItemKind::Tool, "deep/js");
    assert_eq!(js.metadata["version"], "1.0.0");
    assert!(!js.parsed.contains_key("DEEP"));

    assert!(verdict(&load(&rye, p, ItemKind::Tool, "deep/yaml")).contains("invalid YAML"));
    assert!(verdict(&load(&rye, p, ItemKind::Knowledge, "deep/k")).contains("invalid YAML"));
    assert!(verdict(&load(&rye, p, ItemKind::Directive, "deep/d")).contains("levels deep"));
}

#[test]
fn a_large_file_parses_within_limits() {
    let (project, user) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    // About 2 MB of module-level assignments and code.
    let mut source = String::from("\"\"\"A generated module.\"\"\"\n__version__ = '1.0.0'\n");
    for i in 0..40_000 {
        source.push_str(&format!(
            "NAME_{i} = {{'index': {i}, 'tags': ['a', 'b']}}\ndef f_{i}(x):\n    return x\n"
        ));
    }
    write(project.path(), ".ai/tools/big/module.py", &source);
    let rye = common::rye(user.path());
    let loaded = load(&rye, project.path(), ItemKind::Tool, "big/module");
    assert_eq!(loaded.parse_error, None);
    assert_eq!(loaded.parsed["NAME_39999"]["index"], 39_999);
    assert_eq!(loaded.parsed.len(), 40_002);
}

#[test]
fn garbage_text_is_a_syntax_error_with_a_position() {
    let (project, user) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let p = project.path();
    // Unsigned (loading does not need a signature), so lines stay as written.
    write_unsigned(
        p,
        ".ai/tools/junk/py.py",
        "__version__ = '1.0.0'\nx = $$$\n",
    );
    write_unsigned(
        p,
        ".ai/tools/junk/js.js",
        "const a = 1;\nconst b = `never closed\n",
    );
    write_unsigned(p, ".ai/tools/junk/yaml.yaml", "a: b: c: [\n");
    write_unsigned(
        p,
        ".ai/directives/junk/d.md",
        "```xml\n<directive name=\"d\"><<<</directive>\n```\n",
    );
    write_unsigned(p, ".ai/knowledge/junk/k.md", "```yaml\n: : :\n```\n");
    let rye = common::rye(user.path());
    for (kind, id, line) in [
        (ItemKind::Tool, "junk/py", "line 2"),
        (ItemKind::Tool, "junk/js", "line 2"),
        (ItemKind::Tool, "junk/yaml", "line 1"),
        (ItemKind::Directive, "junk/d", "line 2"),
        (ItemKind::Knowledge, "junk/k", "line 2"),
    ] {
        let error = verdict(&load(&rye, p, kind, id));
        assert!(
            error.starts_with("syntax error") && error.contains(line),
            "{kind} {id}: {error}"
        );
    }
}

#[test]
fn nesting_at_the_yaml_bound_parses_and_past_it_is_a_clear_error() {
    let (project, user) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let p = project.path();
    let flow = |n: usize| format!("{}1{}", "{a: ".repeat(n), "}".repeat(n));
    let block = |n: usize| {
        (0..n)
            .map(|i| format!("{}k{i}:\n", "  ".repeat(i)))
            .collect::<String>()
            + &format!("{}v: 1\n", "  ".repeat(n))
    };
    // The document is one level; `deep` holds the rest.
    write(
        p,
        ".ai/tools/deep/at.yaml",
        format!("version: '1.0.0'\ndeep: {}\n", flow(99)),
    );
    write(
        p,
        ".ai/tools/deep/past.yaml",
        format!("version: '1.0.0'\ndeep: {}\n", flow(100)),
    );
    // Deep enough to have overflowed the parser's stack before the YAML
    // reader's own limit of 128 stopped it.
    write(
        p,
        ".ai/tools/deep/far.yaml",
        format!("version: '1.0.0'\ndeep: {}\n", flow(126)),
    );
    write(
        p,
        ".ai/knowledge/deep/k.md",
        format!("```yaml\nname: k\n{}```\nbody\n", block(126)),
    );
    let rye = common::rye(user.path());

    let at = load(&rye, p, ItemKind::Tool, "deep/at");
    assert_eq!(verdict(&at), "");
    assert_eq!(at.metadata["version"], "1.0.0");
    for (kind, id) in [
        (ItemKind::Tool, "deep/past"),
        (ItemKind::Tool, "deep/far"),
        (ItemKind::Knowledge, "deep/k"),
    ] {
        let error = verdict(&load(&rye, p, kind, id));
        assert!(
            error.contains("more than 100 levels deep"),
            "{kind} {id}: {error}"
        );
    }
}

/// Items built to make the system validator fail: a schema nested as
/// deeply as the Python parser allows, a pattern of 100,000 nested groups,
/// a schema with a thousand wrong properties, lists long enough that
/// quadratic work would pass the validator's deadline. Each gets findings of its
/// own; the validator never crashes or overflows its bounds, so it goes on
/// to check the next item.
#[test]
fn the_system_validator_survives_items_built_to_break_it() {
    let (project, user) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let p = project.path();
    let tool = |schema: String| {
        format!(
            "\"\"\"A tool.\"\"\"\n__version__ = '1.0.0'\n__tool_type__ = 'script'\n__executor_id__ = 'rye/core/runtimes/bash/bash'\nCONFIG_SCHEMA = {schema}\n"
        )
    };
    let mut nested = "{'type': 5}".to_owned();
    for _ in 0..98 {
        nested = format!("{{'not': {nested}}}");
    }
    write_unsigned(p, ".ai/tools/hostile/nested.py", tool(nested));
    let groups = 100_000;
    let pattern = format!("{}a{}", "(?:".repeat(groups), ")".repeat(groups - 1));
    write_unsigned(
        p,
        ".ai/tools/hostile/pattern.py",
        tool(format!(
            "{{'properties': {{'x': {{'pattern': '{pattern}'}}}}}}"
        )),
    );
    let wrong: Vec<String> = (0..1000)
        .map(|i| format!("'p{i}': {{'type': 'text'}}"))
        .collect();
    write_unsigned(
        p,
        ".ai/tools/hostile/many.py",
        tool(format!("{{'properties': {{{}}}}}", wrong.join(", "))),
    );
    // Work that grows with the square of a list would pass the deadline.
    let required: Vec<String> = (0..100_000).map(|i| format!("'n{i}'")).collect();
    write_unsigned(
        p,
        ".ai/tools/hostile/required.py",
        tool(format!(
            "{{'required': [{}], 'type': 5}}",
            required.join(", ")
        )),
    );
    let named: String = (0..32_000).map(|i| format!("(?<g{i}>a)")).collect();
    write_unsigned(
        p,
        ".ai/tools/hostile/names.py",
        tool(format!(
            "{{'properties': {{'x': {{'pattern': '{named}\\k<nope>'}}}}}}"
        )),
    );
    // Twenty thousand findings about a key written on the last line.
    let filler: String = (0..20_000).map(|i| format!("X_{i} = {i}\n")).collect();
    let wrong: Vec<String> = (0..20_000)
        .map(|i| format!("'p{i}': {{'type': 'text'}}"))
        .collect();
    write_unsigned(
        p,
        ".ai/tools/hostile/late.py",
        tool(format!("{{'properties': {{{}}}}}", wrong.join(", ")))
            .replace("CONFIG_SCHEMA", &format!("{filler}CONFIG_SCHEMA")),
    );
    write_unsigned(p, ".ai/tools/hostile/plain.py", tool("{'type': 5}".into()));
    let rye = common::rye(user.path());
    let report = rye
        .validate_tree(p, rye_host::ValidateOptions::default())
        .unwrap();
    let of = |file: &str| -> Vec<&rye_host::Finding> {
        report
            .findings
            .iter()
            .filter(|f| f.path.ends_with(file))
            .collect()
    };
    let crashed: Vec<_> = report
        .findings
        .iter()
        .filter(|f| f.rule.starts_with("validator/"))
        .collect();
    assert!(crashed.is_empty(), "{crashed:#?}");
    let has = |file: &str, rule: &str, text: &str| {
        of(file)
            .iter()
            .any(|f| f.rule == rule && f.message.contains(text))
    };
    assert!(has(
        "nested.py",
        "rye/tool/config-schema-depth",
        "more than 48 levels"
    ));
    assert!(has("pattern.py", "rye/tool/config-schema", "not closed"));
    let from_the_validator = of("many.py")
        .iter()
        .filter(|f| f.validator.as_deref() == Some("rye/standard"))
        .count();
    assert_eq!(from_the_validator, 100);
    assert!(has("many.py", "rye/more", "more findings"));
    assert!(has("required.py", "rye/tool/config-schema", "type is 5"));
    assert!(has("names.py", "rye/tool/config-schema", "\\k<nope>"));
    assert!(
        has("late.py", "rye/more", "more findings"),
        "{:#?}",
        of("late.py").iter().take(3).collect::<Vec<_>>()
    );
    assert!(has("plain.py", "rye/tool/config-schema", "type is 5"));
}
