//! The binary `COPY ... TO STDOUT (FORMAT binary)` stream format, parsed from plain bytes.
//!
//! This is the pure half of the reader: no I/O, no Postgres client, only byte slices in and
//! fields out, every read bounds-checked. The network half (`scan.rs`) feeds it the bytes of
//! `CopyData` messages as they arrive; a row may span messages, so [`CopyParser::parse`]
//! consumes only complete rows and reports how many bytes it used.
//!
//! Format (PostgreSQL manual, "COPY", section "Binary Format"): an 11-byte signature
//! `PGCOPY\n\377\r\n\0`, a 32-bit flags word, a 32-bit header-extension length and that many
//! bytes; then tuples, each a 16-bit field count followed by, per field, a 32-bit length (-1
//! for NULL) and that many bytes; then a 16-bit `-1` trailer. All integers are big-endian.

/// The 11-byte signature every binary COPY stream starts with.
pub const SIGNATURE: &[u8; 11] = b"PGCOPY\n\xff\r\n\0";

/// Fixed header: signature, flags, header-extension length.
const HEADER_LEN: usize = 11 + 4 + 4;

/// Flag bit 16 means every tuple carries an OID (removed in PostgreSQL 12); bits 0–15 are
/// "critical" flags a reader must refuse when it does not know them.
const UNSUPPORTED_FLAGS: u32 = 0x0001_ffff;

/// A malformed or incomplete binary COPY stream, or a value its column cannot hold.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CopyFormatError {
    /// The stream does not start with [`SIGNATURE`].
    #[error("the stream does not start with the binary COPY signature")]
    BadSignature,
    /// The header sets flags quiver does not understand (OIDs, or critical flags).
    #[error("the stream header has unsupported flags {0:#010x}")]
    UnsupportedFlags(u32),
    /// A row with a different number of fields than the query's columns.
    #[error("row {row} has {found} fields, expected {expected}")]
    FieldCount {
        row: u64,
        found: i16,
        expected: usize,
    },
    /// A field length below -1.
    #[error("row {row} has an invalid field length {length}")]
    BadLength { row: u64, length: i32 },
    /// The stream ended before the end-of-data trailer: the result would be incomplete.
    #[error(
        "the stream ended after {rows} rows without its end-of-data marker (incomplete result)"
    )]
    Truncated { rows: u64 },
    /// A row too large to address with 32-bit offsets (a Postgres row is at most a few
    /// fields of 1 GiB each, so in practice never).
    #[error("a row larger than 4 GiB")]
    RowTooLarge,
    /// Bytes after the end-of-data trailer.
    #[error("{0} bytes follow the end-of-data marker")]
    TrailingData(usize),
    /// A field whose bytes do not decode as the column's type.
    #[error("row {row}, column {column}: {message}")]
    Value {
        row: u64,
        column: usize,
        message: String,
    },
}

/// Where one field of a parsed row lies in the parser's input.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FieldSpan {
    /// Offset of the field's first byte.
    pub start: u32,
    /// Its length in bytes; negative for SQL NULL.
    pub len: i32,
}

impl FieldSpan {
    /// The field's bytes in `input` (`None` for NULL), or an error if the span lies outside
    /// `input` (never, for the input the span was parsed from).
    #[inline]
    pub fn value<'a>(&self, input: &'a [u8]) -> Result<Option<&'a [u8]>, String> {
        if self.len < 0 {
            return Ok(None);
        }
        let start = self.start as usize;
        input
            .get(start..start + self.len as usize)
            .map(Some)
            .ok_or_else(|| "a field lies outside its input".to_string())
    }
}

/// What one [`CopyParser::parse`] call found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Parsed {
    /// Bytes of the input consumed (the header and complete rows).
    pub consumed: usize,
    /// Complete rows parsed; their fields are in the spans, row-major.
    pub rows: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Header,
    Rows,
    Done,
}

/// An incremental parser of one binary COPY stream.
#[derive(Debug)]
pub struct CopyParser {
    state: State,
    /// Per field (so one entry per field of a row), the length its values are expected to
    /// have, or [`VARIABLE`].
    widths: Vec<i32>,
    rows: u64,
}

/// A field whose values may have any length.
const VARIABLE: i32 = -2;

impl CopyParser {
    /// A parser for a stream whose rows have `fields` fields.
    pub fn new(fields: usize) -> Self {
        Self::with_widths(&vec![None; fields])
    }

