//! Text output for people.

use std::io::{self, Write};

use rye_host::{Loaded, SearchResponse};

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
