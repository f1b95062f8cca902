//! `CSV`, `CSVWithNames`, `TSV` and `TSVWithNames`: one line per row, written as batches arrive.
//!
//! CSV follows RFC 4180 with `\n` line ends: a field is quoted only when it holds a `,`, a `"`
//! (doubled inside quotes) or a line break, NULL is an empty field, and an empty *string* is `""`
//! so the two stay distinguishable (as DuckDB writes them). Dates and timestamps are ISO 8601.
//! We do not use `arrow::csv::Writer` because it rejects nested types; here lists, structs and
//! maps are written as their arrow text (`[1, 2]`), quoted as needed.
//!
//! TSV is ClickHouse's `TabSeparated`: no quoting, backslash escapes for `\`, tab, newline and
//! carriage return, NULL as `\N`, timestamps as `2023-11-14 22:13:20`.

use std::io::{BufWriter, Write};

use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use arrow::util::display::FormatOptions as DisplayOptions;

use super::value_text::{batch_columns, display_options, push_tsv_escaped, TemporalStyle};
use super::{check_columns, BatchWriter, FormatError, OutputFormat, QueryStats};

/// Bytes of rendered rows collected before they are handed to the output.
const CHUNK_BYTES: usize = 64 * 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Dialect {
    Csv,
    Tsv,
}

/// Writes delimited rows, with an optional header line of column names.
pub(crate) struct DelimitedWriter {
    out: BufWriter<Box<dyn Write + Send>>,
    schema: SchemaRef,
    dialect: Dialect,
    with_names: bool,
    header_written: bool,
    display: DisplayOptions<'static>,
}

impl DelimitedWriter {
    /// A CSV writer; `with_names` adds the header line.
    pub(crate) fn csv(schema: SchemaRef, out: Box<dyn Write + Send>, with_names: bool) -> Self {
        Self::new(Dialect::Csv, schema, out, with_names)
    }

    /// A ClickHouse `TabSeparated` writer; `with_names` adds the header line.
    pub(crate) fn tsv(schema: SchemaRef, out: Box<dyn Write + Send>, with_names: bool) -> Self {
        Self::new(Dialect::Tsv, schema, out, with_names)
    }

    fn new(
        dialect: Dialect,
        schema: SchemaRef,
        out: Box<dyn Write + Send>,
        with_names: bool,
    ) -> Self {
        let style = match dialect {
            Dialect::Csv => TemporalStyle::Iso,
            Dialect::Tsv => TemporalStyle::Readable,
        };
        Self {
            out: BufWriter::new(out),
            schema,
            dialect,
            with_names,
            header_written: false,
            display: display_options(style),
        }
    }

    fn format(&self) -> OutputFormat {
        match (self.dialect, self.with_names) {
            (Dialect::Csv, false) => OutputFormat::Csv,
            (Dialect::Csv, true) => OutputFormat::CsvWithNames,
            (Dialect::Tsv, false) => OutputFormat::Tsv,
            (Dialect::Tsv, true) => OutputFormat::TsvWithNames,
        }
    }

    fn separator(&self) -> char {
        match self.dialect {
            Dialect::Csv => ',',
            Dialect::Tsv => '\t',
        }
    }

    /// Writes the header line the first time it is called, if the format has one.
    fn write_header_once(&mut self) -> Result<(), FormatError> {
        if self.header_written {
            return Ok(());
        }
        self.header_written = true;
        if !self.with_names {
            return Ok(());
        }
        let mut line = String::new();
        for (index, field) in self.schema.fields().iter().enumerate() {
            if index > 0 {
                line.push(self.separator());
            }
            self.push_field(field.name(), &mut line);
        }
        line.push('\n');
        self.out.write_all(line.as_bytes())?;
        Ok(())
    }

    fn push_field(&self, value: &str, out: &mut String) {
        match self.dialect {
            Dialect::Csv => push_csv_field(value, out),
            Dialect::Tsv => push_tsv_escaped(value, out),
        }
    }
}

