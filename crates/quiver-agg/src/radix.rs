//! [`RadixAggregateExec`]: hash GROUP BY that stays in cache when the keys are many.
//!
//! DataFusion's two-phase hash aggregation gives every input partition one hash table over
//! all the keys it sees. With half a million distinct `UserID`s each table outgrows the CPU
//! caches and every row pays two or three cache misses (the table, the stored key, the
//! accumulator state), and the final phase merges tables about as large again. Polars and
//! ClickHouse (its two-level hash table) split the keys by hash first. This operator does
//! the same, and only when the keys turn out to be many:
//!
//! **Phase 1, per input partition.** Rows are aggregated as DataFusion's partial aggregate
//! would, into one table (`GroupValues` and `GroupsAccumulator`s; two or more integer keys
//! that fit in 128 bits are packed into one word first, [`crate::packed`]). When that table
//! passes [`SWITCH_GROUPS`] groups (and, for string keys, has not reduced the rows it took
//! enough: see `MAX_KEY_BYTES` and `KEEP_REDUCTION`), or its accumulators' state grows large
//! with few groups (`SWITCH_STATE_BYTES`), the partition stops adding to it; from
//! then on rows are only *partitioned*: their keys and aggregate arguments are gathered, a few
//! hundred thousand rows at a time, into runs ordered by one of [`BUCKETS`] hash buckets (the
//! hash's top bits, with a seed unlike the tables' own). At the end the table's groups are
//! emitted as partial states and partitioned the same way. A query whose keys are few never
//! leaves the table, and partitions only its few state rows.
//!
//! **Phase 2.** Buckets are disjoint in their keys, so each is aggregated on its own, with no
//! merge after: consecutive buckets are gathered into tasks of about [`TASK_ROWS`] rows and
//! each task fills one table, updating it with raw rows (`update_batch`) and merging the
//! partial states (`merge_batch`), and evaluates and empties it at a bucket boundary once it
//! holds [`TABLE_GROUPS`] groups, so that it stays in cache however many keys the task has.
//! Fixed-width columns without NULLs are scattered into bucket order in one pass; the others
//! are gathered (`interleave`).
//!
//! The node replaces a Final(Partial) or Single aggregate pair, so its output schema and
//! partition count are the replaced node's; output partition `i` returns batches `i, i + P, …`.
//! Rows buffered in phase 1 are accounted to the query's memory pool: under a memory limit too
//! small for them the query fails with DataFusion's resources-exhausted error.

use std::fmt;
use std::sync::Arc;

use arrow::array::{
    make_array, new_empty_array, Array, ArrayData, ArrayRef, AsArray, ByteView,
    GenericByteViewArray, OffsetSizeTrait, RecordBatch, MAX_INLINE_VIEW_LEN,
};
use arrow::buffer::{Buffer, NullBuffer, ScalarBuffer};
use arrow::compute::interleave;
use arrow::datatypes::{
    ArrowNativeType, BinaryViewType, ByteViewType, DataType, Schema, SchemaRef, StringViewType,
};
use datafusion::common::hash_utils::{create_hashes, RandomState};
use datafusion::common::runtime::SpawnedTask;
use datafusion::common::tree_node::{TreeNodeIterator, TreeNodeRecursion};
use datafusion::common::Statistics;
use datafusion::common::{internal_err, DataFusionError, Result, ScalarValue};
use datafusion::execution::memory_pool::{MemoryConsumer, MemoryReservation};
use datafusion::execution::TaskContext;
use datafusion::logical_expr::{EmitTo, GroupsAccumulator};
use datafusion::physical_expr::aggregate::AggregateFunctionExpr;
use datafusion::physical_expr::expressions::Literal;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_plan::aggregates::group_values::{new_group_values, GroupValues};
use datafusion::physical_plan::aggregates::order::GroupOrdering;
use datafusion::physical_plan::metrics::{
    Count, ExecutionPlanMetricsSet, MetricBuilder, MetricsSet, Time,
};
use datafusion::physical_plan::statistics::StatisticsArgs;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, ExecutionPlanProperties, PlanProperties,
    SendableRecordBatchStream,
};
use futures::FutureExt;
use futures::StreamExt;

use crate::contract::{replaced_statistics, replacement_properties, whole_or_unknown};
use crate::packed::PackedKeys;
use crate::shared_run::SharedRun;
use crate::strings::StringGroupValues;

/// Groups one partition's table may hold before the partition switches to partitioning rows.
/// About where a DataFusion table (key, hash, index, states: 40–60 bytes a group) stops
/// fitting in a core's L2 cache.
pub const SWITCH_GROUPS: usize = 32_768;

/// Hash buckets (a power of two): enough that a bucket of even millions of keys is small.
pub const BUCKETS: usize = 256;
const BUCKET_BITS: u32 = BUCKETS.trailing_zeros();

/// Rows gathered before they are partitioned at once (bucket slices of ~1000 rows).
const FLUSH_ROWS: usize = 256 * 1024;

/// Rows (raw or state) one phase-2 task aggregates at most, in whole buckets.
pub const TASK_ROWS: usize = 128 * 1024;

/// Rows below which phase 2 does not split the work further.
const MIN_TASK_ROWS: usize = 2048;

