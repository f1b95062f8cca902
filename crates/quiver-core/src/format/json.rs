//! `JSON`, `JSONCompact` and `JSONEachRow`, streamed: each batch is encoded as it arrives.
//!
//! `JSON` and `JSONCompact` follow ClickHouse: one document with `meta` (column names and arrow
//! type names), `data` (one row per line; an object per row for `JSON`, an array for
//! `JSONCompact`), `rows` and `statistics`. The head is written with the first batch and the tail
//! in [`BatchWriter::finish`]. `JSONEachRow` is newline-delimited JSON with every column present.
//!
//! Values are encoded by arrow-json's encoders: numbers (including decimals) as JSON numbers, NaN
//! and ±infinity as `null`, dates and timestamps as RFC 3339 strings, binary as lowercase hex
//! strings, lists as arrays, structs and maps as objects (NULL struct fields are kept as `null`).
//! Types arrow-json cannot encode (unions, maps with non-string keys) fall back to their arrow text
//! as a JSON string.

use std::io::{BufWriter, Write};

use arrow::array::Array;
use arrow::buffer::NullBuffer;
use arrow::datatypes::{FieldRef, SchemaRef};
use arrow::error::ArrowError;
use arrow::json::writer::{make_encoder, EncoderOptions, NullableEncoder};
use arrow::record_batch::RecordBatch;
use arrow::util::display::{ArrayFormatter, FormatOptions as DisplayOptions};

use super::value_text::{display_options, TemporalStyle};
use super::{check_columns, BatchWriter, FormatError, OutputFormat, QueryStats};

/// Bytes of encoded rows collected before they are handed to the output.
const CHUNK_BYTES: usize = 64 * 1024;

/// Which of the three JSON formats to write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum JsonLayout {
    /// ClickHouse `JSON`: a document whose `data` holds one object per row.
    Document,
    /// ClickHouse `JSONCompact`: a document whose `data` holds one array per row.
    CompactDocument,
    /// `JSONEachRow`: one object per line, nothing else.
    EachRow,
}

/// Streams rows as JSON.
pub(crate) struct JsonWriter {
    out: BufWriter<Box<dyn Write + Send>>,
    schema: SchemaRef,
    layout: JsonLayout,
    /// Each column's encoded `"name":` prefix.
    keys: Vec<Vec<u8>>,
    head_written: bool,
    rows: u64,
    encoder_options: EncoderOptions,
    display: DisplayOptions<'static>,
}

impl JsonWriter {
    pub(crate) fn new(layout: JsonLayout, schema: SchemaRef, out: Box<dyn Write + Send>) -> Self {
        let keys = schema
            .fields()
            .iter()
            .map(|field| {
                let mut key = Vec::with_capacity(field.name().len() + 3);
                push_json_string(field.name(), &mut key);
                key.push(b':');
                key
            })
            .collect();
        Self {
            out: BufWriter::new(out),
            schema,
            layout,
            keys,
            head_written: false,
            rows: 0,
            encoder_options: EncoderOptions::default().with_explicit_nulls(true),
            display: display_options(TemporalStyle::Iso),
        }
    }

    fn format(&self) -> OutputFormat {
        match self.layout {
            JsonLayout::Document => OutputFormat::Json,
            JsonLayout::CompactDocument => OutputFormat::JsonCompact,
            JsonLayout::EachRow => OutputFormat::JsonEachRow,
        }
    }

    /// Writes the document head (`meta` and the opening of `data`) the first time it is called.
    fn write_head_once(&mut self) -> Result<(), FormatError> {
        if self.head_written || self.layout == JsonLayout::EachRow {
            self.head_written = true;
            return Ok(());
        }
        self.head_written = true;
        let mut head = b"{\n\t\"meta\":\n\t[".to_vec();
        for (index, field) in self.schema.fields().iter().enumerate() {
            head.extend_from_slice(if index == 0 { b"\n" } else { b",\n" });
            head.extend_from_slice(b"\t\t{\n\t\t\t\"name\": ");
            push_json_string(field.name(), &mut head);
            head.extend_from_slice(b",\n\t\t\t\"type\": ");
            push_json_string(&field.data_type().to_string(), &mut head);
            head.extend_from_slice(b"\n\t\t}");
        }
        head.extend_from_slice(b"\n\t],\n\n\t\"data\":\n\t[\n");
        self.out.write_all(&head)?;
        Ok(())
    }
}

