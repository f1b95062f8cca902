//! Rendering single Arrow values as text, shared by the text formats.
//!
//! Every value goes through arrow's [`ArrayFormatter`], so every Arrow type prints (views,
//! dictionaries, decimals, time zones, intervals, nested types, binary as lowercase hex). Top-level
//! NULLs are detected here with the column's *logical* nulls (a NULL inside a dictionary's values
//! counts) so each format can spell them its own way; NULLs nested inside lists and structs print
//! as `NULL`.

use arrow::array::Array;
use arrow::buffer::NullBuffer;
use arrow::datatypes::DataType;
use arrow::error::ArrowError;
use arrow::record_batch::RecordBatch;
use arrow::util::display::{ArrayFormatter, FormatOptions as DisplayOptions};

/// How dates and timestamps are spelled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TemporalStyle {
    /// ISO 8601 / RFC 3339 with a `T` separator (arrow's default), for machine-read CSV.
    Iso,
    /// `2023-11-14 22:13:20.123456`, as ClickHouse and DuckDB print them, for people and TSV.
    Readable,
}

/// `%.f` prints the fraction only when it is non-zero, with 3, 6 or 9 digits.
const READABLE_DATETIME: &str = "%Y-%m-%d %H:%M:%S%.f";
const READABLE_DATETIME_TZ: &str = "%Y-%m-%d %H:%M:%S%.f%:z";

/// Arrow display options for the text formats: nested NULLs as `NULL`, temporal values in `style`.
pub(crate) fn display_options(style: TemporalStyle) -> DisplayOptions<'static> {
    let options = DisplayOptions::new()
        .with_display_error(false)
        .with_null("NULL");
    match style {
        TemporalStyle::Iso => options,
        TemporalStyle::Readable => options
            .with_datetime_format(Some(READABLE_DATETIME))
            .with_timestamp_format(Some(READABLE_DATETIME))
            .with_timestamp_tz_format(Some(READABLE_DATETIME_TZ)),
    }
}

/// One column of a batch, ready to be rendered row by row.
pub(crate) struct ColumnText<'a> {
    formatter: ArrayFormatter<'a>,
    nulls: Option<NullBuffer>,
}

impl ColumnText<'_> {
    /// Whether the value at `row` is NULL.
    pub(crate) fn is_null(&self, row: usize) -> bool {
        self.nulls.as_ref().is_some_and(|nulls| nulls.is_null(row))
    }

    /// Appends the text of the (non-NULL) value at `row` to `out`.
    pub(crate) fn write(&self, row: usize, out: &mut String) -> Result<(), ArrowError> {
        self.formatter.value(row).write(out)
    }
}

/// Prepares every column of `batch` for rendering.
pub(crate) fn batch_columns<'a>(
    batch: &'a RecordBatch,
    options: &DisplayOptions<'a>,
) -> Result<Vec<ColumnText<'a>>, ArrowError> {
    batch
        .columns()
        .iter()
        .map(|column| {
            Ok(ColumnText {
                formatter: ArrayFormatter::try_new(column.as_ref(), options)?,
                nulls: column.logical_nulls(),
            })
        })
        .collect()
}

/// Appends `value` with newline, carriage return and tab spelled `\n`, `\r`, `\t`, so that it stays
/// on one line of a table.
pub(crate) fn push_one_line(value: &str, out: &mut String) {
    for c in value.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c => out.push(c),
        }
    }
}

/// Appends `value` escaped as ClickHouse `TabSeparated` does: backslash, tab, newline and carriage
/// return become `\\`, `\t`, `\n`, `\r`.
pub(crate) fn push_tsv_escaped(value: &str, out: &mut String) {
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\t' => out.push_str("\\t"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            c => out.push(c),
        }
    }
}

/// Cuts `text` to at most `max_chars` characters, the last being `…`; `0` means no limit.
///
/// Widths are counted in `char`s: without a Unicode width table, wide (CJK) characters and
/// combining marks can still misalign a column.
pub(crate) fn truncate_chars(text: &mut String, max_chars: usize) {
    if max_chars == 0 {
        return;
    }
    if let Some((cut, _)) = text.char_indices().nth(max_chars) {
        // `text` has more than `max_chars` characters: keep `max_chars - 1` and the ellipsis.
        let keep = text
            .char_indices()
            .nth(max_chars - 1)
            .map_or(cut, |(index, _)| index);
        text.truncate(keep);
        text.push('…');
    }
}

