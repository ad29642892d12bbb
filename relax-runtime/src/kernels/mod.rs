//! relax-kernels' kernels as TVM globals: models compiled by relax-build call them
//! (`R.call_dps_packed("relax_runtime.<kernel>", ...)`) instead of TVM's untuned loops.
//!
//! Every entry of [`relax_kernels::KERNELS`] is registered under its name
//! (`TVMFFIFunctionCreate` + `TVMFFIFunctionSetGlobal`) when the TVM runtime is loaded,
//! before any model. A call reads and checks TVM's arguments ([`arguments`]: float32,
//! on the CPU, compact, aligned), runs the kernel on the calling thread's pool
//! ([`launch`]) and turns its error or panic into a TVM error. The kernels, their
//! arguments and their weight layouts are documented in relax-kernels.

mod arguments;
mod launch;

pub(crate) use arguments::{compact_cpu_shape, dl_tensor};

use std::ffi::c_void;
use std::panic::{catch_unwind, AssertUnwindSafe};

use relax_kernels::{Arguments, Kernel, KERNELS};

use crate::api::Api;
use crate::globals;
use crate::sys;

/// The `safe_call` of every kernel: `handle` points to the kernel's entry of [`KERNELS`].
unsafe extern "C" fn call_kernel(
    handle: *mut c_void,
    args: *const sys::TVMFFIAny,
    count: i32,
    _result: *mut sys::TVMFFIAny,
) -> i32 {
    // SAFETY: `register` passed a pointer into the static KERNELS table as the handle
    // (never null: tvm-ffi passes its own object instead of a null handle).
    let (name, kernel) = unsafe { *handle.cast::<(&'static str, Kernel)>() };
    // SAFETY: TVM passes `count` valid argument values that outlive the call.
    let args = unsafe { globals::arguments(args, count) };
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: TVM's arguments are valid for the call, and its destination-passing
        // outputs are buffers of their own (checked against the inputs by `read`).
        let values = unsafe { arguments::read(name, args) }?;
        kernel(&Arguments::new(name, &values, launch::on_pool))
    }));
    let (kind, message) = match outcome {
        Ok(Ok(())) => return 0,
        Ok(Err(message)) => ("ValueError", message),
        Err(_) => ("InternalError", format!("{name} panicked")),
    };
    globals::raise(crate::api::loaded(), kind, &message);
    -1
}

/// Registers every kernel as a global function of the loaded runtime.
pub(crate) fn register(api: &Api) -> Result<(), String> {
    for entry in KERNELS {
        let handle = (entry as *const (&str, Kernel)).cast_mut().cast::<c_void>();
        // SAFETY: the handle points into a static table, as `call_kernel` reads it.
        unsafe { globals::set_global(api, entry.0, handle, call_kernel)? };
    }
    Ok(())
}
