//! The `markdown/xml` parser: directives.
//!
//! A directive is Markdown holding one fenced ```` ```xml ```` block whose
//! root element is `<directive name="…" version="…">`. Text before the
//! block is the preamble; text after it is the body (the prompt an agent
//! follows). The document is:
//!
//! | key | from |
//! |---|---|
//! | `name`, `version`, `extends` | attributes of `<directive>` |
//! | `description`, `category`, `author`, … | children of `<metadata>`, as text |
//! | `model` | attributes of `<metadata><model>` |
//! | `limits` | attributes of `<metadata><limits>`, numbers where numeric |
//! | `permissions` | `[{"tag": "cap", "content": "rye.<action>.<kind>.<target>"}]` |
//! | `acknowledged_risks` | `[{"risk", "reason"}]` from `<permissions><acknowledge>` |
//! | `hooks`, `context` | `<metadata><hooks>`, `<metadata><context>` |
//! | `inputs`, `outputs` | `[{name, type, required, default?, description?}]` |
//! | `process` | `[{name, description, action, …}]`, one per `<process><step>` |
//! | `success_criteria` | text of each `<success_criteria><criterion>` |
//! | `actions` | every `<search|load|execute|sign|fetch>` outside `<metadata>` |
//! | other children | generic: text, or attributes and children |
//! | `preamble`, `body`, `content` | Markdown before and after the block; the XML |
//!
//! The text of `<template>`, `<example>` and `<raw>` elements is taken
//! verbatim, so it may hold anything, XML or not.

use rye_guest::parser::{Diagnostic, ParseError, ParseInput, Parsed, Parser};
use rye_guest::serde_json::{Map, Value};
use rye_parse_support::markdown;

pub struct Directive;

impl Parser for Directive {
    fn parse(input: ParseInput) -> Result<Parsed, ParseError> {
        parse_directive(&input.content)
    }
}

rye_guest::export_parser!(Directive);

const PRIMARY_ACTIONS: &[&str] = &["search", "load", "execute", "sign", "fetch"];

/// How deeply elements may nest. Real directives use a handful of levels;
/// the bound keeps the component's stack small.
const MAX_DEPTH: u32 = 64;
const VERBATIM: &[&str] = &["template", "example", "raw"];

/// Parses a directive file.
pub fn parse_directive(content: &str) -> Result<Parsed, ParseError> {
    let content = content.strip_prefix('\u{feff}').unwrap_or(content);
    let rest = markdown::strip_comment_line(content);
    let rest_offset = content.len() - rest.len();
    let fence = markdown::find_fence(rest, "xml").ok_or_else(|| {
        ParseError::structure(
            "no ```xml block was found; a directive keeps its <directive> element in one",
        )
    })?;
    let line_offset = content[..rest_offset + fence.inner_start]
        .matches('\n')
        .count() as u32;

    let (masked, verbatim) = mask_verbatim(fence.inner);
    let options = roxmltree::ParsingOptions {
        allow_dtd: false,
        ..Default::default()
    };
    let doc = roxmltree::Document::parse_with_options(&masked, options).map_err(|e| {
        let pos = e.pos();
        // The message ends with a position inside the XML block; the
        // reported one is in the file.
        let text = e.to_string();
        let message = text.rsplit_once(" at ").map_or(text.as_str(), |(m, _)| m);
        ParseError::syntax_at(
            format!("invalid XML: {message}"),
            pos.row + line_offset,
            pos.col,
        )
    })?;

    check_depth(&doc, line_offset)?;
    let mut reader = Reader {
        doc: &doc,
        line_offset,
        verbatim: &verbatim,
        diagnostics: Vec::new(),
    };
    let mut document = reader.directive(doc.root_element())?;
    document.insert(
        "preamble".into(),
        Value::String(rest[..fence.start].trim().to_owned()),
    );
    document.insert(
        "body".into(),
        Value::String(rest[fence.end..].trim().to_owned()),
    );
    document.insert(
        "content".into(),
        Value::String(fence.inner.trim().to_owned()),
    );
    Ok(Parsed {
        document,
        diagnostics: reader.diagnostics,
    })
}