/// A string or binary key longer than this on average (bytes) keeps a partition in its one
/// table while the table halves the rows at least: partitioning would hash and move every
/// key's bytes once more, and the table's own cost is in those bytes more than in its cache
/// misses. (12 is what a string view holds inline.) A table that does not halve them gains
/// nothing: its groups are bucketed and aggregated again in phase 2 all the same, so the
/// partition switches whatever its keys (ClickBench Q39: five keys, two of them URLs, 543K
/// rows into 361K groups).
const MAX_KEY_BYTES: usize = 12;

/// A table of string or binary keys that reduces the rows it took this many times at least
/// keeps its partition in it, however short the keys. Its keys repeat, so a probe mostly finds
/// a hot entry in cache, while partitioning would still hash and move every row's key and
/// phase 2 hash it again (ClickBench Q5, `COUNT(DISTINCT SearchPhrase)`: 5M rows, 94K groups,
/// mostly the empty string; 85 -> 53 ms). Integer keys are cheap to partition and switch.
const KEEP_REDUCTION: usize = 8;

/// Accumulator state, in bytes, past which a partition switches to partitioning rows however
/// few its groups, when the groups average more than [`SWITCH_GROUP_STATE_BYTES`] of it: per-group
/// sets (`COUNT(DISTINCT x)`) grow with the distinct values, not with the groups. A table that
/// keeps them builds every set twice, once in its partition and once more when phase 2 merges
/// the partitions' states, where partitioned raw rows build each set once, in tables a bucket
/// large (ClickBench Q8, `COUNT(DISTINCT UserID)` by 10K regions: 3.2M distinct pairs in 5M
/// rows). 4 MiB is what [`SWITCH_GROUPS`] groups of 128 bytes hold.
const SWITCH_STATE_BYTES: usize = SWITCH_GROUPS * 128;

/// Average state bytes per group above which [`SWITCH_STATE_BYTES`] applies: several times
/// what fixed-size states (sums, counts, averages, a few of each) take.
const SWITCH_GROUP_STATE_BYTES: usize = 64;

/// The bucket hash: a seed unlike DataFusion's tables', so the top bits a bucket shares do not
/// crowd its own table's tags.
const BUCKET_SEED: RandomState = RandomState::with_seed(0x7175_6976_6572_6167);

/// Where an aggregate's argument comes from in a partitioned raw row.
#[derive(Debug, Clone)]
enum Argument {
    /// A gathered column (its index among the carried columns).
    Column(usize),
    /// A literal (`count(*)`'s `1`): not carried, rebuilt per slice.
    Literal(ScalarValue),
}

/// One aggregate's inputs: arguments and FILTER column, and where its states are in a
/// partitioned state row.
#[derive(Debug, Clone)]
struct Inputs {
    arguments: Vec<Argument>,
    filter: Option<usize>,
    states: std::ops::Range<usize>,
}

/// What every task needs.
#[derive(Debug)]
struct Spec {
    keys: Vec<(Arc<dyn PhysicalExpr>, String)>,
    key_schema: SchemaRef,
    /// How the keys pack into one word, when they do ([`crate::packed`]).
    packed: Option<PackedKeys>,
    /// The key's type when it is one string or binary key ([`crate::strings`]).
    string_key: Option<DataType>,
    aggregates: Vec<Arc<AggregateFunctionExpr>>,
    filters: Vec<Option<Arc<dyn PhysicalExpr>>>,
    inputs: Vec<Inputs>,
    /// The expressions whose values a raw row carries after its keys, in column order.
    carried: Vec<Arc<dyn PhysicalExpr>>,
    schema: SchemaRef,
    /// The replaced aggregate's statistics, reported as this node's.
    statistics: Arc<Statistics>,
}

impl Spec {
    fn accumulators(&self) -> Result<Vec<Box<dyn GroupsAccumulator>>> {
        self.aggregates
            .iter()
            .map(|a| a.create_groups_accumulator())
            .collect()
    }

    /// Packed integer keys where they fit in a word or two ([`crate::packed`]), one string
    /// key in a prefetching table ([`crate::strings`]), otherwise DataFusion's group values
    /// for the key types; room for `groups` made at once.
    fn group_values(&self, groups: usize) -> Result<Box<dyn GroupValues>> {
        if let Some(packed) = &self.packed {
            return Ok(packed.group_values(groups));
        }
        if let Some(key) = &self.string_key {
            return Ok(Box::new(StringGroupValues::new(key.clone(), groups)));
        }
        new_group_values(Arc::clone(&self.key_schema), &GroupOrdering::None)
    }
}

/// Rows of one bucket: raw rows (keys, then the carried columns) or partial states (keys,
/// then every aggregate's state columns).
struct Slice {
    states: bool,
    columns: Vec<ArrayRef>,
}

impl Slice {
    fn rows(&self) -> usize {
        self.columns.first().map_or(0, |c| c.len())
    }
}

/// The radix-partitioned hash aggregation operator (see the module docs).
pub struct RadixAggregateExec {
    input: Arc<dyn ExecutionPlan>,
    spec: Arc<Spec>,
    properties: Arc<PlanProperties>,
    run: SharedRun,
    metrics: ExecutionPlanMetricsSet,
}

