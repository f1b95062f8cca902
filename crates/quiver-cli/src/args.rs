//! Command-line arguments (clickhouse-local and duckdb-shell habits).

use std::ffi::OsString;
use std::path::PathBuf;

use clap::Parser;

/// quiver: fast SQL over files, DataFrames and Postgres, in process.
#[derive(Debug, Parser)]
#[command(name = "quiver", version, about, long_about = None)]
pub struct Args {
    /// SQL to run (several statements separated by `;`).
    #[arg(short = 'q', long = "query", value_name = "SQL")]
    pub query: Option<String>,

    /// SQL to run, as a positional argument (like `duckdb -c` / `clickhouse-local -q`).
    #[arg(value_name = "SQL", conflicts_with = "query")]
    pub positional_query: Option<String>,

    /// Output format: Pretty (default on a terminal), CSV, CSVWithNames, TSV (default
    /// otherwise), TSVWithNames, JSON, JSONEachRow, JSONCompact, Markdown, Vertical, Parquet,
    /// Arrow, Null. A `FORMAT <name>` clause at the end of a query overrides it.
    #[arg(short = 'f', long = "format", value_name = "FORMAT")]
    pub format: Option<String>,

    /// Write results to FILE instead of standard output.
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub output: Option<PathBuf>,

    /// Print elapsed time, rows and bytes read to standard error after each statement.
    #[arg(short = 't', long = "time")]
    pub time: bool,

    /// Open (or create) a persistent database directory; the default is in memory.
    #[arg(short = 'd', long = "database", value_name = "DIR")]
    pub database: Option<PathBuf>,

    /// Open the database directory read-only (several processes may share it).
    #[arg(long = "readonly")]
    pub read_only: bool,

    /// Worker threads (default: every core).
    #[arg(long = "threads", value_name = "N")]
    pub threads: Option<usize>,

    /// Show a progress line for queries longer than a second (default: when stderr is a terminal).
    #[arg(long = "progress", overrides_with = "no_progress")]
    pub progress: bool,

    /// Never show the progress line.
    #[arg(long = "no-progress")]
    pub no_progress: bool,
}

impl Args {
    /// Parses `args`, printing help or errors the clap way.
    pub fn parse_from_os(args: impl IntoIterator<Item = OsString>) -> Result<Args, clap::Error> {
        Args::try_parse_from(args)
    }

    /// The query given on the command line, if any.
    pub fn query_text(&self) -> Option<&str> {
        self.query.as_deref().or(self.positional_query.as_deref())
    }
}
