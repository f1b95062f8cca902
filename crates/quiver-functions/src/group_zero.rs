//! An ungrouped [`Accumulator`](datafusion::logical_expr::Accumulator) built on a grouped one:
//! every row goes to group 0.

use arrow::array::ArrayRef;
use datafusion::common::Result;
use datafusion::logical_expr::GroupsAccumulator;

/// The group numbers (all 0) an ungrouped accumulator passes to its grouped one, kept between
/// batches so that a batch allocates nothing.
#[derive(Debug, Default)]
pub(crate) struct GroupZero {
    zeros: Vec<usize>,
}

impl GroupZero {
    fn zeros(&mut self, rows: usize) -> &[usize] {
        self.zeros.clear();
        self.zeros.resize(rows, 0);
        &self.zeros
    }

    /// `inner.update_batch` with every row of `values` in group 0.
    pub(crate) fn update(
        &mut self,
        inner: &mut dyn GroupsAccumulator,
        values: &[ArrayRef],
    ) -> Result<()> {
        let rows = values.first().map_or(0, |a| a.len());
        inner.update_batch(values, self.zeros(rows), None, 1)
    }

    /// `inner.merge_batch` with every state row of `states` in group 0.
    pub(crate) fn merge(
        &mut self,
        inner: &mut dyn GroupsAccumulator,
        states: &[ArrayRef],
    ) -> Result<()> {
        let rows = states.first().map_or(0, |a| a.len());
        inner.merge_batch(states, self.zeros(rows), 1)
    }

    pub(crate) fn size(&self) -> usize {
        self.zeros.capacity() * std::mem::size_of::<usize>()
    }
}
