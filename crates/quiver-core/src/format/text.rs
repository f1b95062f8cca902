//! `Markdown` and `Vertical`: human-readable text written row by row as batches arrive.
//!
//! Markdown is a GitHub-flavoured table: `|` in values is escaped as `\|`, NULL is an empty cell,
//! numbers are right-aligned through the `--:` delimiter row. Vertical follows ClickHouse: a
//! `Row N:` header underlined with `─`, then one `name: value` line per column with the values
//! aligned. In both, newlines and tabs inside values are shown as `\n` and `\t`, so that a value
//! never breaks the layout.

use std::io::{BufWriter, Write};

use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use arrow::util::display::FormatOptions as DisplayOptions;

use super::value_text::{
    batch_columns, char_width, display_options, is_numeric, push_one_line, TemporalStyle,
};
use super::{check_columns, BatchWriter, FormatError, OutputFormat, QueryStats};

/// Bytes of rendered rows collected before they are handed to the output.
const CHUNK_BYTES: usize = 64 * 1024;

/// Appends `value` escaped for a Markdown table cell.
fn push_markdown_cell(value: &str, out: &mut String) {
    let mut one_line = String::with_capacity(value.len());
    push_one_line(value, &mut one_line);
    for c in one_line.chars() {
        if c == '|' {
            out.push('\\');
        }
        out.push(c);
    }
}

/// Writes a GitHub-flavoured Markdown table.
pub(crate) struct MarkdownWriter {
    out: BufWriter<Box<dyn Write + Send>>,
    schema: SchemaRef,
    header_written: bool,
    display: DisplayOptions<'static>,
}

impl MarkdownWriter {
    pub(crate) fn new(schema: SchemaRef, out: Box<dyn Write + Send>) -> Self {
        Self {
            out: BufWriter::new(out),
            schema,
            header_written: false,
            display: display_options(TemporalStyle::Readable),
        }
    }

    /// Writes the header and delimiter rows the first time it is called. A result without
    /// columns has no table at all.
    fn write_header_once(&mut self) -> Result<(), FormatError> {
        if self.header_written {
            return Ok(());
        }
        self.header_written = true;
        if self.schema.fields().is_empty() {
            return Ok(());
        }
        let mut header = String::from("|");
        let mut delimiter = String::from("|");
        for field in self.schema.fields() {
            header.push(' ');
            push_markdown_cell(field.name(), &mut header);
            header.push_str(" |");
            delimiter.push_str(match is_numeric(field.data_type()) {
                true => "--:|",
                false => ":--|",
            });
        }
        header.push('\n');
        delimiter.push('\n');
        self.out.write_all(header.as_bytes())?;
        self.out.write_all(delimiter.as_bytes())?;
        Ok(())
    }
}

impl BatchWriter for MarkdownWriter {
    fn write_batch(&mut self, batch: &RecordBatch) -> Result<(), FormatError> {
        check_columns(OutputFormat::Markdown, &self.schema, batch)?;
        self.write_header_once()?;
        if batch.num_columns() == 0 {
            return Ok(());
        }
        let columns = batch_columns(batch, &self.display)?;
        let mut chunk = String::with_capacity(CHUNK_BYTES);
        let mut value = String::new();
        for row in 0..batch.num_rows() {
            chunk.push('|');
            for column in &columns {
                chunk.push(' ');
                if !column.is_null(row) {
                    value.clear();
                    column.write(row, &mut value)?;
                    push_markdown_cell(&value, &mut chunk);
                }
                chunk.push_str(" |");
            }
            chunk.push('\n');
            if chunk.len() >= CHUNK_BYTES {
                self.out.write_all(chunk.as_bytes())?;
                chunk.clear();
            }
        }
        self.out.write_all(chunk.as_bytes())?;
        Ok(())
    }

    fn finish(mut self: Box<Self>, _stats: &QueryStats) -> Result<(), FormatError> {
        self.write_header_once()?;
        self.out.flush()?;
        Ok(())
    }
}

/// Writes ClickHouse's `Vertical` format.
pub(crate) struct VerticalWriter {
    out: BufWriter<Box<dyn Write + Send>>,
    schema: SchemaRef,
    /// Each column's `name:` followed by the spaces that align the values.
    labels: Vec<String>,
    rows_written: u64,
    display: DisplayOptions<'static>,
}

