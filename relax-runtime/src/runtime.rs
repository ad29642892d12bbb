//! Loading TVM's runtime, once per process, with relax-runtime's parallel launch,
//! kernels, output allocator and unbuilt-branch error registered before any model loads (so that `api` needs
//! nothing of them).

use crate::api::{self, Api};
use crate::backend;
use crate::error::Result;
use crate::kernels;
use crate::locate::Hints;
use crate::outputs;
use crate::set_ops;
use crate::unbuilt_branch;

/// The loaded runtime (loading it and registering relax-runtime's globals on first use).
pub(crate) fn load(hints: &Hints<'_>) -> Result<&'static Api> {
    api::get_or_load(hints, register)
}

fn register(api: &Api) -> std::result::Result<(), String> {
    backend::register(api)?;
    kernels::register(api)?;
    set_ops::register(api)?;
    unbuilt_branch::register(api)?;
    outputs::register(api)
}
