//! A pyarrow Dataset as a table that reads lazily: only the columns a query uses, fragment by
//! fragment (a file, or a piece of one) spread over parallel partitions, when the query runs —
//! not the whole dataset into memory at every query. pyarrow's C++ scanner produces the
//! batches through the Arrow C stream interface, so reading needs no GIL; only opening the
//! readers does.

use std::fmt;
use std::sync::Arc;

use arrow::array::RecordBatch;
use arrow::datatypes::{Schema, SchemaRef};
use arrow::ffi::FFI_ArrowSchema;
use arrow::ffi_stream::{ArrowArrayStreamReader, FFI_ArrowArrayStream};
use async_trait::async_trait;
use datafusion::catalog::{Session as CatalogSession, TableProvider};
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::datasource::TableType;
use datafusion::error::{DataFusionError, Result as DFResult};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::logical_expr::Expr;
use datafusion::physical_expr::{EquivalenceProperties, PhysicalExpr};
use datafusion::physical_plan::coop::make_cooperative;
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType, SchedulingType};
use datafusion::physical_plan::metrics::{BaselineMetrics, ExecutionPlanMetricsSet, MetricsSet};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, Partitioning, PlanProperties,
};
use pyo3::prelude::*;
use pyo3::types::{PyCapsule, PyList};
use quiver_core::QuiverError;

use super::arrays::PyOwner;
use crate::errors::conversion_error;

/// A pyarrow `Dataset`, read when scanned.
pub struct DatasetTable {
    dataset: Arc<PyOwner>,
    description: String,
    /// The dataset's schema with strings exposed as string views.
    schema: SchemaRef,
    /// Its schema as pyarrow reports it (what the readers produce).
    source: SchemaRef,
    fragments: usize,
}

impl fmt::Debug for DatasetTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DatasetTable")
            .field("source", &self.description)
            .finish()
    }
}

fn imported_schema(schema: &Bound<'_, PyAny>) -> PyResult<Schema> {
    let capsule = schema.call_method0("__arrow_c_schema__")?;
    let capsule = capsule.cast::<PyCapsule>()?;
    let pointer = capsule
        .pointer_checked(Some(c"arrow_schema"))
        .map_err(|_| conversion_error("expected an \"arrow_schema\" capsule".into()))?
        .as_ptr() as *const FFI_ArrowSchema;
    // SAFETY: an "arrow_schema" capsule holds a valid schema, borrowed for this call.
    Schema::try_from(unsafe { &*pointer })
        .map_err(|e| conversion_error(format!("invalid Arrow schema: {e}")))
}

impl DatasetTable {
    /// The GIL is held. Counts the fragments (no data is read).
    pub fn new(
        py: Python<'_>,
        dataset: &Bound<'_, PyAny>,
        description: String,
    ) -> PyResult<DatasetTable> {
        let source = imported_schema(&dataset.getattr("schema")?)?;
        let fields: Vec<_> = source
            .fields()
            .iter()
            .map(|f| {
                f.as_ref()
                    .clone()
                    .with_data_type(super::exposed_type(f.data_type()))
            })
            .collect();
        let sources = py.import("quiver._sources")?;
        let fragments: usize = sources
            .call_method1("dataset_fragments", (dataset,))?
            .extract()?;
        Ok(DatasetTable {
            dataset: Arc::new(PyOwner::new(dataset)),
            description,
            schema: Arc::new(Schema::new_with_metadata(fields, source.metadata().clone())),
            source: Arc::new(source),
            fragments,
        })
    }
}

#[async_trait]
impl TableProvider for DatasetTable {
    fn schema(&self) -> SchemaRef {
        Arc::clone(&self.schema)
    }

    fn table_type(&self) -> TableType {
        TableType::Temporary
    }

    async fn scan(
        &self,
        state: &dyn CatalogSession,
        projection: Option<&Vec<usize>>,
        _filters: &[Expr],
        _limit: Option<usize>,
    ) -> DFResult<Arc<dyn ExecutionPlan>> {
        let projection: Vec<usize> = match projection {
            Some(projection) => projection.clone(),
            None => (0..self.schema.fields().len()).collect(),
        };
        let schema = Arc::new(self.schema.project(&projection)?);
        let columns = projection
            .iter()
            .map(|&i| self.source.field(i).name().clone())
            .collect();
        let partitions = state
            .config_options()
            .execution
            .target_partitions
            .clamp(1, self.fragments.max(1));
        let properties = PlanProperties::new(
            EquivalenceProperties::new(Arc::clone(&schema)),
            Partitioning::UnknownPartitioning(partitions),
            EmissionType::Incremental,
            Boundedness::Bounded,
        )
        // Its stream yields to the runtime (`make_cooperative`), so an abandoned query stops.
        .with_scheduling_type(SchedulingType::Cooperative);
        Ok(Arc::new(DatasetScanExec {
            dataset: Arc::clone(&self.dataset),
            description: self.description.clone(),
            columns,
            schema,
            partitions,
            properties: Arc::new(properties),
            metrics: ExecutionPlanMetricsSet::new(),
        }))
    }
}