impl VerticalWriter {
    pub(crate) fn new(schema: SchemaRef, out: Box<dyn Write + Send>) -> Self {
        let names: Vec<String> = schema
            .fields()
            .iter()
            .map(|field| {
                let mut name = String::new();
                push_one_line(field.name(), &mut name);
                name
            })
            .collect();
        let widest = names.iter().map(|name| char_width(name)).max().unwrap_or(0);
        let labels = names
            .into_iter()
            .map(|name| {
                let padding = widest - char_width(&name);
                format!("{name}:{} ", " ".repeat(padding))
            })
            .collect();
        Self {
            out: BufWriter::new(out),
            schema,
            labels,
            rows_written: 0,
            display: display_options(TemporalStyle::Readable),
        }
    }
}

impl BatchWriter for VerticalWriter {
    fn write_batch(&mut self, batch: &RecordBatch) -> Result<(), FormatError> {
        check_columns(OutputFormat::Vertical, &self.schema, batch)?;
        let columns = batch_columns(batch, &self.display)?;
        let mut chunk = String::with_capacity(CHUNK_BYTES);
        let mut value = String::new();
        for row in 0..batch.num_rows() {
            if self.rows_written > 0 {
                chunk.push('\n');
            }
            self.rows_written += 1;
            let title = format!("Row {}:", self.rows_written);
            chunk.push_str(&title);
            chunk.push('\n');
            chunk.extend(std::iter::repeat_n('─', char_width(&title)));
            chunk.push('\n');
            for (label, column) in self.labels.iter().zip(&columns) {
                chunk.push_str(label);
                if column.is_null(row) {
                    chunk.push_str("NULL");
                } else {
                    value.clear();
                    column.write(row, &mut value)?;
                    push_one_line(&value, &mut chunk);
                }
                chunk.push('\n');
            }
            if chunk.len() >= CHUNK_BYTES {
                self.out.write_all(chunk.as_bytes())?;
                chunk.clear();
            }
        }
        self.out.write_all(chunk.as_bytes())?;
        Ok(())
    }

    fn finish(mut self: Box<Self>, _stats: &QueryStats) -> Result<(), FormatError> {
        self.out.flush()?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_data::{numbers, sample};
    use super::super::{format_batches, FormatOptions, QueryStats};
    use super::*;

    fn write(format: OutputFormat, schema: SchemaRef, batches: &[RecordBatch]) -> String {
        let bytes = format_batches(
            format,
            schema,
            batches,
            &FormatOptions::default(),
            &QueryStats::default(),
        )
        .unwrap();
        String::from_utf8(bytes).unwrap()
    }

    #[test]
    fn markdown_aligns_numbers_right_and_escapes_pipes() {
        let (schema, batch) = sample();
        let text = write(OutputFormat::Markdown, schema, &[batch]);
        let expected = "\
| i | f | s | ts | l |
|--:|--:|:--|:--|:--|
| 1 | 1.5 | plain | 2023-11-14 22:13:20 | [1, 2] |
| -20 |  |  |  |  |
|  | -0.25 | a,\"b\"\\tc\\nd\\|e | 2023-11-14 22:13:20.123456 | [3, NULL] |
";
        assert_eq!(text, expected);
    }

    #[test]
    fn markdown_without_rows_is_just_the_header() {
        let (schema, _) = sample();
        let text = write(OutputFormat::Markdown, schema, &[]);
        assert_eq!(text, "| i | f | s | ts | l |\n|--:|--:|:--|:--|:--|\n");
    }

    #[test]
    fn vertical_prints_one_block_per_row() {
        let (schema, batch) = sample();
        let text = write(OutputFormat::Vertical, schema, &[batch]);
        let expected = "\
Row 1:
──────
i:  1
f:  1.5
s:  plain
ts: 2023-11-14 22:13:20
l:  [1, 2]

Row 2:
──────
i:  -20
f:  NULL
s:  NULL
ts: NULL
l:  NULL

Row 3:
──────
i:  NULL
f:  -0.25
s:  a,\"b\"\\tc\\nd|e
ts: 2023-11-14 22:13:20.123456
l:  [3, NULL]
";
        assert_eq!(text, expected);
    }

    #[test]
    fn vertical_numbers_rows_across_batches() {
        let (schema, first) = numbers(0..9);
        let (_, second) = numbers(9..10);
        let text = write(OutputFormat::Vertical, schema, &[first, second]);
        assert!(text.ends_with("\n\nRow 10:\n───────\nn: 9\n"), "{text}");
        assert_eq!(write(OutputFormat::Vertical, numbers(0..0).0, &[]), "");
    }
}