/// The display width of `text`, counted in characters.
pub(crate) fn char_width(text: &str) -> usize {
    text.chars().count()
}

/// Whether values of `data_type` are numbers (and so right-aligned in tables).
pub(crate) fn is_numeric(data_type: &DataType) -> bool {
    match data_type {
        DataType::Dictionary(_, values) => is_numeric(values),
        DataType::RunEndEncoded(_, values) => is_numeric(values.data_type()),
        other => other.is_numeric(),
    }
}

/// A short, readable name for `data_type`: arrow's own name, except that nested types list only
/// their children's names and types (arrow's spelling adds nullability and field metadata).
pub(crate) fn type_label(data_type: &DataType) -> String {
    match data_type {
        DataType::List(item) => format!("List({})", type_label(item.data_type())),
        DataType::LargeList(item) => format!("LargeList({})", type_label(item.data_type())),
        DataType::ListView(item) => format!("ListView({})", type_label(item.data_type())),
        DataType::LargeListView(item) => {
            format!("LargeListView({})", type_label(item.data_type()))
        }
        DataType::FixedSizeList(item, size) => {
            format!("FixedSizeList({size} x {})", type_label(item.data_type()))
        }
        DataType::Struct(fields) => {
            let fields = fields
                .iter()
                .map(|field| format!("{} {}", field.name(), type_label(field.data_type())))
                .collect::<Vec<_>>();
            format!("Struct({})", fields.join(", "))
        }
        DataType::Map(entries, _) => match entries.data_type() {
            DataType::Struct(key_value) if key_value.len() == 2 => format!(
                "Map({}, {})",
                type_label(key_value[0].data_type()),
                type_label(key_value[1].data_type())
            ),
            _ => "Map".to_string(),
        },
        DataType::Dictionary(keys, values) => {
            format!("Dictionary({keys}, {})", type_label(values))
        }
        DataType::RunEndEncoded(_, values) => {
            format!("RunEndEncoded({})", type_label(values.data_type()))
        }
        DataType::Union(..) => "Union".to_string(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::{DictionaryArray, Int32Array, StringArray};
    use arrow::datatypes::{Field, Int32Type, TimeUnit};

    use super::*;

    #[test]
    fn truncation_counts_characters_not_bytes() {
        let mut text = "ééééé".to_string();
        truncate_chars(&mut text, 5);
        assert_eq!(text, "ééééé");
        truncate_chars(&mut text, 3);
        assert_eq!(text, "éé…");
        let mut unlimited = "abcdef".to_string();
        truncate_chars(&mut unlimited, 0);
        assert_eq!(unlimited, "abcdef");
    }

    #[test]
    fn escapes_keep_values_on_one_line() {
        let mut one_line = String::new();
        push_one_line("a\tb\nc\\", &mut one_line);
        assert_eq!(one_line, "a\\tb\\nc\\");
        let mut tsv = String::new();
        push_tsv_escaped("a\tb\nc\r\\", &mut tsv);
        assert_eq!(tsv, "a\\tb\\nc\\r\\\\");
    }

    #[test]
    fn dictionary_with_null_value_is_logically_null() {
        let values = StringArray::from(vec![Some("x"), None]);
        let keys = Int32Array::from(vec![Some(0), Some(1), None]);
        let dict = DictionaryArray::<Int32Type>::try_new(keys, Arc::new(values)).unwrap();
        let batch = RecordBatch::try_from_iter(vec![("d", Arc::new(dict) as _)]).unwrap();
        let options = display_options(TemporalStyle::Readable);
        let columns = batch_columns(&batch, &options).unwrap();
        assert!(!columns[0].is_null(0));
        assert!(columns[0].is_null(1));
        assert!(columns[0].is_null(2));
    }

    #[test]
    fn type_labels_are_short() {
        let list = DataType::List(Arc::new(Field::new_list_field(DataType::Int64, true)));
        assert_eq!(type_label(&list), "List(Int64)");
        let ts = DataType::Timestamp(TimeUnit::Nanosecond, Some("UTC".into()));
        assert_eq!(type_label(&ts), ts.to_string());
        let strukt = DataType::Struct(
            vec![
                Field::new("a", DataType::Int64, false),
                Field::new("b", DataType::Utf8View, true),
            ]
            .into(),
        );
        assert_eq!(type_label(&strukt), "Struct(a Int64, b Utf8View)");
        assert!(is_numeric(&DataType::Decimal128(10, 2)));
        assert!(!is_numeric(&DataType::Utf8));
    }
}
