//! How PostgreSQL types map to Arrow types, and which ones are cast to text on the server.
//!
//! | PostgreSQL | Arrow | notes |
//! |---|---|---|
//! | bool | Boolean | |
//! | int2 / int4 / int8 | Int16 / Int32 / Int64 | |
//! | float4 / float8 | Float32 / Float64 | |
//! | numeric(p, s), p ≤ 38 | Decimal128(p, s) | NaN or ±Infinity in such a column is an error |
//! | numeric (unconstrained, or p > 38) | Utf8 | **lossless**: the server's exact text; never a float |
//! | text, varchar, name, citext, bpchar | Utf8 | bpchar without its blank padding, as `::text` reads it (so LIKE matches the value without it, where Postgres' LIKE sees the padding) |
//! | json, jsonb | Utf8 | the JSON text |
//! | bytea | Binary | |
//! | date | Date32 | ±infinity become `i32::MAX` / `i32::MIN` days |
//! | time | Time64(µs) | |
//! | timestamp / timestamptz | Timestamp(µs) / Timestamp(µs, "UTC") | ±infinity become `i64::MAX` / `i64::MIN` µs |
//! | interval | Interval(MonthDayNano) | |
//! | uuid | Utf8 | lower-case hyphenated |
//! | enums | Dictionary(Int32, Utf8) | |
//! | one-dimensional arrays of the above | List | a multi-dimensional value is an error |
//! | everything else (timetz, inet, cidr, macaddr, money, geometric, ranges, xml, …) | Utf8 | `::text` on the server |
//!
//! Domains are read as their base type. ±infinity is kept as the extreme value of the Arrow type
//! (as DuckDB keeps it as its own extreme value) rather than turned into NULL, so
//! `WHERE d < 'infinity'`-style logic keeps working in quiver.

use std::sync::Arc;

use arrow::datatypes::{DataType, Field, TimeUnit};

/// PostgreSQL type OIDs of the built-in types quiver decodes itself (`pg_type.dat`).
pub mod oid {
    pub const BOOL: u32 = 16;
    pub const BYTEA: u32 = 17;
    pub const NAME: u32 = 19;
    pub const INT8: u32 = 20;
    pub const INT2: u32 = 21;
    pub const INT4: u32 = 23;
    pub const TEXT: u32 = 25;
    pub const JSON: u32 = 114;
    pub const FLOAT4: u32 = 700;
    pub const FLOAT8: u32 = 701;
    pub const BPCHAR: u32 = 1042;
    pub const VARCHAR: u32 = 1043;
    pub const DATE: u32 = 1082;
    pub const TIME: u32 = 1083;
    pub const TIMESTAMP: u32 = 1114;
    pub const TIMESTAMPTZ: u32 = 1184;
    pub const INTERVAL: u32 = 1186;
    pub const NUMERIC: u32 = 1700;
    pub const UUID: u32 = 2950;
    pub const JSONB: u32 = 3802;
}

/// What the catalog says about a column's type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TypeInfo {
    /// The type's OID (for a domain: its base type's).
    pub oid: u32,
    /// `atttypmod` (-1 when none).
    pub typmod: i32,
    /// `typname`, used for extension types with no fixed OID (citext).
    pub name: String,
    /// `typtype = 'e'`.
    pub is_enum: bool,
    /// For an array type, its element type.
    pub element: Option<Box<TypeInfo>>,
}

/// A column type as quiver reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PgType {
    Bool,
    Int2,
    Int4,
    Int8,
    Float4,
    Float8,
    /// `numeric(precision, scale)` with precision ≤ 38.
    Numeric {
        precision: u8,
        scale: i8,
    },
    /// Text sent as is (text, varchar, name, citext, json).
    Text,
    /// `char(n)`: text read without its blank padding, as Postgres' `::text` reads it, and
    /// compared in pushed filters as `::text` ([`crate::sql::column_sql`]).
    Bpchar,
    /// jsonb's binary form: a version byte, then the text.
    Jsonb,
    Bytea,
    Date,
    Time,
    Timestamp,
    TimestampTz,
    Interval,
    Uuid,
    Enum,
    /// A one-dimensional array.
    Array(Box<PgType>),
    /// Any other type, read through a `::text` cast on the server.
    CastText,
}

