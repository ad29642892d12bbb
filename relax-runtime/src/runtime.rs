//! Loading TVM's runtime, once per process, with relax-runtime's kernels registered
//! before any model loads (so that `api` needs nothing of the kernels).

use crate::api::{self, Api};
use crate::error::Result;
use crate::kernels;
use crate::locate::Hints;

/// The loaded runtime (loading it and registering the kernels on first use).
pub(crate) fn load(hints: &Hints<'_>) -> Result<&'static Api> {
    api::get_or_load(hints, kernels::register)
}
