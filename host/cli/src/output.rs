//! Text output for people.

use std::io::{self, Write};

use rye_host::{FileCheck, Loaded, SearchResponse, SignOutcome};

pub fn search(out: &mut impl Write, response: &SearchResponse) -> io::Result<()> {
    let shown = response.results.len();
    let query = if response.query.is_empty() {
        "everything".to_owned()
    } else {
        format!("{:?}", response.query)
    };
    writeln!(
        out,
        "{shown} of {} results for {query} in {}",
        response.total, response.scope
    )?;
    for hit in &response.results {
        writeln!(out)?;
        writeln!(
            out,
            "{:>6.2}  {:<9} {}  [{}]",
            hit.score,
            hit.kind.as_str(),
            hit.id,
            hit.source
        )?;
        if !hit.description.is_empty() {
            writeln!(out, "        {}", one_line(&hit.description, 88))?;
        }
        if let Some(error) = &hit.error {
            writeln!(out, "        error: {error}")?;
        }
        if let Some(winner) = hit.shadowed_by {
            writeln!(out, "        shadowed by the {winner} space")?;
        }
        for shadow in &hit.shadows {
            writeln!(
                out,
                "        shadows {} ({})",
                shadow.path.display(),
                shadow.source
            )?;
        }
    }
    if response.offset + shown < response.total {
        writeln!(out)?;
        writeln!(out, "(more: --offset {})", response.offset + shown)?;
    }
    Ok(())
}

pub fn load(out: &mut impl Write, loaded: &Loaded) -> io::Result<()> {
    writeln!(
        out,
        "{} {}  [{}] {}",
        loaded.item_type,
        loaded.item_id,
        loaded.source,
        loaded.path.display()
    )?;
    for shadow in &loaded.shadows {
        writeln!(out, "shadows {} ({})", shadow.path.display(), shadow.source)?;
    }
    if let Some(path) = &loaded.destination_path {
        writeln!(out, "copied to {}", path.display())?;
    }
    writeln!(out, "signature: {}", signature_line(&loaded.signature))?;
    for warning in &loaded.warnings {
        writeln!(out, "warning: {warning}")?;
    }
    if let Some(error) = &loaded.parse_error {
        writeln!(out, "parse error: {error}")?;
    }
    for d in &loaded.diagnostics {
        let at =
            d.at.map(|p| format!(":{}:{}", p.line, p.column))
                .unwrap_or_default();
        writeln!(out, "{:?}{at}: {} [{}]", d.severity, d.message, d.rule)?;
    }
    writeln!(out)?;
    write!(out, "{}", loaded.content)?;
    if !loaded.content.ends_with('\n') {
        writeln!(out)?;
    }
    Ok(())
}

/// A signature status as one line: `verified by <fingerprint> (<owner>)`,
/// or the failure and why.
fn signature_line(signature: &serde_json::Value) -> String {
    let field = |name: &str| signature.get(name).and_then(|v| v.as_str());
    let status = field("status").or(signature.as_str()).unwrap_or("unknown");
    let mut line = status.to_uppercase();
    if let Some(fingerprint) = field("fingerprint") {
        line.push_str(&format!(" by {fingerprint}"));
    }
    if let Some(owner) = field("owner") {
        line.push_str(&format!(" ({owner})"));
    }
    if let Some(error) = field("error") {
        line.push_str(&format!(": {error}"));
    }
    line
}

/// Pretty JSON and a newline.
pub fn json(out: &mut impl Write, value: &impl serde::Serialize) -> io::Result<()> {
    serde_json::to_writer_pretty(&mut *out, value)?;
    writeln!(out)
}

fn one_line(text: &str, max: usize) -> String {
    let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if flat.chars().count() <= max {
        flat
    } else {
        format!("{}…", flat.chars().take(max - 1).collect::<String>())
    }
}

pub fn signed(out: &mut impl Write, outcomes: &[SignOutcome]) -> io::Result<()> {
    let mut untrusted = None;
    for outcome in outcomes {
        match outcome {
            Ok(signed) => {
                let verb = if signed.changed {
                    "signed"
                } else {
                    "unchanged"
                };
                writeln!(out, "{verb:<9} {}", signed.path.display())?;
                for lock in &signed.removed_lockfiles {
                    writeln!(out, "          removed stale lockfile {}", lock.display())?;
                }
                if !signed.trusted {
                    untrusted = Some(signed.fingerprint.clone());
                }
            }
            Err((path, error)) => writeln!(out, "failed    {}: {error}", path.display())?,
        }
    }
    if let Some(fp) = untrusted {
        writeln!(
            out,
            "\nnote: key {fp} is not trusted here, so these signatures will not verify; run `rye keys trust`"
        )?;
    }
    Ok(())
}

pub fn verified(out: &mut impl Write, checks: &[FileCheck]) -> io::Result<()> {
    let mut failed = 0;
    let mut passed = 0;
    for check in checks.iter().filter(|c| c.status != "skipped") {
        match (&check.error, &check.fingerprint) {
            (Some(error), _) => {
                failed += 1;
                writeln!(out, "FAIL {}: {error}", check.path.display())?;
            }
            (None, Some(fp)) => {
                passed += 1;
                writeln!(
                    out,
                    "ok   {}  ({fp}, {})",
                    check.path.display(),
                    check.owner.as_deref().unwrap_or("?")
                )?;
            }
            (None, None) => writeln!(out, "--   {}", check.path.display())?,
        }
        if let Some(warning) = &check.warning {
            writeln!(out, "     warning: {warning}")?;
        }
    }
    writeln!(out, "\n{passed} verified, {failed} failed")
}

/// A progress bar on standard error: shown only on a terminal, outside CI
/// (`CI` set), and when not asked to be quiet; redrawn at most ten times a
/// second.
pub struct ProgressBar {
    enabled: bool,
    last: std::sync::Mutex<Option<std::time::Instant>>,
}

impl ProgressBar {
    pub fn new(wanted: bool) -> Self {
        use std::io::IsTerminal;
        let in_ci = std::env::var_os("CI").is_some_and(|v| !v.is_empty() && v != "false");
        Self {
            enabled: wanted && !in_ci && io::stderr().is_terminal(),
            last: std::sync::Mutex::new(None),
        }
    }

    pub fn enabled(&self) -> bool {
        self.enabled
    }

    pub fn show(&self, done: usize, total: usize) {
        let mut last = self.last.lock().expect("progress lock");
        let now = std::time::Instant::now();
        if done < total && last.is_some_and(|t| now - t < std::time::Duration::from_millis(100)) {
            return;
        }
        *last = Some(now);
        const WIDTH: usize = 30;
        let filled = (done * WIDTH).checked_div(total).unwrap_or(WIDTH);
        eprint!(
            "\r\x1b[2Kvalidating [{}{}] {done}/{total}",
            "#".repeat(filled),
            " ".repeat(WIDTH - filled)
        );
    }

    pub fn finish(&self) {
        if self.enabled && self.last.lock().expect("progress lock").is_some() {
            eprint!("\r\x1b[2K");
        }
    }
}
