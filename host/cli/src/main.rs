//! `rye`: the command line of the Rye host.

mod output;

use std::path::PathBuf;
use std::process::ExitCode;

use std::io::Write;

use anyhow::Context;
use clap::{Parser, Subcommand};
use rye_host::{
    ExecuteRequest, ItemKind, LoadRequest, Rye, RyeConfig, SearchRequest, SourceFilter, Space,
};

/// Find, inspect, run and sign the items of `.ai/` folders.
///
/// Items live in three spaces, searched in order: the project
/// (`<project>/.ai`), the user (`~/.ai`, or `$USER_SPACE/.ai`) and the
/// system space bundled with rye (or `$RYE_SYSTEM_SPACE/.ai`).
#[derive(Parser)]
#[command(name = "rye", version, max_term_width = 100)]
struct Cli {
    /// The project folder (the one holding `.ai/`).
    #[arg(long, global = true, default_value = ".", value_name = "DIR")]
    project: PathBuf,

    /// Print JSON instead of text.
    #[arg(long, global = true)]
    json: bool,

    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Search items by keyword across the spaces.
    ///
    /// Terms match as substrings, case-insensitively; `*` and `?` are
    /// wildcards over words; "quoted phrases" match as written; AND (the
    /// default between terms), OR, NOT and parentheses combine them.
    Search {
        /// directive, tool, knowledge or all; narrow with a namespace, as
        /// in tool.rye.core.*
        scope: String,
        /// The query; empty lists everything in scope.
        query: Vec<String>,
        /// all, project, user or system.
        #[arg(long, default_value = "all")]
        source: String,
        #[arg(long, default_value_t = 10)]
        limit: usize,
        #[arg(long, default_value_t = 0)]
        offset: usize,
    },
    /// Show an item, optionally copying it into the project or user space.
    Load {
        /// directive, tool or knowledge.
        kind: ItemKind,
        /// The item id: its path under .ai/<kind folder>/ without extension.
        id: String,
        /// Look only in this space: project, user or system.
        #[arg(long)]
        source: Option<Space>,
        /// Copy the item into this space: project or user.
        #[arg(long, value_name = "SPACE")]
        to: Option<Space>,
        /// Overwrite the file at the destination if there is one.
        #[arg(long)]
        force: bool,
    },
    /// Run a tool through its chain, or return a directive or knowledge
    /// entry ready to follow. Prints the result as JSON; exits 1 when its
    /// status is "error".
    Execute {
        /// tool, directive or knowledge.
        kind: ItemKind,
        /// The item id.
        id: String,
        /// The parameters, a JSON object.
        #[arg(long, default_value = "{}", value_name = "JSON")]
        params: String,
        /// Read the parameters from a file (`-` for stdin) instead.
        #[arg(long, value_name = "FILE", conflicts_with = "params")]
        params_file: Option<PathBuf>,
        /// Build and validate the chain; run nothing.
        #[arg(long)]
        dry_run: bool,
        /// Include every step's events in the result.
        #[arg(long)]
        trace: bool,
    },
}

fn main() -> ExitCode {
    quiet_library_backtraces();
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("RYE_LOG")
                .unwrap_or_else(|_| "warn".into()),
        )
        .init();
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        // The reader went away (`rye search … | head`): nothing to report.
        Err(e)
            if e.downcast_ref::<std::io::Error>()
                .is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe) =>
        {
            ExitCode::SUCCESS
        }
        Err(e) if e.downcast_ref::<Failed>().is_some() => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// `RUST_BACKTRACE=1` also makes every library error capture a stack trace,
/// and the WASI layer builds an error for each file a component looks for
/// and does not find: a measurable cost on every component call. Panics
/// keep their backtraces; an explicit `RUST_LIB_BACKTRACE` is respected.
fn quiet_library_backtraces() {
    if std::env::var_os("RUST_LIB_BACKTRACE").is_none() {
        // SAFETY: called first thing in main, before any other thread
        // exists, so nothing can read the environment concurrently.
        unsafe { std::env::set_var("RUST_LIB_BACKTRACE", "0") };
    }
}

fn run(cli: Cli) -> anyhow::Result<()> {
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    let mut config = RyeConfig::from_env()?;
    // One command per process: watching trees would cost more (the kernel
    // tears the watches down at exit) than it could save.
    config.watch = false;
    let rye = Rye::new(config).context("failed to start the host")?;
    let project = Some(std::path::absolute(&cli.project).context("the --project folder")?);
    match cli.command {
        Command::Search {
            scope,
            query,
            source,
            limit,
            offset,
        } => {
            let request = SearchRequest {
                scope,
                query: query.join(" "),
                source: SourceFilter::parse(&source)?,
                limit,
                offset,
                project,
            };
            let response = rye.search(&request)?;
            if cli.json {
                output::json(&mut out, &response)?;
            } else {
                output::search(&mut out, &response)?;
            }
        }
        Command::Load {
            kind,
            id,
            source,
            to,
            force,
        } => {
            let loaded = rye.load(&LoadRequest {
                kind,
                id,
                source,
                destination: to,
                force,
                project,
            })?;
            if cli.json {
                output::json(&mut out, &loaded)?;
            } else {
                output::load(&mut out, &loaded)?;
            }
        }
        Command::Execute {
            kind,
            id,
            params,
            params_file,
            dry_run,
            trace,
        } => {
            let text = match params_file {
                Some(path) if path.as_os_str() == "-" => std::io::read_to_string(std::io::stdin())
                    .context("reading parameters from stdin")?,
                Some(path) => std::fs::read_to_string(&path)
                    .with_context(|| format!("reading {}", path.display()))?,
                None => params,
            };
            let parameters: serde_json::Value =
                serde_json::from_str(&text).context("the parameters are not JSON")?;
            let request = ExecuteRequest {
                kind,
                id,
                parameters,
                project,
                dry_run,
                trace,
            };
            let rye = std::sync::Arc::new(rye);
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .context("starting the async runtime")?;
            let result = runtime.block_on(rye.execute(&request));
            output::json(&mut out, &result)?;
            out.flush()?;
            if result["status"] == "error" {
                return Err(Failed.into());
            }
        }
    }
    out.flush()?;
    Ok(())
}

/// The item ran and failed; its result, already printed, says why.
#[derive(Debug)]
struct Failed;

impl std::fmt::Display for Failed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the execution failed")
    }
}

impl std::error::Error for Failed {}