    /// A parser for a stream whose rows have one field per entry of `widths`: the length
    /// every non-NULL value of that field is expected to have, where it is fixed (an `int4`'s
    /// 4 bytes), or `None`.
    ///
    /// The expected widths only make parsing faster, never different: a field's offset is the
    /// previous field's offset plus its length, a chain of dependent loads through the row,
    /// and an expected width lets the CPU go on to the next field before the length is
    /// loaded. A length that differs (a NULL, or the decoder's error to come) is handled as
    /// it would be without one.
    pub fn with_widths(widths: &[Option<u32>]) -> Self {
        let widths = widths
            .iter()
            .map(|w| match w {
                Some(w) => i32::try_from(*w).unwrap_or(VARIABLE),
                None => VARIABLE,
            })
            .collect::<Vec<_>>();
        CopyParser {
            state: State::Header,
            widths,
            rows: 0,
        }
    }

    /// Complete rows parsed so far.
    pub fn rows(&self) -> u64 {
        self.rows
    }

    /// Whether the end-of-data trailer has been read.
    pub fn is_done(&self) -> bool {
        self.state == State::Done
    }

    /// Parses the header (if not yet read) and then as many complete rows of `input` as
    /// possible, at most `max_rows`, in one pass: `spans` is cleared and receives the fields
    /// of those rows, row-major (`spans[row * fields + column]`), for a decoder to read
    /// column by column. Only complete rows are reported, so a row split across network
    /// messages is never half-decoded; the caller keeps the unconsumed bytes and calls again
    /// with more appended.
    pub fn parse(
        &mut self,
        input: &[u8],
        spans: &mut Vec<FieldSpan>,
        max_rows: usize,
    ) -> Result<Parsed, CopyFormatError> {
        // Spans hold 32-bit offsets: parse at most the first 4 GiB of the input at a time.
        let whole = input.len();
        let input = input.get(..u32::MAX as usize).unwrap_or(input);
        let mut pos = 0;
        if self.state == State::Header {
            match self.parse_header(input)? {
                Some(used) => {
                    pos = used;
                    self.state = State::Rows;
                }
                None => {
                    spans.clear();
                    return Ok(Parsed {
                        consumed: 0,
                        rows: 0,
                    });
                }
            }
        }
        let mut rows = 0;
        let fields = self.widths.len();
        // Spans are written in place over what `spans` holds (the last call's, usually as
        // many), grown a block of rows at a time when short and cut to the rows parsed at
        // the end: no capacity check per field, and no clearing.
        let mut filled = 0;
        while self.state == State::Rows && rows < max_rows {
            let Some(count) = read_i16(input, pos) else {
                break;
            };
            if count == -1 {
                self.state = State::Done;
                pos += 2;
                let rest = whole - pos;
                if rest > 0 {
                    return Err(CopyFormatError::TrailingData(rest));
                }
                break;
            }
            if count < 0 || count as usize != fields {
                return Err(CopyFormatError::FieldCount {
                    row: self.rows,
                    found: count,
                    expected: fields,
                });
            }
            if spans.len() < filled + fields {
                let block = (max_rows - rows).clamp(1, SPAN_BLOCK_ROWS);
                spans.resize(filled + block * fields, FieldSpan::default());
            }
            let Some(out) = spans.get_mut(filled..filled + fields) else {
                // Not reached (`spans` was just grown to hold the row); were it, the row
                // would stay unparsed and the stream end as truncated, never short.
                break;
            };
            match self.row(input, pos + 2, out)? {
                Some(end) => pos = end,
                None => break,
            }
            filled += fields;
            self.rows += 1;
            rows += 1;
        }
        spans.truncate(filled);
        if rows == 0 && self.state == State::Rows && whole > input.len() {
            return Err(CopyFormatError::RowTooLarge);
        }
        Ok(Parsed {
            consumed: pos,
            rows,
        })
    }

    /// Checks the stream ended properly: the trailer was read and `leftover` bytes (kept by the
    /// caller after the last [`CopyParser::parse`]) are none.
    pub fn finish(&self, leftover: usize) -> Result<(), CopyFormatError> {
        if self.state != State::Done {
            return Err(CopyFormatError::Truncated { rows: self.rows });
        }
        if leftover > 0 {
            return Err(CopyFormatError::TrailingData(leftover));
        }
        Ok(())
    }