impl BatchWriter for JsonWriter {
    fn write_batch(&mut self, batch: &RecordBatch) -> Result<(), FormatError> {
        check_columns(self.format(), &self.schema, batch)?;
        self.write_head_once()?;
        let batch_schema = batch.schema();
        let mut encoders = batch
            .columns()
            .iter()
            .zip(batch_schema.fields())
            .map(|(array, field)| {
                ValueEncoder::try_new(field, array.as_ref(), &self.encoder_options, &self.display)
            })
            .collect::<Result<Vec<_>, _>>()?;
        let (open, close) = match self.layout {
            JsonLayout::CompactDocument => (b'[', b']'),
            JsonLayout::Document | JsonLayout::EachRow => (b'{', b'}'),
        };
        let mut chunk = Vec::with_capacity(CHUNK_BYTES);
        for row in 0..batch.num_rows() {
            match self.layout {
                JsonLayout::Document | JsonLayout::CompactDocument => {
                    if self.rows > 0 {
                        chunk.extend_from_slice(b",\n");
                    }
                    chunk.extend_from_slice(b"\t\t");
                }
                JsonLayout::EachRow => {}
            }
            chunk.push(open);
            for (index, (encoder, key)) in encoders.iter_mut().zip(&self.keys).enumerate() {
                if index > 0 {
                    chunk.push(b',');
                }
                if self.layout != JsonLayout::CompactDocument {
                    chunk.extend_from_slice(key);
                }
                encoder.encode(row, &mut chunk)?;
            }
            chunk.push(close);
            if self.layout == JsonLayout::EachRow {
                chunk.push(b'\n');
            }
            self.rows += 1;
            if chunk.len() >= CHUNK_BYTES {
                self.out.write_all(&chunk)?;
                chunk.clear();
            }
        }
        self.out.write_all(&chunk)?;
        Ok(())
    }

    fn finish(mut self: Box<Self>, stats: &QueryStats) -> Result<(), FormatError> {
        self.write_head_once()?;
        if self.layout != JsonLayout::EachRow {
            let tail = format!(
                "\n\t],\n\n\t\"rows\": {},\n\n\t\"statistics\":\n\t{{\n\t\t\"elapsed\": {},\n\t\t\"rows_read\": {},\n\t\t\"bytes_read\": {}\n\t}}\n}}\n",
                self.rows,
                // f64's Display never uses exponent notation, so this is always a JSON number.
                stats.elapsed.as_secs_f64(),
                stats.rows_read,
                stats.bytes_read,
            );
            self.out.write_all(tail.as_bytes())?;
        }
        self.out.flush()?;
        Ok(())
    }
}

/// Encodes one column's values as JSON.
enum ValueEncoder<'a> {
    /// arrow-json's encoder for the column's type.
    Json(NullableEncoder<'a>),
    /// The arrow text of a value arrow-json cannot encode, as a JSON string.
    Text {
        formatter: ArrayFormatter<'a>,
        nulls: Option<NullBuffer>,
        scratch: String,
    },
}

impl<'a> ValueEncoder<'a> {
    fn try_new(
        field: &'a FieldRef,
        array: &'a dyn Array,
        options: &'a EncoderOptions,
        display: &DisplayOptions<'a>,
    ) -> Result<Self, ArrowError> {
        match make_encoder(field, array, options) {
            Ok(encoder) => Ok(ValueEncoder::Json(encoder)),
            // arrow-json rejects only types it has no JSON mapping for; text is the best we can do.
            Err(_) => Ok(ValueEncoder::Text {
                formatter: ArrayFormatter::try_new(array, display)?,
                nulls: array.logical_nulls(),
                scratch: String::new(),
            }),
        }
    }

