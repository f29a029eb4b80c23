//! `rye validate` reports for machines: SARIF 2.1.0 for code-scanning
//! views, JUnit XML for test dashboards, GitHub Actions annotations. Paths
//! are written relative to the folder validated (annotations: to the
//! working folder), so a report made in CI points into the repository.

use std::collections::BTreeMap;
use std::io::{self, Write};
use std::path::Path;

use rye_host::{Finding, Report, Severity};
use serde_json::{Value, json};

const SARIF_SCHEMA: &str =
    "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json";

/// The report as a SARIF 2.1.0 log with one run.
pub fn sarif(out: &mut impl Write, report: &Report) -> io::Result<()> {
    let mut rules: BTreeMap<&str, Option<&str>> = BTreeMap::new();
    for f in &report.findings {
        rules.entry(&f.rule).or_insert(f.validator.as_deref());
    }
    let rule_index: BTreeMap<&str, usize> =
        rules.keys().enumerate().map(|(i, r)| (*r, i)).collect();
    let results: Vec<Value> = report
        .findings
        .iter()
        .map(|f| {
            let mut region = serde_json::Map::new();
            if let Some(line) = f.line {
                region.insert("startLine".into(), json!(line.max(1)));
                if let Some(column) = f.column {
                    region.insert("startColumn".into(), json!(column.max(1)));
                }
            }
            let mut location = json!({
                "physicalLocation": {
                    "artifactLocation": {
                        "uri": relative_uri(&report.root, &f.path),
                        "uriBaseId": "SRCROOT",
                    },
                }
            });
            if !region.is_empty() {
                location["physicalLocation"]["region"] = Value::Object(region);
            }
            let mut result = json!({
                "ruleId": f.rule,
                "ruleIndex": rule_index[f.rule.as_str()],
                "level": level(f.severity),
                "message": {"text": f.message},
                "locations": [location],
            });
            if let Some(validator) = &f.validator {
                result["properties"] = json!({"validator": validator});
            }
            result
        })
        .collect();
    let rules: Vec<Value> = rules
        .iter()
        .map(|(id, validator)| {
            let text = match validator {
                Some(v) => format!("{id} (validator {v})"),
                None => format!("{id} (checked by the host)"),
            };
            json!({"id": id, "shortDescription": {"text": text}})
        })
        .collect();
    let extensions: Vec<Value> = report
        .validators
        .iter()
        .map(|v| json!({"name": v.name, "version": v.version}))
        .collect();
    let log = json!({
        "$schema": SARIF_SCHEMA,
        "version": "2.1.0",
        "runs": [{
            "tool": {
                "driver": {
                    "name": "rye",
                    "version": env!("CARGO_PKG_VERSION"),
                    "rules": rules,
                },
                "extensions": extensions,
            },
            "originalUriBaseIds": {
                "SRCROOT": {"uri": directory_uri(&report.root)},
            },
            "results": results,
            "properties": {"items": report.items, "chains": report.chains},
        }],
    });
    serde_json::to_writer_pretty(&mut *out, &log)?;
    writeln!(out)
}