/// What `EXPLAIN ANALYZE` shows of the operator. One run serves every output partition, so
/// the run's totals are recorded as partition 0's.
#[derive(Clone)]
struct RunMetrics {
    output_rows: Count,
    /// CPU time summed over every phase-1 and phase-2 task (input waits excluded).
    elapsed_compute: Time,
    /// Input partitions whose table passed [`SWITCH_GROUPS`] and that bucketed the rest.
    partitions_switched: Count,
    /// Rows gathered into buckets: raw rows after a switch, and each table's groups as states.
    rows_bucketed: Count,
    /// Phase-2 aggregation tasks.
    bucket_tasks: Count,
}

impl RunMetrics {
    fn new(set: &ExecutionPlanMetricsSet) -> Self {
        RunMetrics {
            output_rows: MetricBuilder::new(set).output_rows(0),
            elapsed_compute: MetricBuilder::new(set).elapsed_compute(0),
            partitions_switched: MetricBuilder::new(set).counter("partitions_switched", 0),
            rows_bucketed: MetricBuilder::new(set).counter("rows_bucketed", 0),
            bucket_tasks: MetricBuilder::new(set).counter("bucket_tasks", 0),
        }
    }
}

impl fmt::Debug for RadixAggregateExec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RadixAggregateExec")
            .field("spec", &self.spec)
            .finish()
    }
}

impl RadixAggregateExec {
    /// An operator over `input` grouping by `keys` and computing what `replaced` (a final or
    /// single aggregate) does: its schema (group columns, then one column per aggregate), its
    /// partition count, its equivalences and statistics
    /// ([`crate::contract::replacement_properties`]). Fails when a key's type cannot be hashed
    /// or grouped.
    pub fn try_new(
        input: Arc<dyn ExecutionPlan>,
        keys: Vec<(Arc<dyn PhysicalExpr>, String)>,
        aggregates: Vec<Arc<AggregateFunctionExpr>>,
        filters: Vec<Option<Arc<dyn PhysicalExpr>>>,
        replaced: &dyn ExecutionPlan,
    ) -> Result<Self> {
        let schema = replaced.schema();
        if schema.fields().len() != keys.len() + aggregates.len()
            || filters.len() != aggregates.len()
        {
            return internal_err!(
                "radix aggregation: schema has {} columns for {} keys and {} aggregates",
                schema.fields().len(),
                keys.len(),
                aggregates.len()
            );
        }
        let key_schema = Arc::new(Schema::new(
            schema
                .fields()
                .iter()
                .take(keys.len())
                .cloned()
                .collect::<Vec<_>>(),
        ));
        // Both must accept the key types: the bucket hash and DataFusion's group tables.
        let empty: Vec<ArrayRef> = key_schema
            .fields()
            .iter()
            .map(|f| new_empty_array(f.data_type()))
            .collect();
        create_hashes(&empty, &BUCKET_SEED, &mut [])?;
        new_group_values(Arc::clone(&key_schema), &GroupOrdering::None)?;

        let mut carried: Vec<Arc<dyn PhysicalExpr>> = Vec::new();
        let mut inputs = Vec::with_capacity(aggregates.len());
        let mut state_at = keys.len();
        for (aggregate, filter) in aggregates.iter().zip(&filters) {
            let arguments = aggregate
                .expressions()
                .into_iter()
                .map(|e| match e.downcast_ref::<Literal>() {
                    Some(literal) => Argument::Literal(literal.value().clone()),
                    None => {
                        carried.push(e);
                        Argument::Column(keys.len() + carried.len() - 1)
                    }
                })
                .collect();
            let filter = filter.as_ref().map(|f| {
                carried.push(Arc::clone(f));
                keys.len() + carried.len() - 1
            });
            let states = aggregate.state_fields()?.len();
            inputs.push(Inputs {
                arguments,
                filter,
                states: state_at..state_at + states,
            });
            state_at += states;
        }
        Ok(RadixAggregateExec {
            input,
            spec: Arc::new(Spec {
                keys,
                packed: PackedKeys::of(&key_schema),
                string_key: crate::strings::single_key(&key_schema),
                key_schema,
                aggregates,
                filters,
                inputs,
                carried,
                schema,
                statistics: replaced_statistics(replaced),
            }),
            properties: Arc::new(replacement_properties(replaced)),
            run: SharedRun::default(),
            metrics: ExecutionPlanMetricsSet::new(),
        })
    }

    fn output_partitions(&self) -> usize {
        self.properties.partitioning.partition_count()
    }

    /// This operator over `input`, with a run and metrics of its own (for `with_new_children`
    /// and `reset_state`).
    fn over(&self, input: Arc<dyn ExecutionPlan>) -> Self {
        RadixAggregateExec {
            input,
            spec: Arc::clone(&self.spec),
            properties: Arc::clone(&self.properties),
            run: SharedRun::default(),
            metrics: ExecutionPlanMetricsSet::new(),
        }
    }
}

