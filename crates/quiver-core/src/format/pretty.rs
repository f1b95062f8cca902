//! `FORMAT Pretty`: the DuckDB-shell style box.
//!
//! ```text
//! ┌───────┬─────────┐
//! │   n   │    s    │
//! │ Int64 │  Utf8   │
//! ├───────┼─────────┤
//! │     1 │ one     │
//! │  NULL │ NULL    │
//! └───────┴─────────┘
//! 2 rows
//! ```
//!
//! This is the one writer that buffers: column widths are only known once every displayed row has
//! been seen. It keeps at most `max_rows` rendered (and already width-capped) rows: the first half
//! and a ring of the last half, while counting the rest.

use std::collections::VecDeque;
use std::io::{BufWriter, Write};

use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use arrow::util::display::FormatOptions as DisplayOptions;

use super::value_text::{
    batch_columns, char_width, display_options, is_numeric, push_one_line, truncate_chars,
    type_label, ColumnText, TemporalStyle,
};
use super::{check_columns, BatchWriter, FormatError, FormatOptions, OutputFormat, QueryStats};

/// One rendered row: a cell per column, already escaped and cut to `max_value_width`.
type Row = Vec<String>;

/// Buffers the rows to display and draws the box in [`BatchWriter::finish`].
pub(crate) struct PrettyWriter {
    out: BufWriter<Box<dyn Write + Send>>,
    schema: SchemaRef,
    display: DisplayOptions<'static>,
    max_width: usize,
    max_value_width: usize,
    head_capacity: usize,
    tail_capacity: usize,
    head: Vec<Row>,
    tail: VecDeque<Row>,
    total_rows: u64,
}

impl PrettyWriter {
    pub(crate) fn new(
        schema: SchemaRef,
        out: Box<dyn Write + Send>,
        options: &FormatOptions,
    ) -> Self {
        // With an odd limit the extra row goes to the head, so exactly `max_rows` rows are kept and
        // a result of exactly `max_rows` rows is shown whole.
        let (head_capacity, tail_capacity) = match options.max_rows {
            0 => (usize::MAX, 0),
            max_rows => (max_rows - max_rows / 2, max_rows / 2),
        };
        Self {
            out: BufWriter::new(out),
            schema,
            display: display_options(TemporalStyle::Readable),
            max_width: options.max_width,
            max_value_width: options.max_value_width,
            head_capacity,
            tail_capacity,
            head: Vec::new(),
            tail: VecDeque::new(),
            total_rows: 0,
        }
    }

    fn render_row(
        &self,
        columns: &[ColumnText<'_>],
        row: usize,
        scratch: &mut String,
    ) -> Result<Row, FormatError> {
        columns
            .iter()
            .map(|column| {
                if column.is_null(row) {
                    return Ok("NULL".to_string());
                }
                scratch.clear();
                column.write(row, scratch)?;
                let mut cell = String::with_capacity(scratch.len());
                push_one_line(scratch, &mut cell);
                truncate_chars(&mut cell, self.max_value_width);
                Ok(cell)
            })
            .collect()
    }
}

impl BatchWriter for PrettyWriter {
    fn write_batch(&mut self, batch: &RecordBatch) -> Result<(), FormatError> {
        check_columns(OutputFormat::Pretty, &self.schema, batch)?;
        let num_rows = batch.num_rows();
        let columns = batch_columns(batch, &self.display)?;
        let mut scratch = String::new();
        for row in 0..num_rows {
            if self.head.len() < self.head_capacity {
                let cells = self.render_row(&columns, row, &mut scratch)?;
                self.head.push(cells);
            } else if num_rows - row <= self.tail_capacity {
                // Only the last `tail_capacity` rows of a batch can survive in the ring.
                let cells = self.render_row(&columns, row, &mut scratch)?;
                if self.tail.len() == self.tail_capacity {
                    self.tail.pop_front();
                }
                self.tail.push_back(cells);
            }
        }
        self.total_rows += num_rows as u64;
        Ok(())
    }