/// Refuses documents nested deeper than [`MAX_DEPTH`], without recursing.
fn check_depth(doc: &roxmltree::Document, line_offset: u32) -> Result<(), ParseError> {
    // Nodes come in document order, parents before children, so one pass
    // with a depth per node id suffices.
    let mut depths: Vec<u32> = Vec::new();
    for node in doc.descendants() {
        let index = node.id().get_usize();
        let parent = node
            .parent()
            .map_or(0, |p| depths.get(p.id().get_usize()).copied().unwrap_or(0));
        let depth = parent + u32::from(node.is_element());
        if depths.len() <= index {
            depths.resize(index + 1, 0);
        }
        depths[index] = depth;
        if depth > MAX_DEPTH {
            let pos = doc.text_pos_at(node.range().start);
            return Err(ParseError::structure_at(
                format!("elements nest more than {MAX_DEPTH} levels deep"),
                pos.row + line_offset,
                pos.col,
            ));
        }
    }
    Ok(())
}

/// Replaces the content of verbatim elements with placeholders holding as
/// many newlines, so XML error positions stay true, and returns the
/// original texts by placeholder index.
fn mask_verbatim(xml: &str) -> (String, Vec<String>) {
    let mut out = String::with_capacity(xml.len());
    let mut texts = Vec::new();
    let mut rest = xml;
    while let Some((open_at, tag)) = next_verbatim_open(rest) {
        let Some(gt) = rest[open_at..].find('>').map(|i| open_at + i) else {
            break;
        };
        if rest[..gt].ends_with('/') {
            out.push_str(&rest[..=gt]);
            rest = &rest[gt + 1..];
            continue;
        }
        let close = format!("</{tag}>");
        let Some(close_at) = rest[gt + 1..].find(&close).map(|i| gt + 1 + i) else {
            break;
        };
        let inner = &rest[gt + 1..close_at];
        out.push_str(&rest[..=gt]);
        out.push_str(&format!("\u{E000}{}\u{E000}", texts.len()));
        out.extend(std::iter::repeat_n('\n', inner.matches('\n').count()));
        texts.push(inner.to_owned());
        rest = &rest[close_at..];
    }
    out.push_str(rest);
    (out, texts)
}

fn next_verbatim_open(text: &str) -> Option<(usize, &'static str)> {
    VERBATIM
        .iter()
        .filter_map(|tag| {
            let mut from = 0;
            while let Some(i) = text[from..].find(&format!("<{tag}")) {
                let at = from + i;
                let next = text[at + 1 + tag.len()..].chars().next();
                if matches!(next, Some('>' | '/' | ' ' | '\t' | '\n' | '\r')) {
                    return Some((at, *tag));
                }
                from = at + 1;
            }
            None
        })
        .min_by_key(|(at, _)| *at)
}

struct Reader<'a, 'input> {
    doc: &'a roxmltree::Document<'input>,
    line_offset: u32,
    verbatim: &'a [String],
    diagnostics: Vec<Diagnostic>,
}

type Node<'a, 'input> = roxmltree::Node<'a, 'input>;

impl<'a, 'input> Reader<'a, 'input> {
    fn position(&self, node: Node) -> (u32, u32) {
        let pos = self.doc.text_pos_at(node.range().start);
        (pos.row + self.line_offset, pos.col)
    }

    fn structure(&self, node: Node, message: String) -> ParseError {
        let (line, col) = self.position(node);
        ParseError::structure_at(message, line, col)
    }

    fn warn(&mut self, node: Node, rule: &str, message: String) {
        let (line, col) = self.position(node);
        self.diagnostics
            .push(Diagnostic::warning(rule, message).at(line, col));
    }