async fn run_all(
    spec: Arc<Spec>,
    inputs: Vec<(SendableRecordBatchStream, MemoryReservation)>,
    threads: usize,
    metrics: RunMetrics,
) -> Result<Vec<RecordBatch>> {
    let tasks: Vec<SpawnedTask<Result<Partitioned>>> = inputs
        .into_iter()
        .map(|(stream, reservation)| {
            SpawnedTask::spawn(partition_input(
                Arc::clone(&spec),
                stream,
                reservation,
                metrics.clone(),
            ))
        })
        .collect();
    let mut buckets: Vec<Vec<Slice>> = (0..BUCKETS).map(|_| Vec::new()).collect();
    // The reservations live until the buffered rows are aggregated.
    let mut reservations = Vec::with_capacity(tasks.len());
    for task in tasks {
        let (slices, reservation) = task.join().await.map_err(|e| {
            DataFusionError::Execution(format!("radix aggregation task failed: {e}"))
        })??;
        for (bucket, mut mine) in buckets.iter_mut().zip(slices) {
            bucket.append(&mut mine);
        }
        reservations.push(reservation);
    }
    // Whole buckets, in order, at most about `TASK_ROWS` rows a task, and a few tasks a
    // thread however few the rows (merging states such as COUNT(DISTINCT)'s sets is costly
    // per row), but not for mere hundreds of rows.
    let total: usize = buckets.iter().flatten().map(Slice::rows).sum();
    let per_task = total
        .div_ceil(4 * threads)
        .clamp(MIN_TASK_ROWS, TASK_ROWS.max(MIN_TASK_ROWS));
    let mut groups: Vec<Vec<Vec<Slice>>> = Vec::new();
    let mut current: Vec<Vec<Slice>> = Vec::new();
    let mut rows = 0;
    for bucket in buckets {
        if bucket.is_empty() {
            continue;
        }
        rows += bucket.iter().map(Slice::rows).sum::<usize>();
        current.push(bucket);
        if rows >= per_task {
            groups.push(std::mem::take(&mut current));
            rows = 0;
        }
    }
    if !current.is_empty() {
        groups.push(current);
    }
    metrics.bucket_tasks.add(groups.len());
    let aggregations: Vec<SpawnedTask<Result<Vec<RecordBatch>>>> = groups
        .into_iter()
        .map(|slices| {
            let spec = Arc::clone(&spec);
            let elapsed = metrics.elapsed_compute.clone();
            SpawnedTask::spawn(async move {
                let _timer = elapsed.timer();
                aggregate_buckets(&spec, slices)
            })
        })
        .collect();
    let mut batches = Vec::with_capacity(aggregations.len());
    for aggregation in aggregations {
        let batch = aggregation.join().await.map_err(|e| {
            DataFusionError::Execution(format!("radix aggregation task failed: {e}"))
        })??;
        batches.extend(batch);
    }
    drop(reservations);
    metrics
        .output_rows
        .add(batches.iter().map(RecordBatch::num_rows).sum());
    Ok(batches)
}

/// One input partition's rows, as slices per bucket, and the memory they hold.
type Partitioned = (Vec<Vec<Slice>>, MemoryReservation);

/// The rows one input partition has gathered but not yet partitioned.
struct Pending {
    batches: Vec<Vec<ArrayRef>>,
    rows: usize,
}

/// Phase 1 for one input partition: aggregate into one table until it is too large, then
/// partition the rest; return every bucket's slices.
async fn partition_input(
    spec: Arc<Spec>,
    mut stream: SendableRecordBatchStream,
    reservation: MemoryReservation,
    metrics: RunMetrics,
) -> Result<Partitioned> {
    let mut buckets: Vec<Vec<Slice>> = (0..BUCKETS).map(|_| Vec::new()).collect();
    let (mut values, mut accumulators) = (spec.group_values(0)?, spec.accumulators()?);
    let mut switched = false;
    // Rows aggregated into the table so far.
    let mut tabled = 0;
    let mut groups = Vec::new();
    let mut pending = Pending {
        batches: Vec::new(),
        rows: 0,
    };
    while let Some(batch) = stream.next().await {
        let batch = batch?;
        let rows = batch.num_rows();
        if rows == 0 {
            continue;
        }
        let _timer = metrics.elapsed_compute.timer();
        let mut columns = Vec::with_capacity(spec.keys.len() + spec.carried.len());
        for (expr, _) in &spec.keys {
            columns.push(expr.evaluate(&batch)?.into_array(rows)?);
        }
        for expr in &spec.carried {
            columns.push(expr.evaluate(&batch)?.into_array(rows)?);
        }
        if !switched {
            values.intern(&columns[..spec.keys.len()], &mut groups)?;
            let total = values.len();
            for (accumulator, inputs) in accumulators.iter_mut().zip(&spec.inputs) {
                let arguments = arguments(inputs, &columns, rows)?;
                let filter = inputs.filter.map(|f| columns[f].as_boolean());
                accumulator.update_batch(&arguments, &groups, filter, total)?;
            }
            tabled += rows;
            let state: usize = accumulators.iter().map(|a| a.size()).sum();
            switched = (total > SWITCH_GROUPS
                && (2 * total > tabled
                    || match key_bytes(&columns[..spec.keys.len()]) {
                        KeyBytes::None => true,
                        KeyBytes::Short => KEEP_REDUCTION * total > tabled,
                        KeyBytes::Long => false,
                    }))
                || (state > SWITCH_STATE_BYTES && state > SWITCH_GROUP_STATE_BYTES * total);
            if switched {
                metrics.partitions_switched.add(1);
            }
        } else {
            reservation.try_grow(columns.iter().map(|c| c.get_array_memory_size()).sum())?;
            metrics.rows_bucketed.add(rows);
            pending.rows += rows;
            pending.batches.push(columns);
            if pending.rows >= FLUSH_ROWS {
                let batches = std::mem::take(&mut pending.batches);
                pending.rows = 0;
                partition(&batches, spec.keys.len(), false, &mut buckets)?;
            }
        }
    }
    let _timer = metrics.elapsed_compute.timer();
    if !pending.batches.is_empty() {
        partition(&pending.batches, spec.keys.len(), false, &mut buckets)?;
    }
    if !values.is_empty() {
        metrics.rows_bucketed.add(values.len());
        let mut columns = values.emit(EmitTo::All)?;
        for mut accumulator in accumulators {
            columns.extend(accumulator.state(EmitTo::All)?);
        }
        reservation.try_grow(columns.iter().map(|c| c.get_array_memory_size()).sum())?;
        partition(&[columns], spec.keys.len(), true, &mut buckets)?;
    }
    Ok((buckets, reservation))
}

