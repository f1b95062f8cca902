//! Running statements and writing their results: formats, `-o FILE`, `--time`, Ctrl-C.

use std::fs::File;
use std::io::{IsTerminal, Write};
use std::path::PathBuf;

use quiver_core::format::{new_writer, FormatOptions};
use quiver_core::{OutputFormat, QueryResult, QuiverError, Session};

use crate::progress::ProgressLine;

/// Runs statements one at a time against one session and writes their results.
#[derive(Debug)]
pub struct Runner {
    pub(crate) session: Session,
    pub(crate) format: OutputFormat,
    output: Option<PathBuf>,
    pub(crate) time: bool,
    progress: bool,
}

impl Runner {
    pub fn new(
        session: Session,
        format: OutputFormat,
        output: Option<PathBuf>,
        time: bool,
        progress: bool,
    ) -> Self {
        Runner {
            session,
            format,
            output,
            time,
            progress,
        }
    }

    /// Runs every statement of `script` in order, stopping at the first error.
    pub async fn run_script(&mut self, script: &str) -> Result<(), QuiverError> {
        let statements = self.session.parse(script)?;
        if statements.is_empty() {
            return Ok(());
        }
        // One output file for the whole script: created once, so several results append.
        let mut file_sink: Option<File> = match &self.output {
            Some(path) => Some(File::create(path).map_err(|e| {
                QuiverError::Io(format!(
                    "cannot create output file '{}': {e}",
                    path.display()
                ))
            })?),
            None => None,
        };
        for statement in statements {
            let format = statement.format.unwrap_or(self.format);
            let out: Box<dyn Write + Send> = match &mut file_sink {
                Some(file) => Box::new(
                    file.try_clone()
                        .map_err(|e| QuiverError::Io(e.to_string()))?,
                ),
                None => {
                    if format.is_binary() && std::io::stdout().is_terminal() {
                        return Err(QuiverError::InvalidInput(format!(
                            "refusing to write binary format {} to a terminal; use -o FILE or redirect standard output",
                            format.name()
                        )));
                    }
                    Box::new(std::io::stdout())
                }
            };
            let result = tokio::select! {
                result = self.session.execute(&statement) => result?,
                _ = crate::watch::interrupted() => return Err(QuiverError::Cancelled),
            };
            self.drain(result, format, out).await?;
        }
        Ok(())
    }

    /// Streams one result into `out`, watching for Ctrl-C and showing progress.
    async fn drain(
        &self,
        mut result: QueryResult,
        format: OutputFormat,
        out: Box<dyn Write + Send>,
    ) -> Result<(), QuiverError> {
        let show = result.returns_rows();
        let options = FormatOptions {
            max_width: terminal_width(),
            ..FormatOptions::default()
        };
        let mut writer = if show {
            Some(new_writer(format, result.schema(), out, &options)?)
        } else {
            None
        };
        let progress = self
            .progress
            .then(|| ProgressLine::start(result.progress()));
        let outcome: Result<(), QuiverError> = async {
            loop {
                let next = tokio::select! {
                    next = result.next_batch() => next,
                    _ = crate::watch::interrupted() => return Err(QuiverError::Cancelled),
                };
                match next {
                    None => break,
                    Some(batch) => {
                        let batch = batch?;
                        if let Some(writer) = writer.as_mut() {
                            writer.write_batch(&batch)?;
                        }
                    }
                }
            }
            Ok(())
        }
        .await;
        if let Some(progress) = progress {
            progress.stop().await;
        }
        outcome?;
        let stats = result.stats();
        if let Some(writer) = writer {
            writer.finish(&stats)?;
        }
        if self.time {
            eprintln!(
                "Elapsed: {:.3} s. Read {} rows, {}.",
                stats.elapsed.as_secs_f64(),
                group_digits(stats.rows_read),
                human_bytes(stats.bytes_read)
            );
        }
        Ok(())
    }
}

fn terminal_width() -> usize {
    std::env::var("COLUMNS")
        .ok()
        .and_then(|c| c.parse::<usize>().ok())
        .filter(|w| *w >= 20)
        .unwrap_or(120)
}

/// `1234567` → `1,234,567`.
pub(crate) fn group_digits(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, ch) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(ch);
    }
    out
}

/// `1536` → `1.50 KiB`.
pub(crate) fn human_bytes(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["bytes", "KiB", "MiB", "GiB", "TiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} bytes")
    } else {
        format!("{value:.2} {}", UNITS[unit])
    }
}

/// Prints `error` to stderr; parser errors also show the offending line with a caret.
pub(crate) fn print_error(error: &QuiverError, script: &str) {
    eprintln!("Error: {error}");
    if let QuiverError::Parser { line, column, .. } = error {
        if *line > 0 {
            if let Some(text) = script.lines().nth((*line - 1) as usize) {
                eprintln!("  {text}");
                let pad = " ".repeat((*column as usize).saturating_sub(1));
                eprintln!("  {pad}^");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_readable() {
        assert_eq!(group_digits(0), "0");
        assert_eq!(group_digits(1234567), "1,234,567");
        assert_eq!(human_bytes(512), "512 bytes");
        assert_eq!(human_bytes(1536), "1.50 KiB");
    }
}