    fn directive(&mut self, root: Node<'a, 'input>) -> Result<Map<String, Value>, ParseError> {
        if root.tag_name().name() != "directive" {
            return Err(self.structure(
                root,
                format!(
                    "the XML block's root element is <{}>; it must be <directive>",
                    root.tag_name().name()
                ),
            ));
        }
        let name = root
            .attribute("name")
            .ok_or_else(|| self.structure(root, "<directive> has no name attribute".into()))?;
        let mut doc = Map::new();
        doc.insert("name".into(), name.into());
        for attr in ["version", "extends"] {
            if let Some(value) = root.attribute(attr) {
                doc.insert(attr.into(), value.into());
            }
        }

        for child in root.children().filter(Node::is_element) {
            let tag = child.tag_name().name();
            match tag {
                "metadata" => self.metadata(child, &mut doc)?,
                "inputs" => {
                    let inputs = self.fields(child, true)?;
                    self.insert(&mut doc, child, "inputs", inputs);
                }
                "outputs" => {
                    let outputs = self.fields(child, false)?;
                    self.insert(&mut doc, child, "outputs", outputs);
                }
                "process" => {
                    let steps = self.process(child);
                    self.insert(&mut doc, child, "process", steps);
                }
                "success_criteria" => {
                    let criteria = elements(child)
                        .map(|c| Value::String(self.text(c)))
                        .collect();
                    self.insert(&mut doc, child, "success_criteria", Value::Array(criteria));
                }
                _ => {
                    let value = self.generic(child);
                    self.insert(&mut doc, child, tag, value);
                }
            }
        }

        let mut actions = Vec::new();
        self.collect_actions(root, &mut actions);
        doc.insert("actions".into(), Value::Array(actions));
        Ok(doc)
    }

    /// Adds a key unless an earlier part of the directive set it, which
    /// gets a warning instead of a silent overwrite.
    fn insert(&mut self, doc: &mut Map<String, Value>, node: Node, key: &str, value: Value) {
        if doc.contains_key(key) {
            self.warn(
                node,
                "directive/duplicate-key",
                format!("<{key}> repeats a key already set; the first is kept"),
            );
        } else {
            doc.insert(key.into(), value);
        }
    }

    fn metadata(
        &mut self,
        metadata: Node<'a, 'input>,
        doc: &mut Map<String, Value>,
    ) -> Result<(), ParseError> {
        for child in elements(metadata) {
            let tag = child.tag_name().name();
            match tag {
                "model" => {
                    let attrs = Value::Object(attributes(child));
                    self.insert(doc, child, "model", attrs);
                }
                "limits" => {
                    let limits = attributes(child)
                        .into_iter()
                        .map(|(k, v)| (k, coerce(v.as_str().unwrap_or_default())))
                        .collect();
                    self.insert(doc, child, "limits", Value::Object(limits));
                }
                "permissions" => {
                    let (caps, risks) = self.permissions(child)?;
                    self.insert(doc, child, "permissions", caps);
                    if let Value::Array(list) = &risks
                        && !list.is_empty()
                    {
                        self.insert(doc, child, "acknowledged_risks", risks);
                    }
                }
                "hooks" => {
                    let hooks = elements(child).map(|h| self.generic_object(h)).collect();
                    self.insert(doc, child, "hooks", Value::Array(hooks));
                }
                "context" => {
                    let mut context = Map::new();
                    for part in ["system", "before", "after", "suppress"] {
                        context.insert(part.into(), Value::Array(Vec::new()));
                    }
                    for entry in elements(child) {
                        let text = Value::String(self.text(entry));
                        match context.get_mut(entry.tag_name().name()) {
                            Some(Value::Array(list)) => list.push(text),
                            _ => self.warn(
                                entry,
                                "directive/unknown-context",
                                format!("<context> takes <system>, <before>, <after> or <suppress>, not <{}>", entry.tag_name().name()),
                            ),
                        }
                    }
                    self.insert(doc, child, "context", Value::Object(context));
                }
                _ => {
                    let value = self.generic(child);
                    self.insert(doc, child, tag, value);
                }
            }
        }
        Ok(())
    }

