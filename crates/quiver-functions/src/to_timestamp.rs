//! `to_timestamp` and its `_seconds`/`_millis`/`_micros`/`_nanos` forms, with the session's
//! time zone on every result.
//!
//! DataFusion 55's `to_timestamp*` declare `Timestamp(unit, <session time zone>)`, and
//! label their scalar results with that zone, but parse a column of strings into a naive array
//! (apache/datafusion#24632, fixed after 55 by #24636). Once a session zone is set — and quiver
//! sets `UTC` — a query over a column fails at run time:
//!
//! ```sql
//! SELECT to_timestamp(s) FROM (VALUES ('2026-01-01T00:00:00')) AS t(s);
//! -- column types must match schema types, expected Timestamp(ns, "UTC") but found Timestamp(ns)
//! ```
//!
//! [`ZonedToTimestamp`] wraps DataFusion's function and relabels such an array with the declared
//! zone, as #24636 does. Relabelling is right because the values are already what the label
//! says: DataFusion parsed the strings as instants, reading those without an offset in the
//! session zone, exactly as for a scalar. Everything else — parsing, formats, numbers,
//! documentation, following `SET TIME ZONE` — is DataFusion's.

use arrow::array::{Array, ArrayRef, ArrowPrimitiveType, AsArray, PrimitiveArray};
use arrow::datatypes::{
    DataType, TimeUnit, TimestampMicrosecondType, TimestampMillisecondType,
    TimestampNanosecondType, TimestampSecondType,
};
use datafusion::common::config::ConfigOptions;
use datafusion::common::{exec_err, Result};
use datafusion::functions::datetime::to_timestamp::{
    ToTimestampFunc, ToTimestampMicrosFunc, ToTimestampMillisFunc, ToTimestampNanosFunc,
    ToTimestampSecondsFunc,
};
use datafusion::logical_expr::{
    ColumnarValue, Documentation, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature,
};
use std::sync::Arc;

/// Which of DataFusion's functions a [`ZonedToTimestamp`] wraps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Variant {
    Timestamp,
    Seconds,
    Millis,
    Micros,
    Nanos,
}

impl Variant {
    const ALL: [Variant; 5] = [
        Variant::Timestamp,
        Variant::Seconds,
        Variant::Millis,
        Variant::Micros,
        Variant::Nanos,
    ];

    /// DataFusion's function, for the session zone in `config`.
    fn function(self, config: &ConfigOptions) -> ScalarUDF {
        match self {
            Variant::Timestamp => ToTimestampFunc::new_with_config(config).into(),
            Variant::Seconds => ToTimestampSecondsFunc::new_with_config(config).into(),
            Variant::Millis => ToTimestampMillisFunc::new_with_config(config).into(),
            Variant::Micros => ToTimestampMicrosFunc::new_with_config(config).into(),
            Variant::Nanos => ToTimestampNanosFunc::new_with_config(config).into(),
        }
    }
}

/// DataFusion's `to_timestamp*` whose column results carry the zone their type declares.
///
/// ```sql
/// SET TIME ZONE 'Asia/Singapore';
/// SELECT to_timestamp(s) FROM (VALUES ('2026-01-01T00:00:00')) AS t(s);
/// -- 2026-01-01T00:00:00+08:00, as for the literal
/// ```
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct ZonedToTimestamp {
    variant: Variant,
    inner: ScalarUDF,
}

impl ZonedToTimestamp {
    /// All five functions, for the session zone in `config`.
    pub fn all(config: &ConfigOptions) -> Vec<ZonedToTimestamp> {
        Variant::ALL
            .into_iter()
            .map(|variant| ZonedToTimestamp::new(variant, config))
            .collect()
    }

    fn new(variant: Variant, config: &ConfigOptions) -> ZonedToTimestamp {
        ZonedToTimestamp {
            variant,
            inner: variant.function(config),
        }
    }
}

impl ScalarUDFImpl for ZonedToTimestamp {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn aliases(&self) -> &[String] {
        self.inner.aliases()
    }

    fn signature(&self) -> &Signature {
        self.inner.signature()
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        self.inner.return_type(arg_types)
    }

    /// `SET TIME ZONE` rebuilds the functions that depend on the configuration.
    fn with_updated_config(&self, config: &ConfigOptions) -> Option<ScalarUDF> {
        Some(ZonedToTimestamp::new(self.variant, config).into())
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let declared = args.return_field.data_type().clone();
        match self.inner.invoke_with_args(args)? {
            ColumnarValue::Array(array) => Ok(ColumnarValue::Array(relabel(array, &declared)?)),
            scalar => Ok(scalar),
        }
    }

    fn documentation(&self) -> Option<&Documentation> {
        self.inner.documentation()
    }
}

/// `array` with the time zone of `declared` if it is a timestamp of the same unit with another
/// zone; otherwise as it is.
fn relabel(array: ArrayRef, declared: &DataType) -> Result<ArrayRef> {
    let (DataType::Timestamp(unit, zone), DataType::Timestamp(declared_unit, declared_zone)) =
        (array.data_type(), declared)
    else {
        return Ok(array);
    };
    if unit != declared_unit || zone == declared_zone {
        return Ok(array);
    }
    let zone = declared_zone.clone();
    match unit {
        TimeUnit::Second => with_zone::<TimestampSecondType>(&array, zone),
        TimeUnit::Millisecond => with_zone::<TimestampMillisecondType>(&array, zone),
        TimeUnit::Microsecond => with_zone::<TimestampMicrosecondType>(&array, zone),
        TimeUnit::Nanosecond => with_zone::<TimestampNanosecondType>(&array, zone),
    }
}

