//! `relax_runtime.output`: the tensors a model returns, allocated by relax-runtime.
//!
//! TVM's VM allocates a returned tensor with two packed calls from its interpreter
//! (`vm.builtin.alloc_storage`, then `alloc_tensor` in that storage, from its pooled
//! allocator behind a mutex) and a third that drops the storage's register: 0.9-1.1 µs a
//! call. relax-build's driver (outputs.py) rewrites the allocation of each tensor a public
//! function returns on a CPU target, of static shape and at most 16 KiB (a fresh buffer
//! costs in proportion to its size; larger ones stay in TVM's pool, which reuses them),
//! into one call of this function, which allocates a
//! zero-filled, 64-byte aligned host buffer and hands it to TVM as a DLPack tensor (as
//! relax-runtime hands over the inputs made in Rust): a model adding two [1, 4] tensors
//! took 1.25-1.30 µs a call instead of 1.50-1.55. Everything else, the intermediate
//! tensors above all, stays in TVM's planned and pooled memory.
//!
//! | name | arguments | returns |
//! |---|---|---|
//! | `relax_runtime.output` | `shape` (a `ffi.Shape`), `dtype` | a tensor of that shape, zeros |

use std::ffi::c_void;
use std::panic::{catch_unwind, AssertUnwindSafe};

use crate::api::Api;
use crate::dtype::DType;
use crate::globals;
use crate::object::Object;
use crate::sys;
use crate::tensor::zeroed_tvm_tensor;

/// The global name the driver's rewrite calls.
pub(crate) const OUTPUT: &str = "relax_runtime.output";

/// Registers [`OUTPUT`].
pub(crate) fn register(api: &Api) -> Result<(), String> {
    // SAFETY: `allocate` ignores its handle, so a null one stays valid.
    unsafe { globals::set_global(api, OUTPUT, std::ptr::null_mut(), allocate) }
}

/// The safe call of [`OUTPUT`].
unsafe extern "C" fn allocate(
    _handle: *mut c_void,
    args: *const sys::TVMFFIAny,
    count: i32,
    result: *mut sys::TVMFFIAny,
) -> i32 {
    // SAFETY: TVM passes `count` valid argument values that outlive the call.
    let args = unsafe { globals::arguments(args, count) };
    let outcome = catch_unwind(AssertUnwindSafe(|| output_tensor(args)));
    let message = match outcome {
        Ok(Ok(tensor)) => {
            // SAFETY: TVM passes a result slot to write; it takes the reference given.
            unsafe { *result = tensor.into_owned_any() };
            return 0;
        }
        Ok(Err(message)) => message,
        Err(_) => format!("{OUTPUT} panicked"),
    };
    globals::raise(crate::api::loaded(), "ValueError", &message);
    -1
}

/// The tensor `args` (a shape and a dtype) ask for.
fn output_tensor(args: &[sys::TVMFFIAny]) -> Result<Object, String> {
    let [shape, dtype] = args else {
        return Err(format!(
            "{OUTPUT} takes a shape and a dtype, but was passed {} arguments",
            args.len()
        ));
    };
    if shape.type_index != sys::TVMFFITypeIndex_kTVMFFIShape {
        return Err(format!(
            "{OUTPUT}: its first argument must be a shape, but is of type index {}",
            shape.type_index
        ));
    }
    if dtype.type_index != sys::TVMFFITypeIndex_kTVMFFIDataType {
        return Err(format!(
            "{OUTPUT}: its second argument must be a dtype, but is of type index {}",
            dtype.type_index
        ));
    }
    // SAFETY: a shape-typed value holds a live shape object, borrowed for the call; its
    // payload is a TVMFFIShapeCell whose `size` sizes follow at `data`, alive with it.
    let sizes = unsafe {
        let object = shape.__bindgen_anon_2.v_obj;
        let cell = &*object
            .cast::<u8>()
            .add(std::mem::size_of::<sys::TVMFFIObject>())
            .cast::<sys::TVMFFIShapeCell>();
        if cell.size == 0 || cell.data.is_null() {
            &[][..]
        } else {
            std::slice::from_raw_parts(cell.data, cell.size)
        }
    };
    // SAFETY: a dtype-typed value holds a DLDataType.
    let dtype = DType::from_dlpack(unsafe { dtype.__bindgen_anon_2.v_dtype });
    zeroed_tvm_tensor(dtype, sizes).map_err(|error| format!("{OUTPUT}: {error}"))
}