impl PgType {
    /// The quiver type of a catalog type.
    pub fn from_info(info: &TypeInfo) -> PgType {
        if let Some(element) = &info.element {
            let element = PgType::from_info(element);
            return match element {
                PgType::Array(_) => PgType::CastText,
                element => PgType::Array(Box::new(element)),
            };
        }
        if info.is_enum {
            return PgType::Enum;
        }
        match info.oid {
            oid::BOOL => PgType::Bool,
            oid::INT2 => PgType::Int2,
            oid::INT4 => PgType::Int4,
            oid::INT8 => PgType::Int8,
            oid::FLOAT4 => PgType::Float4,
            oid::FLOAT8 => PgType::Float8,
            oid::NUMERIC => match numeric_typmod(info.typmod) {
                Some((precision, scale)) => PgType::Numeric { precision, scale },
                None => PgType::CastText,
            },
            oid::TEXT | oid::VARCHAR | oid::NAME | oid::JSON => PgType::Text,
            oid::BPCHAR => PgType::Bpchar,
            oid::JSONB => PgType::Jsonb,
            oid::BYTEA => PgType::Bytea,
            oid::DATE => PgType::Date,
            oid::TIME => PgType::Time,
            oid::TIMESTAMP => PgType::Timestamp,
            oid::TIMESTAMPTZ => PgType::TimestampTz,
            oid::INTERVAL => PgType::Interval,
            oid::UUID => PgType::Uuid,
            // citext is an extension type (no fixed OID); its binary form is its text.
            _ if info.name == "citext" => PgType::Text,
            _ => PgType::CastText,
        }
    }

    /// The Arrow type of the column.
    pub fn arrow_type(&self) -> DataType {
        match self {
            PgType::Bool => DataType::Boolean,
            PgType::Int2 => DataType::Int16,
            PgType::Int4 => DataType::Int32,
            PgType::Int8 => DataType::Int64,
            PgType::Float4 => DataType::Float32,
            PgType::Float8 => DataType::Float64,
            PgType::Numeric { precision, scale } => DataType::Decimal128(*precision, *scale),
            PgType::Text | PgType::Bpchar | PgType::Jsonb | PgType::Uuid | PgType::CastText => {
                DataType::Utf8
            }
            PgType::Bytea => DataType::Binary,
            PgType::Date => DataType::Date32,
            PgType::Time => DataType::Time64(TimeUnit::Microsecond),
            PgType::Timestamp => DataType::Timestamp(TimeUnit::Microsecond, None),
            PgType::TimestampTz => DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
            PgType::Interval => DataType::Interval(arrow::datatypes::IntervalUnit::MonthDayNano),
            PgType::Enum => {
                DataType::Dictionary(Box::new(DataType::Int32), Box::new(DataType::Utf8))
            }
            PgType::Array(element) => {
                DataType::List(Arc::new(Field::new("item", element.arrow_type(), true)))
            }
        }
    }

