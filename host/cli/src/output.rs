//! Text output for people.

use rye_host::{Loaded, SearchResponse};

pub fn search(response: &SearchResponse) {
    let shown = response.results.len();
    let query = if response.query.is_empty() {
        "everything".to_owned()
    } else {
        format!("{:?}", response.query)
    };
    println!(
        "{shown} of {} results for {query} in {}",
        response.total, response.scope
    );
    for hit in &response.results {
        println!();
        println!(
            "{:>6.2}  {:<9} {}  [{}]",
            hit.score,
            hit.kind.as_str(),
            hit.id,
            hit.source
        );
        if !hit.description.is_empty() {
            println!("        {}", one_line(&hit.description, 88));
        }
        if let Some(error) = &hit.error {
            println!("        error: {error}");
        }
        if let Some(winner) = hit.shadowed_by {
            println!("        shadowed by the {winner} space");
        }
        for shadow in &hit.shadows {
            println!(
                "        shadows {} ({})",
                shadow.path.display(),
                shadow.source
            );
        }
    }
    if response.offset + shown < response.total {
        println!();
        println!("(more: --offset {})", response.offset + shown);
    }
}

pub fn load(loaded: &Loaded) {
    println!(
        "{} {}  [{}] {}",
        loaded.item_type,
        loaded.item_id,
        loaded.source,
        loaded.path.display()
    );
    for shadow in &loaded.shadows {
        println!("shadows {} ({})", shadow.path.display(), shadow.source);
    }
    if let Some(path) = &loaded.destination_path {
        println!("copied to {}", path.display());
    }
    if let Some(error) = &loaded.parse_error {
        println!("parse error: {error}");
    }
    for d in &loaded.diagnostics {
        let at =
            d.at.map(|p| format!(":{}:{}", p.line, p.column))
                .unwrap_or_default();
        println!("{:?}{at}: {} [{}]", d.severity, d.message, d.rule);
    }
    println!();
    print!("{}", loaded.content);
    if !loaded.content.ends_with('\n') {
        println!();
    }
}

fn one_line(text: &str, max: usize) -> String {
    let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if flat.chars().count() <= max {
        flat
    } else {
        format!("{}…", flat.chars().take(max - 1).collect::<String>())
    }
}