/// The report as JUnit XML: one test case per file checked, failed when
/// the file has an error finding; warnings go to the case's output.
pub fn junit(out: &mut impl Write, report: &Report) -> io::Result<()> {
    let mut files: BTreeMap<&Path, Vec<&Finding>> = report
        .checked
        .iter()
        .map(|p| (p.as_path(), Vec::new()))
        .collect();
    for f in &report.findings {
        files.entry(&f.path).or_default().push(f);
    }
    let failures = files
        .values()
        .filter(|found| found.iter().any(|f| f.severity == Severity::Error))
        .count();
    writeln!(out, r#"<?xml version="1.0" encoding="UTF-8"?>"#)?;
    writeln!(
        out,
        r#"<testsuites name="rye validate" tests="{}" failures="{failures}" errors="0">"#,
        files.len()
    )?;
    writeln!(
        out,
        r#"  <testsuite name="{}" tests="{}" failures="{failures}" errors="0" skipped="0">"#,
        xml(&report.root.display().to_string()),
        files.len()
    )?;
    for (path, found) in &files {
        let name = relative_path(&report.root, path);
        let class = classname(&name);
        write!(
            out,
            r#"    <testcase classname="{}" name="{}" file="{}""#,
            xml(class),
            xml(&name),
            xml(&name)
        )?;
        if found.is_empty() {
            writeln!(out, "/>")?;
            continue;
        }
        writeln!(out, ">")?;
        let errors: Vec<&&Finding> = found
            .iter()
            .filter(|f| f.severity == Severity::Error)
            .collect();
        if let Some(first) = errors.first() {
            writeln!(
                out,
                r#"      <failure message="{}" type="{}">{}</failure>"#,
                xml(&first.message),
                xml(&first.rule),
                xml(&errors
                    .iter()
                    .map(|f| finding_line(f))
                    .collect::<Vec<_>>()
                    .join("\n"))
            )?;
        }
        let others: Vec<String> = found
            .iter()
            .filter(|f| f.severity != Severity::Error)
            .map(|f| finding_line(f))
            .collect();
        if !others.is_empty() {
            writeln!(
                out,
                "      <system-out>{}</system-out>",
                xml(&others.join("\n"))
            )?;
        }
        writeln!(out, "    </testcase>")?;
    }
    writeln!(out, "  </testsuite>")?;
    writeln!(out, "</testsuites>")
}

/// The report as GitHub Actions workflow commands: an annotation per
/// finding, shown on its file and line in the run and the pull request,
/// then the summary as a plain line. Paths are relative to `base`, the
/// job's working folder (the repository's root after a checkout).
pub fn github(out: &mut impl Write, report: &Report, base: &Path) -> io::Result<()> {
    for f in &report.findings {
        let command = match f.severity {
            Severity::Error => "error",
            Severity::Warning => "warning",
            Severity::Info => "notice",
        };
        let mut properties = vec![format!(
            "file={}",
            command_property(&relative_path(base, &f.path))
        )];
        if let Some(line) = f.line {
            properties.push(format!("line={}", line.max(1)));
            if let Some(column) = f.column {
                properties.push(format!("col={}", column.max(1)));
            }
        }
        properties.push(format!("title={}", command_property(&f.rule)));
        writeln!(
            out,
            "::{command} {}::{}",
            properties.join(","),
            command_data(&f.message)
        )?;
    }
    writeln!(out, "{}", summary(report))
}

/// A workflow command's message: `%`, CR and LF escaped.
fn command_data(text: &str) -> String {
    text.replace('%', "%25")
        .replace('\r', "%0D")
        .replace('\n', "%0A")
}

/// A workflow command's property value: as data, and `:` and `,` too.
fn command_property(text: &str) -> String {
    command_data(text).replace(':', "%3A").replace(',', "%2C")
}

/// One finding as a line: `line:column: severity[rule]: message`.
pub fn finding_line(f: &Finding) -> String {
    let at = match (f.line, f.column) {
        (Some(l), Some(c)) => format!("{l}:{c}: "),
        (Some(l), None) => format!("{l}: "),
        _ => String::new(),
    };
    let severity = match f.severity {
        Severity::Error => "error",
        Severity::Warning => "warning",
        Severity::Info => "info",
    };
    format!("{at}{severity}[{}]: {}", f.rule, f.message)
}

/// The kind folder of a path under `.ai/` (`tools`, `directives`, …), or
/// `other`.
fn classname(relative: &str) -> &str {
    relative
        .strip_prefix(".ai/")
        .and_then(|rest| rest.split('/').next())
        .unwrap_or("other")
}

fn level(severity: Severity) -> &'static str {
    match severity {
        Severity::Error => "error",
        Severity::Warning => "warning",
        Severity::Info => "note",
    }
}

fn relative_path(root: &Path, path: &Path) -> String {
    let relative = path.strip_prefix(root).unwrap_or(path);
    relative
        .components()
        .map(|c| c.as_os_str().to_string_lossy())
        .collect::<Vec<_>>()
        .join("/")
}

/// A relative URI reference for `path` (RFC 3986: reserved and non-ASCII
/// bytes percent-encoded).
fn relative_uri(root: &Path, path: &Path) -> String {
    percent_encode(&relative_path(root, path))
}

fn directory_uri(root: &Path) -> String {
    let mut path = percent_encode(&root.display().to_string());
    if !path.ends_with('/') {
        path.push('/');
    }
    if !path.starts_with('/') {
        path.insert(0, '/');
    }
    format!("file://{path}")
}

fn percent_encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || b"-._~/".contains(&byte) {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

fn xml(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            // XML 1.0 cannot carry most control characters at all.
            c if (c as u32) < 0x20 && !matches!(c, '\n' | '\t' | '\r') => out.push('\u{fffd}'),
            c => out.push(c),
        }
    }
    out
}

/// The human report: findings grouped by file, then the summary.
pub fn human(out: &mut impl Write, report: &Report) -> io::Result<()> {
    let mut current = None;
    for finding in &report.findings {
        if current != Some(&finding.path) {
            writeln!(out, "{}", finding.path.display())?;
            current = Some(&finding.path);
        }
        writeln!(out, "  {}", finding_line(finding))?;
    }
    if !report.findings.is_empty() {
        writeln!(out)?;
    }
    writeln!(out, "{}", summary(report))
}

/// `N items, N chains, N validators: N errors, N warnings`.
pub fn summary(report: &Report) -> String {
    let errors = report
        .findings
        .iter()
        .filter(|f| f.severity == Severity::Error)
        .count();
    format!(
        "{} items, {} chains, {} validators: {} errors, {} warnings",
        report.items,
        report.chains,
        report.validators.len(),
        errors,
        report.findings.len() - errors
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_uris_and_xml() {
        assert_eq!(
            percent_encode(".ai/tools/a b#1.py"),
            ".ai/tools/a%20b%231.py"
        );
        assert_eq!(percent_encode("é"), "%C3%A9");
        assert_eq!(
            xml("<a & \"b\">\u{1}"),
            "&lt;a &amp; &quot;b&quot;&gt;\u{fffd}"
        );
        assert_eq!(directory_uri(Path::new("/work/repo")), "file:///work/repo/");
        assert_eq!(command_data("50% done\r\nnext"), "50%25 done%0D%0Anext");
        assert_eq!(command_property("a:b,c%"), "a%3Ab%2Cc%25");
    }
}