    /// The cast the server applies before sending the column, if any (`::text`, `::text[]`).
    pub fn server_cast(&self) -> Option<&'static str> {
        match self {
            PgType::CastText => Some("::text"),
            PgType::Array(element) if **element == PgType::CastText => Some("::text[]"),
            _ => None,
        }
    }

    /// The length of every non-NULL value of the type in the binary format (its `send`
    /// function's output), for types where it is fixed; `None` for variable-length types.
    pub fn binary_width(&self) -> Option<u32> {
        Some(match self {
            PgType::Bool => 1,
            PgType::Int2 => 2,
            PgType::Int4 | PgType::Float4 | PgType::Date => 4,
            PgType::Int8 | PgType::Float8 | PgType::Time => 8,
            PgType::Timestamp | PgType::TimestampTz => 8,
            PgType::Interval | PgType::Uuid => 16,
            _ => return None,
        })
    }

    /// The type's element OID as sent inside a binary array (for checking what arrives).
    pub(crate) fn array_element_oid(&self) -> Option<u32> {
        Some(match self {
            PgType::Bool => oid::BOOL,
            PgType::Int2 => oid::INT2,
            PgType::Int4 => oid::INT4,
            PgType::Int8 => oid::INT8,
            PgType::Float4 => oid::FLOAT4,
            PgType::Float8 => oid::FLOAT8,
            PgType::Numeric { .. } => oid::NUMERIC,
            PgType::Jsonb => oid::JSONB,
            PgType::Bytea => oid::BYTEA,
            PgType::Date => oid::DATE,
            PgType::Time => oid::TIME,
            PgType::Timestamp => oid::TIMESTAMP,
            PgType::TimestampTz => oid::TIMESTAMPTZ,
            PgType::Interval => oid::INTERVAL,
            PgType::Uuid => oid::UUID,
            PgType::CastText => oid::TEXT,
            // text-like and enum element OIDs vary (varchar, name, citext, each enum).
            _ => return None,
        })
    }
}

/// `numeric(p, s)` from a typmod (`((p << 16) | s) + 4`, scale an 11-bit signed number since
/// PostgreSQL 15); `None` for unconstrained numeric or a precision Decimal128 cannot hold.
fn numeric_typmod(typmod: i32) -> Option<(u8, i8)> {
    if typmod < 4 {
        return None;
    }
    let packed = typmod - 4;
    let precision = (packed >> 16) & 0xffff;
    let scale = ((packed & 0x7ff) ^ 1024) - 1024;
    if !(1..=38).contains(&precision) || !(-38..=38).contains(&scale) || scale > precision {
        return None;
    }
    Some((precision as u8, scale as i8))
}

/// One column of a Postgres relation or query result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PgColumn {
    /// The name as Postgres spells it.
    pub name: String,
    pub pg_type: PgType,
}

impl PgColumn {
    /// The Arrow field (always nullable: a NOT NULL constraint can be dropped at any time).
    pub fn field(&self) -> Field {
        Field::new(&self.name, self.pg_type.arrow_type(), true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(oid: u32, typmod: i32) -> TypeInfo {
        TypeInfo {
            oid,
            typmod,
            name: String::new(),
            is_enum: false,
            element: None,
        }
    }

    #[test]
    fn numeric_with_precision_is_decimal_and_unconstrained_is_text() {
        let typmod = ((12 << 16) | 2) + 4;
        assert_eq!(
            PgType::from_info(&info(oid::NUMERIC, typmod)),
            PgType::Numeric {
                precision: 12,
                scale: 2
            }
        );
        assert_eq!(PgType::from_info(&info(oid::NUMERIC, -1)), PgType::CastText);
        let too_wide = ((60 << 16) | 2) + 4;
        assert_eq!(
            PgType::from_info(&info(oid::NUMERIC, too_wide)),
            PgType::CastText
        );
    }

    #[test]
    fn arrays_enums_and_unknown_types() {
        let array = TypeInfo {
            element: Some(Box::new(info(oid::INT4, -1))),
            ..info(1007, -1)
        };
        let pg = PgType::from_info(&array);
        assert_eq!(pg, PgType::Array(Box::new(PgType::Int4)));
        assert!(matches!(pg.arrow_type(), DataType::List(_)));
        let inet = info(869, -1);
        assert_eq!(PgType::from_info(&inet).server_cast(), Some("::text"));
        let inet_array = TypeInfo {
            element: Some(Box::new(inet)),
            ..info(1041, -1)
        };
        assert_eq!(
            PgType::from_info(&inet_array).server_cast(),
            Some("::text[]")
        );
        let mood = TypeInfo {
            is_enum: true,
            ..info(90000, -1)
        };
        assert_eq!(PgType::from_info(&mood), PgType::Enum);
    }
}