    fn parse_header(&self, input: &[u8]) -> Result<Option<usize>, CopyFormatError> {
        let Some(signature) = input.get(..SIGNATURE.len()) else {
            // Too short to tell; but a wrong prefix is wrong already.
            if !SIGNATURE.starts_with(input) {
                return Err(CopyFormatError::BadSignature);
            }
            return Ok(None);
        };
        if signature != SIGNATURE {
            return Err(CopyFormatError::BadSignature);
        }
        let (Some(flags), Some(extension)) = (read_i32(input, 11), read_i32(input, 15)) else {
            return Ok(None);
        };
        let flags = flags as u32;
        if flags & UNSUPPORTED_FLAGS != 0 {
            return Err(CopyFormatError::UnsupportedFlags(flags));
        }
        let end = HEADER_LEN.checked_add(extension as u32 as usize);
        match end {
            Some(end) if end <= input.len() => Ok(Some(end)),
            _ => Ok(None),
        }
    }

    /// Locates the fields of the row whose first length is at `at` into `out` (one span per
    /// field); the end of the row, or `None` if the input ends inside it.
    #[inline(always)]
    fn row(
        &self,
        input: &[u8],
        mut at: usize,
        out: &mut [FieldSpan],
    ) -> Result<Option<usize>, CopyFormatError> {
        for (slot, &width) in out.iter_mut().zip(&self.widths) {
            // A length beyond the input leaves `at` past its end, so this read fails next.
            let Some(length) = read_i32(input, at) else {
                return Ok(None);
            };
            at += 4;
            // `at` ≤ `input.len()` ≤ `u32::MAX` here.
            *slot = FieldSpan {
                start: at as u32,
                len: length,
            };
            if width >= 0 {
                // The next offset without waiting for the loaded length; corrected, out of
                // line, when the length is not the expected one.
                at += width as usize;
                if length != width {
                    at = self.unexpected_length(at - width as usize, length)?;
                }
            } else if length > 0 {
                at = at.saturating_add(length as usize);
            } else if length < -1 {
                return Err(self.bad_length(length));
            }
        }
        Ok((at <= input.len()).then_some(at))
    }

    /// The offset after a field of `length` bytes starting at `at`, for a field whose length
    /// is not its expected width.
    #[cold]
    #[inline(never)]
    fn unexpected_length(&self, at: usize, length: i32) -> Result<usize, CopyFormatError> {
        match length {
            -1 => Ok(at),
            0.. => Ok(at.saturating_add(length as usize)),
            _ => Err(self.bad_length(length)),
        }
    }

    #[cold]
    fn bad_length(&self, length: i32) -> CopyFormatError {
        CopyFormatError::BadLength {
            row: self.rows,
            length,
        }
    }
}

/// Rows of spans `parse` makes room for at a time.
const SPAN_BLOCK_ROWS: usize = 256;

fn read_i16(input: &[u8], at: usize) -> Option<i16> {
    let bytes: [u8; 2] = input.get(at..at.wrapping_add(2))?.try_into().ok()?;
    Some(i16::from_be_bytes(bytes))
}

fn read_i32(input: &[u8], at: usize) -> Option<i32> {
    // A wrapped end lies before `at`: `get` gives `None`, as a checked add would (and the
    // overflow check cost the parser's field loop three instructions).
    let bytes: [u8; 4] = input.get(at..at.wrapping_add(4))?.try_into().ok()?;
    Some(i32::from_be_bytes(bytes))
}

/// Test and benchmark helper: builds binary COPY streams.
#[cfg(test)]
pub(crate) mod fixture {
    use super::SIGNATURE;

    /// A stream of `rows`, each a list of optional field byte strings.
    pub fn stream(rows: &[Vec<Option<Vec<u8>>>]) -> Vec<u8> {
        let mut out = SIGNATURE.to_vec();
        out.extend_from_slice(&0u32.to_be_bytes());
        out.extend_from_slice(&0u32.to_be_bytes());
        for row in rows {
            out.extend_from_slice(&(row.len() as i16).to_be_bytes());
            for field in row {
                match field {
                    None => out.extend_from_slice(&(-1i32).to_be_bytes()),
                    Some(bytes) => {
                        out.extend_from_slice(&(bytes.len() as i32).to_be_bytes());
                        out.extend_from_slice(bytes);
                    }
                }
            }
        }
        out.extend_from_slice(&(-1i16).to_be_bytes());
        out
    }
}

#[cfg(test)]
mod tests {
    use super::fixture::stream;
    use super::*;

    #[derive(Default)]
    struct Collect {
        rows: Vec<Vec<Option<Vec<u8>>>>,
        current: Vec<Option<Vec<u8>>>,
    }

