//! Decode cost of a binary COPY stream, without a server: parses and decodes a captured stream
//! into record batches, as a scan's reader does, on one thread, five times, and prints each time.
//!
//! ```sh
//! psql -X -h HOST -p PORT -d tpch -c "COPY (SELECT * FROM lineitem WHERE ctid < '(20000,0)'::tid) \
//!     TO STDOUT (FORMAT binary)" > /tmp/lineitem.copy
//! cargo build --profile ci --workspace --examples --features quiver-postgres/bench
//! $CARGO_TARGET_DIR/ci/examples/decode_copy /tmp/lineitem.copy \
//!     int4,int4,int4,int4,numeric,numeric,numeric,numeric,text,text,date,date,date,text,text,text
//! ```
//! (`numeric` is read as numeric(15,2), lineitem's type.) An optional third argument sets the
//! rows parsed at a time (default `decode::ROWS_PER_PARSE`).

use std::sync::Arc;
use std::time::Instant;

use arrow::datatypes::{Field, Schema};
use quiver_postgres::binary_copy::CopyParser;
use quiver_postgres::decode::{BatchDecoder, ROWS_PER_PARSE};
use quiver_postgres::types::PgType;

const BATCH_ROWS: usize = 8192;
/// The size of the chunks the tap hands a reader.
const CHUNK: usize = 256 * 1024;

fn pg_type(name: &str) -> Result<PgType, String> {
    Ok(match name {
        "bool" => PgType::Bool,
        "int2" => PgType::Int2,
        "int4" => PgType::Int4,
        "int8" => PgType::Int8,
        "float4" => PgType::Float4,
        "float8" => PgType::Float8,
        "numeric" => PgType::Numeric {
            precision: 15,
            scale: 2,
        },
        "text" => PgType::Text,
        "bytea" => PgType::Bytea,
        "date" => PgType::Date,
        "timestamp" => PgType::Timestamp,
        "timestamptz" => PgType::TimestampTz,
        other => return Err(format!("unknown type {other}")),
    })
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let (Some(path), Some(types)) = (args.get(1), args.get(2)) else {
        return Err("usage: decode_copy FILE TYPE,TYPE,... [ROWS_PER_PARSE]".into());
    };
    let rows_per_parse: usize = args.get(3).map_or(Ok(ROWS_PER_PARSE), |n| n.parse())?;
    let data = std::fs::read(path)?;
    let types = types
        .split(',')
        .map(pg_type)
        .collect::<Result<Vec<_>, _>>()?;
    let fields: Vec<Field> = types
        .iter()
        .enumerate()
        .map(|(i, t)| Field::new(format!("c{i}"), t.arrow_type(), true))
        .collect();
    let schema = Arc::new(Schema::new(fields));
    let widths: Vec<_> = types.iter().map(PgType::binary_width).collect();
    for _ in 0..5 {
        let started = Instant::now();
        let mut parser = CopyParser::with_widths(&widths);
        let mut decoder = BatchDecoder::new(Arc::clone(&schema), &types, BATCH_ROWS)?;
        let mut spans = Vec::new();
        let mut pending = Vec::new();
        let mut rows = 0;
        for chunk in data.chunks(CHUNK) {
            pending.extend_from_slice(chunk);
            let mut offset = 0;
            loop {
                let rest = pending.get(offset..).unwrap_or_default();
                offset +=
                    decoder.fill(&mut parser, &mut spans, rest, BATCH_ROWS, rows_per_parse)?;
                if decoder.rows() < BATCH_ROWS {
                    break;
                }
                rows += decoder.finish_batch()?.num_rows();
            }
            pending.drain(..offset);
        }
        parser.finish(pending.len())?;
        rows += decoder.finish_batch()?.num_rows();
        println!(
            "{rows} rows in {:.3} s ({rows_per_parse} rows per parse)",
            started.elapsed().as_secs_f64()
        );
    }
    Ok(())
}