    fn encode(&mut self, row: usize, out: &mut Vec<u8>) -> Result<(), ArrowError> {
        match self {
            ValueEncoder::Json(encoder) => {
                if encoder.is_null(row) {
                    out.extend_from_slice(b"null");
                } else {
                    encoder.encode(row, out);
                }
            }
            ValueEncoder::Text {
                formatter,
                nulls,
                scratch,
            } => {
                if nulls.as_ref().is_some_and(|nulls| nulls.is_null(row)) {
                    out.extend_from_slice(b"null");
                } else {
                    scratch.clear();
                    formatter.value(row).write(scratch)?;
                    push_json_string(scratch, out);
                }
            }
        }
        Ok(())
    }
}

/// Appends `value` as a quoted JSON string (RFC 8259 escapes).
fn push_json_string(value: &str, out: &mut Vec<u8>) {
    out.push(b'"');
    let mut utf8 = [0; 4];
    for c in value.chars() {
        match c {
            '"' => out.extend_from_slice(b"\\\""),
            '\\' => out.extend_from_slice(b"\\\\"),
            '\n' => out.extend_from_slice(b"\\n"),
            '\r' => out.extend_from_slice(b"\\r"),
            '\t' => out.extend_from_slice(b"\\t"),
            c if u32::from(c) < 0x20 => {
                out.extend_from_slice(format!("\\u{:04x}", u32::from(c)).as_bytes());
            }
            c => out.extend_from_slice(c.encode_utf8(&mut utf8).as_bytes()),
        }
    }
    out.push(b'"');
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use arrow::array::{ArrayRef, BinaryArray, Int32Array, StringArray, StructArray, UnionArray};
    use arrow::datatypes::{DataType, Field, Schema, UnionFields};
    use serde_json::{json, Value};

    use super::super::test_data::{sample, TRICKY};
    use super::super::{format_batches, FormatOptions};
    use super::*;

    fn write(format: OutputFormat, schema: SchemaRef, batches: &[RecordBatch]) -> String {
        let stats = QueryStats {
            elapsed: Duration::from_micros(1500),
            rows_read: 30,
            bytes_read: 240,
        };
        let bytes =
            format_batches(format, schema, batches, &FormatOptions::default(), &stats).unwrap();
        String::from_utf8(bytes).unwrap()
    }

    fn sample_rows() -> Value {
        json!([
            {"i": 1, "f": 1.5, "s": "plain", "ts": "2023-11-14T22:13:20", "l": [1, 2]},
            {"i": -20, "f": null, "s": null, "ts": null, "l": null},
            {"i": null, "f": -0.25, "s": TRICKY, "ts": "2023-11-14T22:13:20.123456", "l": [3, null]},
        ])
    }

    #[test]
    fn json_document_has_meta_data_rows_and_statistics() {
        let (schema, batch) = sample();
        // Two batches, to check the row separators across batches.
        let text = write(
            OutputFormat::Json,
            schema,
            &[batch.slice(0, 1), batch.slice(1, 2)],
        );
        let document: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(document["meta"][0], json!({"name": "i", "type": "Int64"}));
        assert_eq!(
            document["meta"][3],
            json!({"name": "ts", "type": "Timestamp(µs)"})
        );
        assert_eq!(document["meta"].as_array().unwrap().len(), 5);
        assert_eq!(document["data"], sample_rows());
        assert_eq!(document["rows"], json!(3));
        assert_eq!(
            document["statistics"],
            json!({"elapsed": 0.0015, "rows_read": 30, "bytes_read": 240})
        );
        // One row per line, as ClickHouse prints it.
        assert!(text.contains("\n\t\t{\"i\":1,\"f\":1.5,"), "{text}");
    }

    #[test]
    fn json_without_rows_is_still_a_document() {
        let (schema, _) = sample();
        let text = write(OutputFormat::Json, schema, &[]);
        let document: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(document["data"], json!([]));
        assert_eq!(document["rows"], json!(0));
    }

    #[test]
    fn json_compact_writes_arrays() {
        let (schema, batch) = sample();
        let text = write(OutputFormat::JsonCompact, schema, &[batch]);
        let document: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(
            document["data"],
            json!([
                [1, 1.5, "plain", "2023-11-14T22:13:20", [1, 2]],
                [-20, null, null, null, null],
                [null, -0.25, TRICKY, "2023-11-14T22:13:20.123456", [3, null]],
            ])
        );
        assert_eq!(document["meta"][4]["name"], json!("l"));
    }

    #[test]
    fn json_each_row_writes_one_object_per_line_with_explicit_nulls() {
        let (schema, batch) = sample();
        let text = write(OutputFormat::JsonEachRow, schema, &[batch]);
        let lines: Vec<Value> = text
            .lines()
            .map(|line| serde_json::from_str(line).unwrap())
            .collect();
        assert_eq!(Value::Array(lines), sample_rows());
        assert!(text.ends_with("}\n"));
        assert!(
            text.lines().nth(1).unwrap().contains("\"f\":null"),
            "{text}"
        );
    }

    #[test]
    fn binary_is_hex_and_nested_structs_keep_null_fields() {
        let inner = StructArray::from(vec![
            (
                Arc::new(Field::new("a", DataType::Int32, true)),
                Arc::new(Int32Array::from(vec![None, Some(2)])) as ArrayRef,
            ),
            (
                Arc::new(Field::new("b", DataType::Utf8, true)),
                Arc::new(StringArray::from(vec![Some("x"), None])) as ArrayRef,
            ),
        ]);
        let binary = BinaryArray::from(vec![Some(&b"\x00\xff"[..]), None]);
        let batch = RecordBatch::try_from_iter(vec![
            ("st", Arc::new(inner) as ArrayRef),
            ("bin", Arc::new(binary) as ArrayRef),
        ])
        .unwrap();
        let text = write(OutputFormat::JsonEachRow, batch.schema(), &[batch]);
        assert_eq!(
            text,
            "{\"st\":{\"a\":null,\"b\":\"x\"},\"bin\":\"00ff\"}\n{\"st\":{\"a\":2,\"b\":null},\"bin\":null}\n"
        );
    }

    #[test]
    fn unions_fall_back_to_text() {
        let fields = UnionFields::try_new(
            vec![0, 1],
            vec![
                Field::new("n", DataType::Int32, true),
                Field::new("s", DataType::Utf8, true),
            ],
        )
        .unwrap();
        let union = UnionArray::try_new(
            fields,
            vec![0, 1].into(),
            None,
            vec![
                Arc::new(Int32Array::from(vec![Some(7), None])) as ArrayRef,
                Arc::new(StringArray::from(vec![None, Some("q\"")])) as ArrayRef,
            ],
        )
        .unwrap();
        let schema = Arc::new(Schema::new(vec![Field::new(
            "u",
            union.data_type().clone(),
            true,
        )]));
        let batch = RecordBatch::try_new(schema.clone(), vec![Arc::new(union)]).unwrap();
        let text = write(OutputFormat::JsonEachRow, schema, &[batch]);
        let rows: Vec<Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(rows.len(), 2);
        assert!(rows[0]["u"].as_str().unwrap().contains('7'), "{text}");
        assert!(rows[1]["u"].as_str().unwrap().contains("q\""), "{text}");
    }

    #[test]
    fn json_strings_escape_control_characters() {
        let mut out = Vec::new();
        push_json_string("a\"\\\n\u{1}é", &mut out);
        let text = String::from_utf8(out).unwrap();
        assert_eq!(text, "\"a\\\"\\\\\\n\\u0001é\"");
        assert_eq!(
            serde_json::from_str::<String>(&text).unwrap(),
            "a\"\\\n\u{1}é"
        );
    }
}