    /// Parses `input` and collects the rows' fields; returns the bytes consumed.
    fn parse_into(
        parser: &mut CopyParser,
        input: &[u8],
        sink: &mut Collect,
        max_rows: usize,
    ) -> Result<usize, CopyFormatError> {
        let mut spans = vec![FieldSpan::default(); 3];
        let parsed = parser.parse(input, &mut spans, max_rows)?;
        assert_eq!(spans.len(), parsed.rows * parser.widths.len());
        for span in &spans {
            let value = span.value(input).expect("spans lie inside the input");
            sink.current.push(value.map(<[u8]>::to_vec));
            if sink.current.len() == parser.widths.len() {
                sink.rows.push(std::mem::take(&mut sink.current));
            }
        }
        Ok(parsed.consumed)
    }

    #[test]
    fn reads_past_the_end_or_the_top_of_the_address_space_are_none() {
        let bytes = [0u8, 0, 0, 7, 1];
        assert_eq!(read_i32(&bytes, 0), Some(7));
        assert_eq!(read_i16(&bytes, 3), Some(0x0701));
        assert_eq!(read_i32(&bytes, 2), None);
        assert_eq!(read_i16(&bytes, 4), None);
        // An end that wraps around lies before the start: no read, as with a checked add.
        assert_eq!(read_i32(&bytes, usize::MAX - 1), None);
        assert_eq!(read_i16(&bytes, usize::MAX), None);
    }

    fn sample() -> Vec<Vec<Option<Vec<u8>>>> {
        vec![
            vec![Some(1i32.to_be_bytes().to_vec()), Some(b"abc".to_vec())],
            vec![None, Some(Vec::new())],
            vec![Some(7i32.to_be_bytes().to_vec()), None],
        ]
    }

    #[test]
    fn parses_rows_and_nulls_in_one_chunk() {
        let bytes = stream(&sample());
        let mut parser = CopyParser::new(2);
        let mut sink = Collect::default();
        let used = parse_into(&mut parser, &bytes, &mut sink, usize::MAX).unwrap();
        assert_eq!(used, bytes.len());
        assert_eq!(sink.rows, sample());
        parser.finish(0).unwrap();
    }

    #[test]
    fn parses_a_stream_split_at_every_byte() {
        let bytes = stream(&sample());
        for split in 0..=bytes.len() {
            let mut parser = CopyParser::new(2);
            let mut sink = Collect::default();
            let mut pending = bytes[..split].to_vec();
            let used = parse_into(&mut parser, &pending, &mut sink, usize::MAX).unwrap();
            pending.drain(..used);
            pending.extend_from_slice(&bytes[split..]);
            let used = parse_into(&mut parser, &pending, &mut sink, usize::MAX).unwrap();
            assert_eq!(used, pending.len(), "split at {split}");
            assert_eq!(sink.rows, sample(), "split at {split}");
            parser.finish(0).unwrap();
        }
    }

    /// Expected widths are a hint for speed: whatever the fields' lengths (the expected one,
    /// NULL, empty, another, invalid) and wherever the input is cut, a parser given them
    /// finds what one without them finds.
    #[test]
    fn expected_widths_change_nothing() {
        let mut rows = sample();
        rows.push(vec![Some(vec![1, 2, 3]), Some(vec![9; 4])]);
        rows.push(vec![Some(Vec::new()), Some(vec![5; 300])]);
        rows.push(vec![Some(vec![8; 8]), Some(7i32.to_be_bytes().to_vec())]);
        let good = stream(&rows);
        // The last row's first length turned into -5.
        let mut bad = good.clone();
        let at = bad.len() - 2 - (4 + 4) - (4 + 8);
        bad[at..at + 4].copy_from_slice(&(-5i32).to_be_bytes());
        let outcome = |parser: &mut CopyParser, input: &[u8]| {
            let mut sink = Collect::default();
            let used = parse_into(parser, input, &mut sink, usize::MAX);
            (used, sink.rows, parser.rows(), parser.is_done())
        };
        for bytes in [&good, &bad] {
            for cut in 0..=bytes.len() {
                let input = &bytes[..cut];
                let plain = outcome(&mut CopyParser::new(2), input);
                for widths in [
                    [Some(4), None],
                    [Some(4), Some(4)],
                    [None, Some(0)],
                    [Some(3), Some(300)],
                ] {
                    let hinted = outcome(&mut CopyParser::with_widths(&widths), input);
                    assert_eq!(hinted, plain, "widths {widths:?}, cut at {cut}");
                }
            }
        }
        assert!(matches!(
            CopyParser::with_widths(&[Some(4), None]).parse(&bad, &mut Vec::new(), usize::MAX),
            Err(CopyFormatError::BadLength { length: -5, .. })
        ));
    }