/// The scan of a [`DatasetTable`]: partition `p` reads fragments `p, p + n, p + 2n, ...`.
struct DatasetScanExec {
    dataset: Arc<PyOwner>,
    description: String,
    columns: Vec<String>,
    schema: SchemaRef,
    partitions: usize,
    properties: Arc<PlanProperties>,
    /// The rows, bytes and batches read, and the time spent reading them (in pyarrow).
    metrics: ExecutionPlanMetricsSet,
}

impl fmt::Debug for DatasetScanExec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DatasetScanExec")
            .field("source", &self.description)
            .finish()
    }
}

impl DisplayAs for DatasetScanExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(
            f,
            "PythonDatasetScan: {}, partitions={}, projection=[{}]",
            self.description,
            self.partitions,
            self.columns.join(", ")
        )
    }
}

fn open_readers(
    dataset: &PyOwner,
    columns: &[String],
    partitions: usize,
    partition: usize,
) -> PyResult<Vec<ArrowArrayStreamReader>> {
    Python::attach(|py| {
        let sources = py.import("quiver._sources")?;
        let readers = sources.call_method1(
            "dataset_readers",
            (dataset.object(py), columns.to_vec(), partitions, partition),
        )?;
        let readers = readers.cast::<PyList>()?;
        let mut opened = Vec::with_capacity(readers.len());
        for reader in readers.iter() {
            let capsule = reader.call_method0("__arrow_c_stream__")?;
            let capsule = capsule.cast::<PyCapsule>()?;
            let pointer = capsule
                .pointer_checked(Some(c"arrow_array_stream"))
                .map_err(|_| conversion_error("expected an \"arrow_array_stream\" capsule".into()))?
                .as_ptr() as *mut FFI_ArrowArrayStream;
            // SAFETY: a valid stream capsule; from_raw moves the stream out and marks the
            // capsule's copy released.
            let stream = unsafe { ArrowArrayStreamReader::from_raw(pointer) }
                .map_err(|e| conversion_error(format!("invalid Arrow stream: {e}")))?;
            opened.push(stream);
        }
        Ok(opened)
    })
}

impl ExecutionPlan for DatasetScanExec {
    fn name(&self) -> &'static str {
        "DatasetScanExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        Vec::new()
    }

    fn apply_expressions(
        &self,
        _f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> DFResult<TreeNodeRecursion>,
    ) -> DFResult<TreeNodeRecursion> {
        Ok(TreeNodeRecursion::Continue)
    }

    fn with_new_children(
        self: Arc<Self>,
        _children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> DFResult<Arc<dyn ExecutionPlan>> {
        Ok(self)
    }

    fn execute(
        &self,
        partition: usize,
        _context: Arc<TaskContext>,
    ) -> DFResult<SendableRecordBatchStream> {
        let readers = open_readers(&self.dataset, &self.columns, self.partitions, partition)
            .map_err(|e| QuiverError::Conversion(e.to_string()).into_datafusion())?;
        let schema = Arc::clone(&self.schema);
        let batch_schema = Arc::clone(&schema);
        let batches = readers.into_iter().flatten().map(move |batch| {
            let batch = batch.map_err(|e| {
                QuiverError::Conversion(format!("reading the dataset: {e}")).into_datafusion()
            })?;
            exposed_batch(&batch_schema, batch)
        });
        let baseline = BaselineMetrics::new(&self.metrics, partition);
        // Yields now and then, as `PythonScanExec`'s stream does.
        Ok(make_cooperative(Box::pin(RecordBatchStreamAdapter::new(
            schema,
            futures::stream::iter(super::measured(batches, baseline)),
        ))))
    }

    fn metrics(&self) -> Option<MetricsSet> {
        Some(self.metrics.clone_inner())
    }
}

/// `batch` with its columns cast to `schema`'s (exposed) types.
fn exposed_batch(schema: &SchemaRef, batch: RecordBatch) -> DFResult<RecordBatch> {
    if batch.num_columns() != schema.fields().len() {
        return Err(DataFusionError::Internal(format!(
            "the dataset returned {} columns, expected {}",
            batch.num_columns(),
            schema.fields().len()
        )));
    }
    let columns = batch
        .columns()
        .iter()
        .zip(schema.fields())
        .map(|(column, field)| super::exposed(Arc::clone(column), field.data_type()))
        .collect::<DFResult<Vec<_>>>()?;
    let options = arrow::array::RecordBatchOptions::new().with_row_count(Some(batch.num_rows()));
    Ok(RecordBatch::try_new_with_options(
        Arc::clone(schema),
        columns,
        &options,
    )?)
}