/// What the string and binary keys of a batch are.
enum KeyBytes {
    /// There are none.
    None,
    /// Every one is at most [`MAX_KEY_BYTES`] long on average.
    Short,
    /// Some is longer.
    Long,
}

fn key_bytes(keys: &[ArrayRef]) -> KeyBytes {
    let mut found = KeyBytes::None;
    for key in keys {
        let rows = key.len().max(1);
        let bytes = match key.data_type() {
            DataType::Utf8View => key.as_string_view().lengths().map(|l| l as usize).sum(),
            DataType::BinaryView => key.as_binary_view().lengths().map(|l| l as usize).sum(),
            DataType::Utf8 => spanned(key.as_string::<i32>().value_offsets()),
            DataType::LargeUtf8 => spanned(key.as_string::<i64>().value_offsets()),
            DataType::Binary => spanned(key.as_binary::<i32>().value_offsets()),
            DataType::LargeBinary => spanned(key.as_binary::<i64>().value_offsets()),
            _ => continue,
        };
        if bytes > MAX_KEY_BYTES * rows {
            return KeyBytes::Long;
        }
        found = KeyBytes::Short;
    }
    found
}

/// The bytes an offsets buffer spans.
fn spanned<O: OffsetSizeTrait>(offsets: &[O]) -> usize {
    match (offsets.first(), offsets.last()) {
        (Some(first), Some(last)) => (*last - *first).as_usize(),
        _ => 0,
    }
}

/// An aggregate's argument arrays for `rows` rows of `columns`.
fn arguments(inputs: &Inputs, columns: &[ArrayRef], rows: usize) -> Result<Vec<ArrayRef>> {
    inputs
        .arguments
        .iter()
        .map(|argument| match argument {
            Argument::Column(c) => Ok(Arc::clone(&columns[*c])),
            Argument::Literal(value) => value.to_array_of_size(rows),
        })
        .collect()
}

/// Gathers the rows of `batches` (each a list of equally long columns, keys first) in bucket
/// order, and appends each bucket's run to its slices.
fn partition(
    batches: &[Vec<ArrayRef>],
    key_count: usize,
    states: bool,
    buckets: &mut [Vec<Slice>],
) -> Result<()> {
    let total: usize = batches.iter().map(|b| b[0].len()).sum();
    let mut bucket_of = Vec::with_capacity(total);
    let mut hashes = Vec::new();
    let mut counts = [0usize; BUCKETS];
    for batch in batches {
        hashes.clear();
        hashes.resize(batch[0].len(), 0);
        create_hashes(&batch[..key_count], &BUCKET_SEED, &mut hashes)?;
        for &hash in &hashes {
            let bucket = (hash >> (64 - BUCKET_BITS)) as u8;
            counts[bucket as usize] += 1;
            bucket_of.push(bucket);
        }
    }
    let starts = run_starts(&counts);
    let columns = batches[0].len();
    let mut gathered = Vec::with_capacity(columns);
    // Row order for the columns that cannot be scattered, made when the first needs it.
    let mut order: Option<Vec<(usize, usize)>> = None;
    for c in 0..columns {
        let arrays: Vec<&dyn Array> = batches.iter().map(|b| b[c].as_ref()).collect();
        if let Some(scattered) = scatter(&arrays, &bucket_of, &starts)? {
            gathered.push(scattered);
            continue;
        }
        let order = match &mut order {
            Some(order) => order,
            None => order.insert(bucket_order(batches, &bucket_of, &starts)?),
        };
        gathered.push(interleave(&arrays, order)?);
    }
    for (bucket, (&start, &count)) in starts.iter().zip(&counts).enumerate() {
        if count == 0 {
            continue;
        }
        buckets[bucket].push(Slice {
            states,
            columns: gathered.iter().map(|a| a.slice(start, count)).collect(),
        });
    }
    Ok(())
}

/// Groups a phase-2 table gathers before it is evaluated and emptied for the next buckets:
/// a task's rows may hold some hundred thousand keys, and one table over all of them would
/// outgrow the cache that is the point of bucketing. Buckets share no keys, so a table may be
/// emptied at any bucket boundary (ClickBench Q32, 5M distinct keys).
pub const TABLE_GROUPS: usize = SWITCH_GROUPS / 2;