    #[test]
    fn a_truncated_stream_is_an_error_never_a_short_result() {
        let bytes = stream(&sample());
        for cut in 0..bytes.len() {
            let mut parser = CopyParser::new(2);
            let mut sink = Collect::default();
            let used = parse_into(&mut parser, &bytes[..cut], &mut sink, usize::MAX).unwrap();
            let error = parser.finish(cut - used).unwrap_err();
            assert!(
                matches!(error, CopyFormatError::Truncated { .. }),
                "cut at {cut}: {error:?}"
            );
        }
    }

    #[test]
    fn max_rows_stops_between_rows() {
        let bytes = stream(&sample());
        let mut parser = CopyParser::new(2);
        let mut sink = Collect::default();
        let first = parse_into(&mut parser, &bytes, &mut sink, 1).unwrap();
        assert_eq!(sink.rows.len(), 1);
        let rest = parse_into(&mut parser, &bytes[first..], &mut sink, usize::MAX).unwrap();
        assert_eq!(first + rest, bytes.len());
        assert_eq!(sink.rows, sample());
    }

    #[test]
    fn rejects_a_bad_signature_oids_and_wrong_field_counts() {
        let mut sink = Collect::default();
        let error = parse_into(&mut CopyParser::new(2), b"COPY", &mut sink, 10).unwrap_err();
        assert_eq!(error, CopyFormatError::BadSignature);

        let mut with_oids = stream(&sample());
        with_oids[11..15].copy_from_slice(&(1u32 << 16).to_be_bytes());
        let error = parse_into(&mut CopyParser::new(2), &with_oids, &mut sink, 10).unwrap_err();
        assert!(matches!(error, CopyFormatError::UnsupportedFlags(_)));

        let bytes = stream(&sample());
        let error = parse_into(&mut CopyParser::new(3), &bytes, &mut sink, 10).unwrap_err();
        assert!(matches!(
            error,
            CopyFormatError::FieldCount { found: 2, .. }
        ));
    }

    #[test]
    fn rejects_negative_lengths_and_trailing_bytes() {
        let mut bytes = stream(&sample());
        // First field length of the first row: after the 19-byte header and 2-byte count.
        bytes[21..25].copy_from_slice(&(-7i32).to_be_bytes());
        let mut sink = Collect::default();
        let error = parse_into(&mut CopyParser::new(2), &bytes, &mut sink, 10).unwrap_err();
        assert!(matches!(
            error,
            CopyFormatError::BadLength { length: -7, .. }
        ));

        let mut bytes = stream(&sample());
        bytes.push(0);
        let error =
            parse_into(&mut CopyParser::new(2), &bytes, &mut Collect::default(), 10).unwrap_err();
        assert_eq!(error, CopyFormatError::TrailingData(1));
    }

    #[test]
    fn header_extensions_are_skipped() {
        let mut bytes = SIGNATURE.to_vec();
        bytes.extend_from_slice(&0u32.to_be_bytes());
        bytes.extend_from_slice(&3u32.to_be_bytes());
        bytes.extend_from_slice(b"xyz");
        bytes.extend_from_slice(&1i16.to_be_bytes());
        bytes.extend_from_slice(&(-1i32).to_be_bytes());
        bytes.extend_from_slice(&(-1i16).to_be_bytes());
        let mut sink = Collect::default();
        let mut parser = CopyParser::new(1);
        assert_eq!(
            parse_into(&mut parser, &bytes, &mut sink, 10).unwrap(),
            bytes.len()
        );
        assert_eq!(sink.rows, vec![vec![None]]);
    }

    #[test]
    fn garbage_never_panics() {
        // A small deterministic generator (no rand dependency): xorshift.
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let valid = stream(&sample());
        for round in 0..2000 {
            let mut bytes = valid.clone();
            let flips = 1 + (next() % 6) as usize;
            for _ in 0..flips {
                let at = (next() as usize) % bytes.len();
                bytes[at] = next() as u8;
            }
            if round % 3 == 0 {
                bytes.truncate((next() as usize) % bytes.len());
            }
            let mut parser = CopyParser::new(2);
            let mut sink = Collect::default();
            if let Ok(used) = parse_into(&mut parser, &bytes, &mut sink, usize::MAX) {
                let _ = parser.finish(bytes.len() - used);
            }
        }
    }
}