    fn finish(mut self: Box<Self>, _stats: &QueryStats) -> Result<(), FormatError> {
        let headers = self
            .schema
            .fields()
            .iter()
            .map(|field| {
                let mut name = String::new();
                push_one_line(field.name(), &mut name);
                truncate_chars(&mut name, self.max_value_width);
                let mut label = type_label(field.data_type());
                truncate_chars(&mut label, self.max_value_width);
                Header {
                    name,
                    label,
                    numeric: is_numeric(field.data_type()),
                }
            })
            .collect::<Vec<_>>();
        let table = Table {
            headers: &headers,
            head: &self.head,
            tail: &self.tail,
            total_rows: self.total_rows,
        };
        let text = table.render(self.max_width);
        self.out.write_all(text.as_bytes())?;
        self.out.flush()?;
        Ok(())
    }
}

/// A column's header cells and alignment.
struct Header {
    name: String,
    label: String,
    numeric: bool,
}

/// What occupies one column of the drawn box.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Slot {
    /// The result column with this index.
    Column(usize),
    /// The `…` column standing for the columns dropped to fit `max_width`.
    Ellipsis,
}

#[derive(Clone, Copy)]
enum Align {
    Left,
    Right,
    Center,
}

/// Everything needed to draw the box.
struct Table<'a> {
    headers: &'a [Header],
    head: &'a [Row],
    tail: &'a VecDeque<Row>,
    total_rows: u64,
}

impl Table<'_> {
    fn render(&self, max_width: usize) -> String {
        let shown_rows = self.head.len() + self.tail.len();
        let rows_cut = self.total_rows > shown_rows as u64;
        let mut footer = match self.total_rows {
            1 => "1 row".to_string(),
            n => format!("{n} rows"),
        };
        if rows_cut {
            footer.push_str(&format!(" ({shown_rows} shown)"));
        }
        if self.headers.is_empty() {
            return format!("┌┐\n└┘\n{footer}\n");
        }

        let widths = self.column_widths();
        let slots = choose_slots(&widths, max_width);
        let shown_columns = slots.iter().filter(|slot| **slot != Slot::Ellipsis).count();
        if shown_columns < self.headers.len() {
            footer.push_str(&format!(
                "  {} columns ({shown_columns} shown)",
                self.headers.len()
            ));
        }
        let width_of = |slot: Slot| match slot {
            Slot::Column(index) => widths[index],
            Slot::Ellipsis => 1,
        };

        let mut out = String::new();
        push_border(&mut out, &slots, width_of, ['┌', '┬', '┐']);
        push_line(&mut out, &slots, width_of, |index| {
            (self.headers[index].name.as_str(), Align::Center)
        });
        push_line(&mut out, &slots, width_of, |index| {
            (self.headers[index].label.as_str(), Align::Center)
        });
        if shown_rows > 0 {
            push_border(&mut out, &slots, width_of, ['├', '┼', '┤']);
        }
        let align = |index: usize| match self.headers[index].numeric {
            true => Align::Right,
            false => Align::Left,
        };
        for row in self.head {
            push_line(&mut out, &slots, width_of, |index| {
                (row[index].as_str(), align(index))
            });
        }
        if rows_cut {
            push_line(&mut out, &slots, width_of, |_| ("·", Align::Center));
        }
        for row in self.tail {
            push_line(&mut out, &slots, width_of, |index| {
                (row[index].as_str(), align(index))
            });
        }
        push_border(&mut out, &slots, width_of, ['└', '┴', '┘']);
        out.push_str(&footer);
        out.push('\n');
        out
    }

    /// The widest of each column's name, type and displayed values (at least 1).
    fn column_widths(&self) -> Vec<usize> {
        self.headers
            .iter()
            .enumerate()
            .map(|(index, header)| {
                self.head
                    .iter()
                    .chain(self.tail)
                    .map(|row| char_width(&row[index]))
                    .chain([char_width(&header.name), char_width(&header.label), 1])
                    .max()
                    .unwrap_or(1)
            })
            .collect()
    }
}

/// Chooses the columns to draw within `max_width` characters (`0`: no limit).
///
/// Like the DuckDB shell, a table that is too wide keeps columns from both ends, alternating left
/// and right, and puts a `…` column where the middle ones were. At least one column is always kept.
fn choose_slots(widths: &[usize], max_width: usize) -> Vec<Slot> {
    // Each column takes its width plus two spaces of padding and one border; plus the closing border.
    let full_width = widths.iter().map(|width| width + 3).sum::<usize>() + 1;
    if max_width == 0 || full_width <= max_width {
        return (0..widths.len()).map(Slot::Column).collect();
    }
    let mut left = Vec::new();
    let mut right = Vec::new();
    let (mut next_left, mut end_right) = (0, widths.len());
    let mut used = 1 + 4; // the closing border and the `…` column
    let mut take_left = true;
    while next_left < end_right {
        let index = if take_left { next_left } else { end_right - 1 };
        let cost = widths[index] + 3;
        let nothing_kept = left.is_empty() && right.is_empty();
        if used + cost > max_width && !nothing_kept {
            break;
        }
        used += cost;
        if take_left {
            left.push(Slot::Column(index));
            next_left += 1;
        } else {
            right.push(Slot::Column(index));
            end_right -= 1;
        }
        take_left = !take_left;
    }
    left.push(Slot::Ellipsis);
    left.extend(right.into_iter().rev());
    left
}