/// Every row's `(batch, row)` in bucket order.
fn bucket_order(
    batches: &[Vec<ArrayRef>],
    bucket_of: &[u8],
    starts: &[usize; BUCKETS],
) -> Result<Vec<(usize, usize)>> {
    let rows = batches
        .iter()
        .enumerate()
        .map(|(b, batch)| (0..batch[0].len()).map(move |row| (b, row)));
    scatter_by(rows, bucket_of, starts)
}

/// A fixed-width column written straight into bucket order: one pass over the values and no
/// `(batch, row)` index to read, where `interleave` gathers through one per row (ClickBench
/// Q32: 5M rows of four integer columns); its NULLs, if any, scattered the same way. String
/// and binary views are moved with their bytes ([`scatter_views`]). None for other columns.
fn scatter(
    arrays: &[&dyn Array],
    bucket_of: &[u8],
    starts: &[usize; BUCKETS],
) -> Result<Option<ArrayRef>> {
    let Some(data_type) = arrays.first().map(|a| a.data_type()) else {
        return Ok(None);
    };
    let nulls = || scatter_nulls(arrays, bucket_of, starts);
    let values = match data_type {
        DataType::Utf8View => {
            return scatter_views::<StringViewType>(arrays, bucket_of, starts, nulls()?)
        }
        DataType::BinaryView => {
            return scatter_views::<BinaryViewType>(arrays, bucket_of, starts, nulls()?)
        }
        _ if !data_type.is_primitive() => return Ok(None),
        // 16-byte types are left to `interleave`: their buffers need not be 16-byte aligned.
        _ => match data_type.primitive_width() {
            Some(1) => scatter_values::<u8>(arrays, bucket_of, starts)?,
            Some(2) => scatter_values::<u16>(arrays, bucket_of, starts)?,
            Some(4) => scatter_values::<u32>(arrays, bucket_of, starts)?,
            Some(8) => scatter_values::<u64>(arrays, bucket_of, starts)?,
            _ => return Ok(None),
        },
    };
    let data = ArrayData::builder(data_type.clone())
        .len(bucket_of.len())
        .add_buffer(values)
        .nulls(nulls()?)
        .build()?;
    Ok(Some(make_array(data)))
}

/// The validity of `arrays`' rows in bucket order; None when no row is NULL.
fn scatter_nulls(
    arrays: &[&dyn Array],
    bucket_of: &[u8],
    starts: &[usize; BUCKETS],
) -> Result<Option<NullBuffer>> {
    if arrays.iter().all(|a| a.null_count() == 0) {
        return Ok(None);
    }
    let valid = arrays
        .iter()
        .map(|a| (0..a.len()).map(move |row| a.is_valid(row)));
    let valid = scatter_by(valid, bucket_of, starts)?;
    Ok(Some(NullBuffer::from(valid)))
}

/// A string or binary view column moved into bucket order *with its bytes*: values longer
/// than a view's 12 inline bytes are copied into one new buffer, bucket after bucket, so phase
/// 2 reads a bucket's bytes in order. `interleave` would reorder only the views, leaving phase
/// 2's hashing and comparing to jump about the batches the values were decoded into, a cache
/// miss a row (ClickBench Q39, `GROUP BY ..., Referer, URL`: 22% of the query's samples
/// hashing URLs, three quarters of them on the load of the last bytes). `nulls` is the
/// column's validity in bucket order; a NULL row's view becomes an empty one. None when the
/// bytes do not fit a view's 32-bit offset.
fn scatter_views<T: ByteViewType>(
    arrays: &[&dyn Array],
    bucket_of: &[u8],
    starts: &[usize; BUCKETS],
    nulls: Option<NullBuffer>,
) -> Result<Option<ArrayRef>> {
    let Some(arrays) = arrays
        .iter()
        .map(|a| a.as_byte_view_opt::<T>())
        .collect::<Option<Vec<_>>>()
    else {
        return internal_err!("radix aggregation: a column's batches differ in type");
    };
    if arrays.iter().map(|a| a.len()).sum::<usize>() != bucket_of.len() {
        return internal_err!("radix aggregation: bucket count mismatch");
    }
    // Pass 1: each bucket's long bytes, and so where its bytes start in the new buffer.
    let mut long_bytes = [0usize; BUCKETS];
    let mut buckets = bucket_of.iter();
    for array in &arrays {
        for (row, (&view, &bucket)) in array.views().iter().zip(&mut buckets).enumerate() {
            let len = view as u32 as usize;
            if len > MAX_INLINE_VIEW_LEN as usize && array.is_valid(row) {
                long_bytes[bucket as usize] += len;
            }
        }
    }
    let total: usize = long_bytes.iter().sum();
    if u32::try_from(total).is_err() {
        return Ok(None);
    }
    let byte_starts = run_starts(&long_bytes);
    let mut byte_at = byte_starts;
    let mut data = vec![0u8; total];
    // Pass 2: each view to its bucket's next slot, its long bytes to its bucket's next bytes.
    let mut buckets = bucket_of.iter();
    let mut moved = Vec::with_capacity(bucket_of.len());
    for array in &arrays {
        let buffers = array.data_buffers();
        for (row, (&view, &bucket)) in array.views().iter().zip(&mut buckets).enumerate() {
            // A NULL's view may hold anything: it becomes an empty inline one.
            if array.is_null(row) {
                moved.push(0);
                continue;
            }
            let len = view as u32 as usize;
            if len <= MAX_INLINE_VIEW_LEN as usize {
                moved.push(view);
                continue;
            }
            let long = ByteView::from(view);
            let Some(bytes) = buffers
                .get(long.buffer_index as usize)
                .and_then(|buffer| buffer.get(long.offset as usize..long.offset as usize + len))
            else {
                return internal_err!("radix aggregation: a view past its buffer");
            };
            let at = &mut byte_at[bucket as usize];
            let Some(to) = data.get_mut(*at..*at + len) else {
                return internal_err!("radix aggregation: bucket bytes mismatch");
            };
            to.copy_from_slice(bytes);
            // Same length and prefix; buffer 0 (the only one), at the bytes' new place.
            moved.push(
                ByteView {
                    buffer_index: 0,
                    offset: *at as u32,
                    ..long
                }
                .as_u128(),
            );
            *at += len;
        }
    }
    if !runs_filled(&byte_at, &byte_starts, total) {
        return internal_err!("radix aggregation: bucket bytes mismatch");
    }
    let views = scatter_by(std::iter::once(moved.into_iter()), bucket_of, starts)?;
    let buffers = if total == 0 {
        vec![]
    } else {
        vec![Buffer::from_vec(data)]
    };
    if nulls.as_ref().is_some_and(|n| n.len() != views.len()) {
        return internal_err!("radix aggregation: bucket count mismatch");
    }
    // SAFETY: every view is one of a valid `T` array's views, unchanged but for where a long
    // value's bytes are: the same bytes (so still valid UTF-8 for strings) copied to `offset`
    // of buffer 0, inside it (`data.get_mut` above checked the range); or, for a NULL, an
    // empty inline view. `nulls` has a bit per view (checked above).
    let array = unsafe {
        GenericByteViewArray::<T>::new_unchecked(ScalarBuffer::from(views), buffers, nulls)
    };
    Ok(Some(Arc::new(array)))
}

