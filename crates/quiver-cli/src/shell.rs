//! The interactive shell: line editing and history (rustyline), statements spanning several
//! lines until a `;`, and DuckDB-style dot commands.

use std::path::PathBuf;
use std::process::ExitCode;

use quiver_core::{OutputFormat, QuiverError};
use rustyline::error::ReadlineError;
use rustyline::DefaultEditor;

use crate::output::{print_error, Runner};

const HELP: &str = "\
Enter SQL statements terminated by a semicolon; they may span several lines.
  .help                 show this help
  .tables               list tables
  .schema TABLE         describe a table's columns
  .format NAME          set the output format (Pretty, CSV, TSV, JSON, JSONEachRow, Markdown, Vertical, ...)
  .timer on|off         print elapsed time and rows/bytes read after each statement
  .quit / .exit         leave (Ctrl-D works too)
Ctrl-C cancels a running query, or clears the statement being typed.";

fn history_path() -> Option<PathBuf> {
    std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".quiver_history"))
}

/// Runs the shell until `.quit` or end of input.
pub async fn run_shell(runner: &mut Runner) -> ExitCode {
    let mut editor = match DefaultEditor::new() {
        Ok(editor) => editor,
        Err(error) => {
            eprintln!("Error: cannot start the line editor: {error}");
            return ExitCode::FAILURE;
        }
    };
    let history = history_path();
    if let Some(path) = &history {
        let _ = editor.load_history(path);
    }
    println!(
        "quiver {} — enter \".help\" for usage hints.",
        env!("CARGO_PKG_VERSION")
    );
    let mut buffer = String::new();
    loop {
        let prompt = if buffer.is_empty() {
            "quiver> "
        } else {
            "   ...> "
        };
        let line = match editor.readline(prompt) {
            Ok(line) => line,
            Err(ReadlineError::Interrupted) => {
                buffer.clear();
                continue;
            }
            Err(ReadlineError::Eof) => break,
            Err(error) => {
                eprintln!("Error: {error}");
                break;
            }
        };
        let trimmed = line.trim();
        if buffer.is_empty() && trimmed.starts_with('.') {
            let _ = editor.add_history_entry(trimmed);
            match dot_command(runner, trimmed).await {
                Flow::Continue => continue,
                Flow::Quit => break,
            }
        }
        if !buffer.is_empty() {
            buffer.push('\n');
        }
        buffer.push_str(&line);
        if !trimmed.ends_with(';') {
            continue;
        }
        let script = std::mem::take(&mut buffer);
        let _ = editor.add_history_entry(script.trim());
        match runner.run_script(&script).await {
            Ok(()) => {}
            Err(QuiverError::Cancelled) => eprintln!("Query cancelled"),
            Err(error) => print_error(&error, &script),
        }
    }
    if let Some(path) = &history {
        let _ = editor.save_history(path);
    }
    ExitCode::SUCCESS
}

enum Flow {
    Continue,
    Quit,
}

async fn dot_command(runner: &mut Runner, command: &str) -> Flow {
    let mut words = command.split_whitespace();
    let name = words.next().unwrap_or_default();
    let argument = words.collect::<Vec<_>>().join(" ");
    let sql = match name {
        ".quit" | ".exit" | ".q" => return Flow::Quit,
        ".help" | ".h" => {
            println!("{HELP}");
            return Flow::Continue;
        }
        ".tables" => "SHOW TABLES;".to_string(),
        ".schema" | ".describe" if !argument.is_empty() => format!("DESCRIBE {argument};"),
        ".format" | ".mode" => {
            match argument.parse::<OutputFormat>() {
                Ok(format) => runner.format = format,
                Err(error) => eprintln!("Error: {}", QuiverError::from(error)),
            }
            return Flow::Continue;
        }
        ".timer" => {
            match argument.as_str() {
                "on" => runner.time = true,
                "off" => runner.time = false,
                _ => eprintln!("Error: use .timer on or .timer off"),
            }
            return Flow::Continue;
        }
        _ => {
            eprintln!("Error: unknown command {name}; enter .help for the list");
            return Flow::Continue;
        }
    };
    if let Err(error) = runner.run_script(&sql).await {
        print_error(&error, &sql);
    }
    Flow::Continue
}