fn push_border(
    out: &mut String,
    slots: &[Slot],
    width_of: impl Fn(Slot) -> usize,
    ends: [char; 3],
) {
    let [start, middle, end] = ends;
    out.push(start);
    for (position, slot) in slots.iter().enumerate() {
        if position > 0 {
            out.push(middle);
        }
        out.extend(std::iter::repeat_n('─', width_of(*slot) + 2));
    }
    out.push(end);
    out.push('\n');
}

/// Draws one line of cells; `cell` gives the text and alignment of a result column's cell.
fn push_line<'c>(
    out: &mut String,
    slots: &[Slot],
    width_of: impl Fn(Slot) -> usize,
    cell: impl Fn(usize) -> (&'c str, Align),
) {
    out.push('│');
    for slot in slots {
        let (text, align) = match slot {
            Slot::Column(index) => cell(*index),
            Slot::Ellipsis => ("…", Align::Center),
        };
        let padding = width_of(*slot).saturating_sub(char_width(text));
        let (before, after) = match align {
            Align::Left => (0, padding),
            Align::Right => (padding, 0),
            Align::Center => (padding / 2, padding - padding / 2),
        };
        out.push(' ');
        out.extend(std::iter::repeat_n(' ', before));
        out.push_str(text);
        out.extend(std::iter::repeat_n(' ', after));
        out.push_str(" │");
    }
    out.push('\n');
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::{ArrayRef, Int64Array, StringArray};
    use arrow::datatypes::{DataType, Field, Schema};

    use super::super::test_data::{numbers, sample};
    use super::super::{format_batches, FormatOptions, OutputFormat, QueryStats};
    use super::*;

    fn pretty(schema: SchemaRef, batches: &[RecordBatch], options: &FormatOptions) -> String {
        let bytes = format_batches(
            OutputFormat::Pretty,
            schema,
            batches,
            options,
            &QueryStats::default(),
        )
        .unwrap();
        String::from_utf8(bytes).unwrap()
    }

    #[test]
    fn draws_names_types_and_aligned_values() {
        let (schema, batch) = sample();
        let text = pretty(schema, &[batch], &FormatOptions::default());
        let expected = "\
┌───────┬─────────┬───────────────┬────────────────────────────┬─────────────┐
│   i   │    f    │       s       │             ts             │      l      │
│ Int64 │ Float64 │     Utf8      │       Timestamp(µs)        │ List(Int64) │
├───────┼─────────┼───────────────┼────────────────────────────┼─────────────┤
│     1 │     1.5 │ plain         │ 2023-11-14 22:13:20        │ [1, 2]      │
│   -20 │    NULL │ NULL          │ NULL                       │ NULL        │
│  NULL │   -0.25 │ a,\"b\"\\tc\\nd|e │ 2023-11-14 22:13:20.123456 │ [3, NULL]   │
└───────┴─────────┴───────────────┴────────────────────────────┴─────────────┘
3 rows
";
        assert_eq!(text, expected, "\n{text}");
    }

    #[test]
    fn one_row_is_singular() {
        let (schema, batch) = numbers(7..8);
        let text = pretty(schema, &[batch], &FormatOptions::default());
        assert!(text.ends_with("└───────┘\n1 row\n"), "{text}");
    }

    #[test]
    fn long_results_show_first_and_last_rows_across_batches() {
        let (schema, _) = numbers(0..0);
        let batches: Vec<_> = (0..15)
            .map(|start| numbers(start * 7..start * 7 + 7).1)
            .collect();
        let options = FormatOptions {
            max_rows: 10,
            ..FormatOptions::default()
        };
        let text = pretty(schema, &batches, &options);
        let values: Vec<&str> = text
            .lines()
            .skip(4)
            .filter_map(|line| line.strip_prefix('│'))
            .map(|cell| cell.trim_matches(|c| c == ' ' || c == '│'))
            .collect();
        assert_eq!(
            values,
            ["0", "1", "2", "3", "4", "·", "100", "101", "102", "103", "104"],
            "\n{text}"
        );
        assert!(text.ends_with("105 rows (10 shown)\n"), "{text}");
    }

    #[test]
    fn keeps_at_most_max_rows_in_memory() {
        let (schema, _) = numbers(0..0);
        let options = FormatOptions {
            max_rows: 7,
            ..FormatOptions::default()
        };
        let mut writer = PrettyWriter::new(schema, Box::new(std::io::sink()), &options);
        for start in 0..50 {
            writer
                .write_batch(&numbers(start * 100..start * 100 + 100).1)
                .unwrap();
            assert!(writer.head.len() + writer.tail.len() <= 7);
        }
        assert_eq!(writer.total_rows, 5000);
        assert_eq!(writer.head, [["0"], ["1"], ["2"], ["3"]]);
        assert_eq!(writer.tail, [["4997"], ["4998"], ["4999"]]);
    }

    #[test]
    fn result_of_exactly_max_rows_is_shown_whole() {
        let (schema, batch) = numbers(0..5);
        let options = FormatOptions {
            max_rows: 5,
            ..FormatOptions::default()
        };
        let text = pretty(schema, &[batch], &options);
        assert!(!text.contains('·'), "{text}");
        assert!(text.ends_with("\n5 rows\n"), "{text}");
    }

    #[test]
    fn long_values_are_cut_with_an_ellipsis() {
        let schema = Arc::new(Schema::new(vec![Field::new("s", DataType::Utf8, false)]));
        let column: ArrayRef = Arc::new(StringArray::from(vec!["é".repeat(30)]));
        let batch = RecordBatch::try_new(schema.clone(), vec![column]).unwrap();
        let options = FormatOptions {
            max_value_width: 10,
            ..FormatOptions::default()
        };
        let text = pretty(schema, &[batch], &options);
        assert!(text.contains(&format!("│ {}… │", "é".repeat(9))), "{text}");
    }

    #[test]
    fn wide_tables_drop_middle_columns() {
        let fields: Vec<Field> = (0..20)
            .map(|i| Field::new(format!("column_{i:02}"), DataType::Int64, false))
            .collect();
        let schema = Arc::new(Schema::new(fields));
        let columns: Vec<ArrayRef> = (0..20)
            .map(|i| Arc::new(Int64Array::from(vec![i])) as ArrayRef)
            .collect();
        let batch = RecordBatch::try_new(schema.clone(), columns).unwrap();
        let options = FormatOptions {
            max_width: 80,
            ..FormatOptions::default()
        };
        let text = pretty(schema, &[batch], &options);
        for line in text.lines() {
            assert!(char_width(line) <= 80, "too wide: {line}");
        }
        let header = text.lines().nth(1).unwrap();
        assert!(header.starts_with("│ column_00 │ column_01 │"), "{header}");
        assert!(header.ends_with("│ column_18 │ column_19 │"), "{header}");
        assert!(header.contains("│ … │"), "{header}");
        assert!(text.ends_with("1 row  20 columns (6 shown)\n"), "{text}");
    }

    #[test]
    fn choose_slots_keeps_one_column_even_if_it_is_too_wide() {
        assert_eq!(
            choose_slots(&[50, 50], 20),
            [Slot::Column(0), Slot::Ellipsis]
        );
        assert_eq!(choose_slots(&[5, 5], 0), [Slot::Column(0), Slot::Column(1)]);
    }

    #[test]
    fn zero_rows_still_draw_the_header() {
        let (schema, batch) = sample();
        let text = pretty(schema, &[batch.slice(0, 0)], &FormatOptions::default());
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 5, "{text}");
        assert!(
            lines[0].starts_with('┌') && lines[3].starts_with('└'),
            "{text}"
        );
        assert!(lines[1].contains(" ts "), "{text}");
        assert_eq!(lines[4], "0 rows");
    }

    #[test]
    fn zero_columns_draw_an_empty_box() {
        let schema = Arc::new(Schema::empty());
        assert_eq!(
            pretty(schema, &[], &FormatOptions::default()),
            "┌┐\n└┘\n0 rows\n"
        );
    }
}