/// The values of `arrays`, whose rows `bucket_of` numbers, moved to their bucket's run.
fn scatter_values<T: ArrowNativeType>(
    arrays: &[&dyn Array],
    bucket_of: &[u8],
    starts: &[usize; BUCKETS],
) -> Result<Buffer> {
    let datas: Vec<ArrayData> = arrays.iter().map(|a| a.to_data()).collect();
    let values = datas
        .iter()
        .map(|data| data.buffer::<T>(0)[..data.len()].iter().copied());
    Ok(Buffer::from_vec(scatter_by(values, bucket_of, starts)?))
}

/// The rows of `chunks`, which `bucket_of` numbers in order, each moved to the next free slot
/// of its bucket's run, the runs starting at `starts`. One pass over the rows, the bucket
/// cursors being the only state: partitioning's hot loop for every column kind.
fn scatter_by<T: Copy, C: ExactSizeIterator<Item = T>>(
    chunks: impl Iterator<Item = C> + Clone,
    bucket_of: &[u8],
    starts: &[usize; BUCKETS],
) -> Result<Vec<T>> {
    let total = bucket_of.len();
    if chunks.clone().map(|c| c.len()).sum::<usize>() != total {
        return internal_err!("radix aggregation: bucket count mismatch");
    }
    // Not zeroed first: every slot is written once, which is checked below.
    let mut out: Vec<T> = Vec::with_capacity(total);
    let slots = &mut out.spare_capacity_mut()[..total];
    let mut next = *starts;
    let mut buckets = bucket_of.iter();
    for chunk in chunks {
        for (item, &bucket) in chunk.zip(&mut buckets) {
            let slot = &mut next[bucket as usize];
            slots[*slot].write(item);
            *slot += 1;
        }
    }
    // As many rows as slots (checked above), and each bucket's cursor moved one slot per row
    // from its start: ending at the next bucket's start means every slot of `0..total` was
    // written once.
    if !runs_filled(&next, starts, total) {
        return internal_err!("radix aggregation: bucket count mismatch");
    }
    // SAFETY: the capacity is `total`, and the check above proves slots `0..total` initialised.
    unsafe { out.set_len(total) };
    Ok(out)
}

/// Where each bucket's run starts when the runs, of `sizes`, follow one another in bucket order.
fn run_starts(sizes: &[usize; BUCKETS]) -> [usize; BUCKETS] {
    let mut starts = [0usize; BUCKETS];
    let mut at = 0;
    for (start, &size) in starts.iter_mut().zip(sizes) {
        *start = at;
        at += size;
    }
    starts
}

/// Whether every bucket's cursor, started at its run's start in `starts`, ended where the
/// next run starts (the last at `total`): each run was filled exactly.
fn runs_filled(cursors: &[usize; BUCKETS], starts: &[usize; BUCKETS], total: usize) -> bool {
    let ends = starts.iter().skip(1).copied().chain([total]);
    cursors.iter().copied().eq(ends)
}