    fn permissions(&mut self, node: Node) -> Result<(Value, Value), ParseError> {
        let mut caps = Vec::new();
        let mut risks = Vec::new();
        let cap = |content: String| {
            let mut m = Map::new();
            m.insert("tag".into(), "cap".into());
            m.insert("content".into(), content.into());
            Value::Object(m)
        };
        if direct_text(node).trim() == "*" {
            caps.push(cap("rye.*".into()));
        }
        for child in elements(node) {
            let tag = child.tag_name().name();
            if tag == "acknowledge" {
                let mut risk = Map::new();
                risk.insert(
                    "risk".into(),
                    child.attribute("risk").unwrap_or_default().into(),
                );
                risk.insert("reason".into(), self.text(child).into());
                risks.push(Value::Object(risk));
                continue;
            }
            if !PRIMARY_ACTIONS.contains(&tag) {
                return Err(self.structure(
                    child,
                    format!(
                        "<permissions> cannot hold <{tag}>; it takes {} and <acknowledge>",
                        PRIMARY_ACTIONS
                            .iter()
                            .map(|a| format!("<{a}>"))
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                ));
            }
            let targets: Vec<_> = elements(child).collect();
            if targets.is_empty() {
                let text = self.text(child);
                caps.push(cap(match text.as_str() {
                    "" | "*" => format!("rye.{tag}.*"),
                    target => format!("rye.{tag}.{target}"),
                }));
            }
            for target in targets {
                caps.push(cap(format!(
                    "rye.{tag}.{}.{}",
                    target.tag_name().name(),
                    self.text(target)
                )));
            }
        }
        Ok((Value::Array(caps), Value::Array(risks)))
    }

    fn fields(&mut self, node: Node, with_default: bool) -> Result<Value, ParseError> {
        let mut list = Vec::new();
        for field in elements(node) {
            let name = field.attribute("name").ok_or_else(|| {
                self.structure(
                    field,
                    format!("<{}> has no name attribute", field.tag_name().name()),
                )
            })?;
            let mut entry = Map::new();
            entry.insert("name".into(), name.into());
            entry.insert(
                "type".into(),
                field.attribute("type").unwrap_or("string").into(),
            );
            let required = field
                .attribute("required")
                .is_some_and(|r| r.eq_ignore_ascii_case("true"));
            entry.insert("required".into(), required.into());
            if with_default && let Some(default) = field.attribute("default") {
                entry.insert("default".into(), default.into());
            }
            for attr in field.attributes() {
                if !matches!(attr.name(), "name" | "type" | "required" | "default") {
                    entry.insert(attr.name().into(), attr.value().into());
                }
            }
            let description = self.text(field);
            if !description.is_empty() {
                entry.insert("description".into(), description.into());
            }
            list.push(Value::Object(entry));
        }
        Ok(Value::Array(list))
    }

    fn process(&mut self, node: Node) -> Value {
        let steps = elements(node)
            .map(|step| {
                let mut entry = match self.generic_object(step) {
                    Value::Object(m) => m,
                    _ => unreachable!("generic_object returns an object"),
                };
                if step.tag_name().name() != "step" {
                    entry.insert("tag".into(), step.tag_name().name().into());
                }
                Value::Object(entry)
            })
            .collect();
        Value::Array(steps)
    }

    /// An element as JSON: its text when it has neither attributes nor
    /// child elements, else an object of attributes and children (repeated
    /// tags become lists) with any direct text under `text`.
    fn generic(&mut self, node: Node) -> Value {
        if node.attributes().len() == 0 && elements(node).next().is_none() {
            Value::String(self.text(node))
        } else {
            self.generic_object(node)
        }
    }

    fn generic_object(&mut self, node: Node) -> Value {
        let mut map = attributes(node);
        let mut groups: Vec<(String, Vec<Value>)> = Vec::new();
        for child in elements(node) {
            let tag = child.tag_name().name();
            let value = self.generic(child);
            match groups.iter_mut().find(|(t, _)| t == tag) {
                Some((_, values)) => values.push(value),
                None => groups.push((tag.to_owned(), vec![value])),
            }
        }
        for (tag, mut values) in groups {
            let value = if values.len() == 1 {
                values.remove(0)
            } else {
                Value::Array(values)
            };
            map.insert(tag, value);
        }
        let text = self.restore(direct_text(node).trim());
        if !text.is_empty() {
            map.insert("text".into(), text.into());
        }
        Value::Object(map)
    }

    /// All text inside `node`, verbatim sections restored, trimmed.
    fn text(&self, node: Node) -> String {
        let text: String = node
            .descendants()
            .filter(Node::is_text)
            .filter_map(|t| t.text())
            .collect();
        self.restore(text.trim())
    }

    fn restore(&self, text: &str) -> String {
        if !text.contains('\u{E000}') {
            return text.to_owned();
        }
        let mut out = String::new();
        let mut parts = text.split('\u{E000}');
        out.push_str(parts.next().unwrap_or_default());
        while let (Some(index), Some(after)) = (parts.next(), parts.next()) {
            if let Some(original) = index
                .parse::<usize>()
                .ok()
                .and_then(|i| self.verbatim.get(i))
            {
                out.push_str(original);
            }
            out.push_str(after.trim_start_matches('\n'));
        }
        out.trim().to_owned()
    }

    fn collect_actions(&mut self, node: Node, out: &mut Vec<Value>) {
        for child in elements(node) {
            let tag = child.tag_name().name();
            if tag == "metadata" {
                continue;
            }
            if PRIMARY_ACTIONS.contains(&tag) {
                let mut action = Map::new();
                action.insert("primary".into(), tag.into());
                action.extend(attributes(child));
                let mut params = Map::new();
                for param in elements(child).filter(|p| p.tag_name().name() == "param") {
                    let Some(name) = param.attribute("name") else {
                        self.warn(
                            param,
                            "directive/param-without-name",
                            "<param> has no name attribute".into(),
                        );
                        continue;
                    };
                    let value = param
                        .attribute("value")
                        .map(str::to_owned)
                        .unwrap_or_else(|| self.text(param));
                    params.insert(name.into(), value.into());
                }
                action.insert("params".into(), Value::Object(params));
                out.push(Value::Object(action));
            }
            self.collect_actions(child, out);
        }
    }
}

fn elements<'a, 'input>(node: Node<'a, 'input>) -> impl Iterator<Item = Node<'a, 'input>> {
    node.children().filter(Node::is_element)
}

fn direct_text(node: Node) -> String {
    node.children()
        .filter(Node::is_text)
        .filter_map(|t| t.text())
        .collect()
}

fn attributes(node: Node) -> Map<String, Value> {
    node.attributes()
        .map(|a| (a.name().to_owned(), Value::from(a.value())))
        .collect()
}

/// Numbers where the text is numeric, else the text.
fn coerce(text: &str) -> Value {
    if let Ok(i) = text.parse::<i64>() {
        return i.into();
    }
    match text.parse::<f64>() {
        Ok(f) if f.is_finite() => f.into(),
        _ => text.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rye_guest::serde_json::json;

    const DIRECTIVE: &str = r#"<!-- rye:signed:x -->
# Deploy

Intro text.

```xml
<directive name="deploy" version="1.0.0">
  <metadata>
    <description>Deploy the service</description>
    <category>ops</category>
    <author>rye</author>
    <model tier="general" fallback="fast"/>
    <limits turns="10" spend="0.5"/>
    <permissions>
      <execute><tool>rye.bash.*</tool></execute>
      <search>*</search>
      <acknowledge risk="network">Needs the registry</acknowledge>
    </permissions>
  </metadata>
  <inputs>
    <input name="env" type="string" required="true">Target environment</input>
    <input name="dry" type="boolean" default="false"/>
  </inputs>
  <process>
    <step name="build">
      <description>Build it</description>
      <execute item_type="tool" item_id="rye/bash/bash"><param name="command" value="make"/></execute>
    </step>
    <step name="announce">
      <template>Deployed {env} <at> once & for all</template>
    </step>
  </process>
  <success_criteria>
    <criterion>Service answers</criterion>
  </success_criteria>
  <outputs><output name="url" type="string">Where it runs</output></outputs>
</directive>
```

Follow the steps.
"#;

    #[test]
    fn full_directive() {
        let parsed = parse_directive(DIRECTIVE).unwrap();
        assert!(parsed.diagnostics.is_empty(), "{:?}", parsed.diagnostics);
        let d = Value::Object(parsed.document);
        assert_eq!(d["name"], "deploy");
        assert_eq!(d["version"], "1.0.0");
        assert_eq!(d["description"], "Deploy the service");
        assert_eq!(d["limits"], json!({"turns": 10, "spend": 0.5}));
        assert_eq!(
            d["permissions"],
            json!([{"tag": "cap", "content": "rye.execute.tool.rye.bash.*"}, {"tag": "cap", "content": "rye.search.*"}])
        );
        assert_eq!(
            d["acknowledged_risks"],
            json!([{"risk": "network", "reason": "Needs the registry"}])
        );
        assert_eq!(
            d["inputs"],
            json!([
                {"name": "env", "type": "string", "required": true, "description": "Target environment"},
                {"name": "dry", "type": "boolean", "required": false, "default": "false"}
            ])
        );
        assert_eq!(d["process"][0]["name"], "build");
        assert_eq!(
            d["process"][1]["template"],
            "Deployed {env} <at> once & for all"
        );
        assert_eq!(d["success_criteria"], json!(["Service answers"]));
        assert_eq!(
            d["actions"],
            json!([{"primary": "execute", "item_type": "tool", "item_id": "rye/bash/bash", "params": {"command": "make"}}])
        );
        assert_eq!(d["preamble"], "# Deploy\n\nIntro text.");
        assert_eq!(d["body"], "Follow the steps.");
    }

    #[test]
    fn xml_errors_point_into_the_file() {
        let text = "```xml\n<directive name=\"x\">\n  <metadata>\n</directive>\n```\n";
        let Err(ParseError::Syntax(e)) = parse_directive(text) else {
            panic!()
        };
        assert_eq!(e.at.map(|p| p.line), Some(4), "{}", e.message);
    }

    #[test]
    fn deep_nesting_is_refused_with_its_line() {
        let depth = MAX_DEPTH as usize + 5;
        let text = format!(
            "```xml\n<directive name=\"x\">\n{}{}\n</directive>\n```\n",
            "<a>".repeat(depth),
            "</a>".repeat(depth)
        );
        let Err(ParseError::Structure(e)) = parse_directive(&text) else {
            panic!()
        };
        assert!(e.message.contains("levels deep"));
        assert_eq!(e.at.map(|p| p.line), Some(3));
    }

    #[test]
    fn missing_block_is_a_structure_error() {
        assert!(matches!(
            parse_directive("# nothing\n"),
            Err(ParseError::Structure(_))
        ));
    }

    #[test]
    fn unknown_permission_is_rejected_with_its_line() {
        let text = "```xml\n<directive name=\"x\"><metadata><permissions>\n<read path=\"*\"/>\n</permissions></metadata></directive>\n```\n";
        let Err(ParseError::Structure(e)) = parse_directive(text) else {
            panic!()
        };
        assert_eq!(e.at.map(|p| p.line), Some(3));
        assert!(e.message.contains("<read>"));
    }
}