/// The same instants labelled with `zone` (no copy of the values).
fn with_zone<T>(array: &ArrayRef, zone: Option<Arc<str>>) -> Result<ArrayRef>
where
    T: ArrowPrimitiveType + arrow::datatypes::ArrowTimestampType,
{
    match array.as_primitive_opt::<T>() {
        Some(timestamps) => Ok(Arc::new(
            PrimitiveArray::<T>::clone(timestamps).with_timezone_opt(zone),
        )),
        None => exec_err!(
            "to_timestamp: expected {}, got {}",
            T::DATA_TYPE,
            array.data_type()
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::util::display::{ArrayFormatter, FormatOptions};
    use datafusion::execution::SessionStateBuilder;
    use datafusion::prelude::{SessionConfig, SessionContext};

    async fn context(zone: Option<&str>) -> SessionContext {
        let mut config = SessionConfig::new();
        config.options_mut().execution.time_zone = zone.map(str::to_string);
        let state = SessionStateBuilder::new()
            .with_config(config)
            .with_default_features()
            .build();
        let ctx = SessionContext::new_with_state(state);
        for function in ZonedToTimestamp::all(ctx.copied_config().options()) {
            ctx.register_udf(ScalarUDF::from(function));
        }
        ctx.sql(
            "CREATE TABLE s(s VARCHAR) AS VALUES ('2026-01-01T00:00:00'), \
             ('2026-01-01T00:00:00+02:00'), (NULL)",
        )
        .await
        .unwrap();
        ctx
    }

    /// The result's cells as text, NULL as the empty string.
    async fn cells(ctx: &SessionContext, sql: &str) -> Vec<Vec<String>> {
        let batches = ctx.sql(sql).await.unwrap().collect().await.unwrap();
        let mut rows = Vec::new();
        for batch in &batches {
            let formatters: Vec<_> = (batch.columns().iter())
                .map(|c| ArrayFormatter::try_new(c.as_ref(), &FormatOptions::default()).unwrap())
                .collect();
            for row in 0..batch.num_rows() {
                rows.push(
                    formatters
                        .iter()
                        .map(|f| f.value(row).to_string())
                        .collect(),
                );
            }
        }
        rows
    }

    #[tokio::test]
    async fn columns_and_literals_give_the_same_zoned_values() {
        let ctx = context(Some("Asia/Singapore")).await;
        let zoned = "Timestamp(ns, \"Asia/Singapore\")";
        assert_eq!(
            cells(
                &ctx,
                "SELECT to_timestamp(s), arrow_typeof(to_timestamp(s)) FROM s ORDER BY s"
            )
            .await,
            [
                ["2026-01-01T00:00:00+08:00", zoned],
                ["2026-01-01T06:00:00+08:00", zoned],
                ["", zoned],
            ]
        );
        assert_eq!(
            cells(
                &ctx,
                "SELECT to_timestamp('2026-01-01T00:00:00'), \
                 to_timestamp('2026-01-01T00:00:00+02:00')"
            )
            .await,
            [["2026-01-01T00:00:00+08:00", "2026-01-01T06:00:00+08:00"]]
        );
    }

    #[tokio::test]
    async fn every_unit_and_formats_are_zoned() {
        let ctx = context(Some("UTC")).await;
        let rows = cells(
            &ctx,
            "SELECT arrow_typeof(to_timestamp_seconds(s)), arrow_typeof(to_timestamp_millis(s)), \
             arrow_typeof(to_timestamp_micros(s)), arrow_typeof(to_timestamp_nanos(s)), \
             to_timestamp_micros(s, '%Y-%m-%dT%H:%M:%S', '%Y-%m-%dT%H:%M:%S%:z') \
             FROM s WHERE s IS NOT NULL ORDER BY s",
        )
        .await;
        let types = [
            "Timestamp(s, \"UTC\")",
            "Timestamp(ms, \"UTC\")",
            "Timestamp(µs, \"UTC\")",
            "Timestamp(ns, \"UTC\")",
        ];
        assert_eq!(rows[0][..4], types);
        assert_eq!(rows[0][4], "2026-01-01T00:00:00Z");
        assert_eq!(rows[1][4], "2025-12-31T22:00:00Z");
    }

    #[tokio::test]
    async fn set_time_zone_relabels_and_no_zone_stays_naive() {
        let ctx = context(None).await;
        let query = "SELECT to_timestamp(s) FROM s WHERE s NOT LIKE '%+%'";
        assert_eq!(cells(&ctx, query).await, [["2026-01-01T00:00:00"]]);
        ctx.sql("SET TIME ZONE = '+01:00'").await.unwrap();
        assert_eq!(cells(&ctx, query).await, [["2026-01-01T00:00:00+01:00"]]);
    }
}