/// Phase 2: aggregates whole buckets, in order, into one table, evaluating and emptying it at
/// a bucket boundary once it holds [`TABLE_GROUPS`] groups.
fn aggregate_buckets(spec: &Spec, buckets: Vec<Vec<Slice>>) -> Result<Vec<RecordBatch>> {
    // Room for as many groups as one bucket's rows on top of a nearly full table: a bucket's
    // keys are mostly new when it has many, and a table grown by doubling moves every entry
    // again and again.
    let rows: usize = buckets.iter().flatten().map(Slice::rows).sum();
    let largest = buckets
        .iter()
        .map(|bucket| bucket.iter().map(Slice::rows).sum::<usize>())
        .max()
        .unwrap_or(0);
    let mut values = spec.group_values(rows.min(TABLE_GROUPS + largest))?;
    let mut accumulators = spec.accumulators()?;
    let mut groups = Vec::new();
    let mut batches = Vec::new();
    let keys = spec.keys.len();
    for bucket in &buckets {
        for slice in bucket {
            let rows = slice.rows();
            values.intern(&slice.columns[..keys], &mut groups)?;
            let total = values.len();
            for (accumulator, inputs) in accumulators.iter_mut().zip(&spec.inputs) {
                if slice.states {
                    let Some(states) = slice.columns.get(inputs.states.clone()) else {
                        return internal_err!("radix aggregation: state columns missing");
                    };
                    accumulator.merge_batch(states, &groups, total)?;
                } else {
                    let arguments = arguments(inputs, &slice.columns, rows)?;
                    let filter = inputs.filter.map(|f| slice.columns[f].as_boolean());
                    accumulator.update_batch(&arguments, &groups, filter, total)?;
                }
            }
        }
        if values.len() >= TABLE_GROUPS {
            batches.push(evaluate(spec, values.as_mut(), &mut accumulators)?);
        }
    }
    if !values.is_empty() {
        batches.push(evaluate(spec, values.as_mut(), &mut accumulators)?);
    }
    Ok(batches)
}

/// The table's groups and their aggregates, as output rows; leaves the table and the
/// accumulators empty.
fn evaluate(
    spec: &Spec,
    values: &mut dyn GroupValues,
    accumulators: &mut [Box<dyn GroupsAccumulator>],
) -> Result<RecordBatch> {
    let mut columns = values.emit(EmitTo::All)?;
    for accumulator in accumulators {
        columns.push(accumulator.evaluate(EmitTo::All)?);
    }
    Ok(RecordBatch::try_new(Arc::clone(&spec.schema), columns)?)
}

impl DisplayAs for RadixAggregateExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        let keys: Vec<String> = self
            .spec
            .keys
            .iter()
            .map(|(expr, name)| format!("{expr} as {name}"))
            .collect();
        let aggregates: Vec<&str> = self.spec.aggregates.iter().map(|a| a.name()).collect();
        write!(
            f,
            "RadixAggregateExec: gby=[{}], aggr=[{}], buckets={}, switch_at={}",
            keys.join(", "),
            aggregates.join(", "),
            BUCKETS,
            SWITCH_GROUPS
        )?;
        if let Some(packed) = &self.spec.packed {
            write!(f, ", packed_keys={}", packed.word_bits())?;
        }
        if self.spec.string_key.is_some() {
            write!(f, ", string_table")?;
        }
        Ok(())
    }
}

impl ExecutionPlan for RadixAggregateExec {
    fn name(&self) -> &str {
        "RadixAggregateExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![&self.input]
    }

    fn metrics(&self) -> Option<MetricsSet> {
        Some(self.metrics.clone_inner())
    }

    fn apply_expressions(
        &self,
        f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>,
    ) -> Result<TreeNodeRecursion> {
        let mut exprs: Vec<Arc<dyn PhysicalExpr>> =
            self.spec.keys.iter().map(|(e, _)| Arc::clone(e)).collect();
        for aggregate in &self.spec.aggregates {
            exprs.extend(aggregate.expressions());
        }
        exprs.extend(self.spec.filters.iter().flatten().cloned());
        exprs.iter().apply_until_stop(f)
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let [input] = <[Arc<dyn ExecutionPlan>; 1]>::try_from(children)
            .map_err(|_| DataFusionError::Internal("RadixAggregateExec has one child".into()))?;
        Ok(Arc::new(self.over(input)))
    }

    fn reset_state(self: Arc<Self>) -> Result<Arc<dyn ExecutionPlan>> {
        Ok(Arc::new(self.over(Arc::clone(&self.input))))
    }

    fn statistics_from_inputs(
        &self,
        _inputs: &[Arc<Statistics>],
        args: &StatisticsArgs,
    ) -> Result<Arc<Statistics>> {
        Ok(whole_or_unknown(&self.spec.statistics, args))
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        let partitions = self.output_partitions();
        if partition >= partitions {
            return internal_err!(
                "RadixAggregateExec has {partitions} partitions, asked for {partition}"
            );
        }
        let input = Arc::clone(&self.input);
        let spec = Arc::clone(&self.spec);
        let metrics = &self.metrics;
        self.run
            .execute(partition, partitions, Arc::clone(&self.spec.schema), || {
                let mut tasks = Vec::new();
                for p in 0..input.output_partitioning().partition_count() {
                    let stream = input.execute(p, Arc::clone(&context))?;
                    let reservation = MemoryConsumer::new(format!("RadixAggregateExec[{p}]"))
                        .register(context.memory_pool());
                    tasks.push((stream, reservation));
                }
                let threads = context.session_config().target_partitions().max(1);
                Ok(run_all(spec, tasks, threads, RunMetrics::new(metrics)).boxed())
            })
    }
}
