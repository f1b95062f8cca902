//! # quiver-cli
//!
//! The `quiver` command, with clickhouse-local's and the DuckDB shell's habits:
//!
//! ```text
//! quiver -q "SELECT count(*) FROM 'hits.parquet'"        # one query
//! quiver "SELECT 1 FORMAT JSONEachRow"                     # positional query, FORMAT clause
//! quiver < script.sql                                      # statements from stdin
//! quiver --database ./db                                   # interactive shell on a database
//! ```
//!
//! This crate is a library with a thin `main`, so the same code is testable and reusable.

mod args;
mod output;
mod progress;
mod shell;
mod watch;

use std::ffi::OsString;
use std::io::{IsTerminal, Read};
use std::process::ExitCode;

use quiver_core::{OutputFormat, QuiverError, Session, SessionOptions};

pub use args::Args;

/// Exit status for a query stopped by Ctrl-C (128 + SIGINT, the shell convention).
const EXIT_CANCELLED: u8 = 130;

/// Runs the CLI with `args` (the program name first) and returns the process exit status.
pub fn run(args: impl IntoIterator<Item = OsString>) -> ExitCode {
    let args = match Args::parse_from_os(args) {
        Ok(args) => args,
        Err(error) => {
            // clap prints help/version to stdout with status 0, usage errors to stderr with 2.
            let _ = error.print();
            return ExitCode::from(error.exit_code().clamp(0, 255) as u8);
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("Error: cannot start the runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    let code = runtime.block_on(run_async(args));
    // The session is gone; say goodbye to the Postgres servers it read from rather than
    // exit under their sessions (they would log each as a lost connection).
    quiver_core::close_postgres_connections(std::time::Duration::from_secs(2));
    code
}

async fn run_async(args: Args) -> ExitCode {
    let default_format = match &args.format {
        Some(name) => match name.parse::<OutputFormat>() {
            Ok(format) => format,
            Err(error) => {
                eprintln!("Error: {}", QuiverError::from(error));
                return ExitCode::from(2);
            }
        },
        None if args.output.is_none() && std::io::stdout().is_terminal() => OutputFormat::Pretty,
        None => OutputFormat::Tsv,
    };
    let options = SessionOptions {
        database: args.database.clone(),
        read_only: args.read_only,
        threads: args.threads,
        memory_limit: None,
    };
    let session = match Session::open(options).await {
        Ok(session) => session,
        Err(error) => {
            eprintln!("Error: {error}");
            return ExitCode::FAILURE;
        }
    };
    for warning in session.warnings() {
        eprintln!("Warning: {warning}");
    }
    let show_progress = !args.no_progress && (args.progress || std::io::stderr().is_terminal());
    let mut runner = output::Runner::new(
        session,
        default_format,
        args.output.clone(),
        args.time,
        show_progress,
    );

    let script = match args.query_text() {
        Some(text) => text.to_string(),
        None if std::io::stdin().is_terminal() => {
            return shell::run_shell(&mut runner).await;
        }
        None => {
            let mut text = String::new();
            if let Err(error) = std::io::stdin().read_to_string(&mut text) {
                eprintln!("Error: cannot read SQL from standard input: {error}");
                return ExitCode::FAILURE;
            }
            text
        }
    };
    match runner.run_script(&script).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(QuiverError::Cancelled) => {
            eprintln!("Query cancelled");
            ExitCode::from(EXIT_CANCELLED)
        }
        Err(error) => {
            output::print_error(&error, &script);
            ExitCode::FAILURE
        }
    }
}