impl BatchWriter for DelimitedWriter {
    fn write_batch(&mut self, batch: &RecordBatch) -> Result<(), FormatError> {
        check_columns(self.format(), &self.schema, batch)?;
        self.write_header_once()?;
        let columns = batch_columns(batch, &self.display)?;
        let null = match self.dialect {
            Dialect::Csv => "",
            Dialect::Tsv => "\\N",
        };
        let mut chunk = String::with_capacity(CHUNK_BYTES);
        let mut value = String::new();
        for row in 0..batch.num_rows() {
            for (index, column) in columns.iter().enumerate() {
                if index > 0 {
                    chunk.push(self.separator());
                }
                if column.is_null(row) {
                    chunk.push_str(null);
                } else {
                    value.clear();
                    column.write(row, &mut value)?;
                    self.push_field(&value, &mut chunk);
                }
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

/// Appends `value` as one RFC 4180 field, quoted only when it must be (or is empty, to tell an
/// empty string from NULL).
fn push_csv_field(value: &str, out: &mut String) {
    let needs_quotes = value.is_empty() || value.contains([',', '"', '\n', '\r']);
    if !needs_quotes {
        out.push_str(value);
        return;
    }
    out.push('"');
    for c in value.chars() {
        if c == '"' {
            out.push('"');
        }
        out.push(c);
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::{ArrayRef, StringArray};
    use arrow::datatypes::{DataType, Field, Schema};

    use super::super::test_data::sample;
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
    fn csv_quotes_only_when_needed() {
        let (schema, batch) = sample();
        let text = write(OutputFormat::Csv, schema, &[batch]);
        let expected = "\
1,1.5,plain,2023-11-14T22:13:20,\"[1, 2]\"
-20,,,,
,-0.25,\"a,\"\"b\"\"\tc\nd|e\",2023-11-14T22:13:20.123456,\"[3, NULL]\"
";
        assert_eq!(text, expected);
    }

    #[test]
    fn csv_with_names_adds_a_header_even_without_rows() {
        let (schema, batch) = sample();
        let text = write(OutputFormat::CsvWithNames, schema.clone(), &[batch]);
        assert!(text.starts_with("i,f,s,ts,l\n1,1.5,plain,"), "{text}");
        assert_eq!(
            write(OutputFormat::CsvWithNames, schema.clone(), &[]),
            "i,f,s,ts,l\n"
        );
        assert_eq!(write(OutputFormat::Csv, schema, &[]), "");
    }

    #[test]
    fn csv_tells_empty_string_from_null() {
        let schema = Arc::new(Schema::new(vec![Field::new("s", DataType::Utf8, true)]));
        let column: ArrayRef = Arc::new(StringArray::from(vec![Some(""), None, Some(" x ")]));
        let batch = RecordBatch::try_new(schema.clone(), vec![column]).unwrap();
        assert_eq!(write(OutputFormat::Csv, schema, &[batch]), "\"\"\n\n x \n");
    }

    #[test]
    fn tsv_escapes_and_writes_null_as_backslash_n() {
        let (schema, batch) = sample();
        let text = write(OutputFormat::Tsv, schema, &[batch]);
        let expected = "\
1\t1.5\tplain\t2023-11-14 22:13:20\t[1, 2]
-20\t\\N\t\\N\t\\N\t\\N
\\N\t-0.25\ta,\"b\"\\tc\\nd|e\t2023-11-14 22:13:20.123456\t[3, NULL]
";
        assert_eq!(text, expected);
    }

    #[test]
    fn tsv_with_names_escapes_the_header() {
        let schema = Arc::new(Schema::new(vec![
            Field::new("a\tb", DataType::Utf8, true),
            Field::new("c", DataType::Utf8, true),
        ]));
        let columns: Vec<ArrayRef> = vec![
            Arc::new(StringArray::from(vec!["back\\slash"])),
            Arc::new(StringArray::from(vec!["x"])),
        ];
        let batch = RecordBatch::try_new(schema.clone(), columns).unwrap();
        let text = write(OutputFormat::TsvWithNames, schema, &[batch]);
        assert_eq!(text, "a\\tb\tc\nback\\\\slash\tx\n");
    }
}
