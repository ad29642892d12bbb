//! Registering a native function as a global of the loaded runtime, by which compiled
//! models call it (`R.call_packed` / `R.call_dps_packed` with its name).

use std::ffi::c_void;
use std::panic::{catch_unwind, AssertUnwindSafe};

use crate::api::Api;
use crate::object::Object;
use crate::sys;

/// A function with tvm-ffi's safe-call signature.
pub(crate) type SafeCall = unsafe extern "C" fn(
    handle: *mut c_void,
    args: *const sys::TVMFFIAny,
    count: i32,
    result: *mut sys::TVMFFIAny,
) -> i32;

/// Registers `call` as the global function `name`, `handle` passed to every call.
///
/// # Safety
/// `handle` must stay valid for the process's life (no deleter is registered), and
/// `call` must treat it as what the caller passed.
pub(crate) unsafe fn set_global(
    api: &Api,
    name: &str,
    handle: *mut c_void,
    call: SafeCall,
) -> Result<(), String> {
    let mut function: sys::TVMFFIObjectHandle = std::ptr::null_mut();
    // SAFETY: `call` has TVM's safe-call signature; the handle outlives the function
    // (the caller's contract); `function` receives an owned function object.
    let status = unsafe { (api.ffi.TVMFFIFunctionCreate)(handle, Some(call), None, &mut function) };
    if status != 0 || function.is_null() {
        return Err(format!("TVMFFIFunctionCreate failed for {name}"));
    }
    let bytes = sys::TVMFFIByteArray {
        data: name.as_ptr().cast(),
        size: name.len(),
    };
    // SAFETY: `bytes` describes a live string; the registry keeps its own reference to
    // `function`; ours is kept for the process's life (never released).
    let status = unsafe { (api.ffi.TVMFFIFunctionSetGlobal)(&bytes, function, 1) };
    if status != 0 {
        return Err(format!("TVMFFIFunctionSetGlobal failed for {name}"));
    }
    Ok(())
}

/// The arguments of a safe call, as a slice.
///
/// # Safety
/// `args` must point to `count` valid values that outlive `'a` (as TVM passes them), or
/// `count` must not be positive.
pub(crate) unsafe fn arguments<'a>(
    args: *const sys::TVMFFIAny,
    count: i32,
) -> &'a [sys::TVMFFIAny] {
    if count <= 0 || args.is_null() {
        &[]
    } else {
        // SAFETY: the caller's contract.
        unsafe { std::slice::from_raw_parts(args, count as usize) }
    }
}

/// The body of a safe call that returns an object: runs `body` on the call's
/// arguments, writes its object to `result` and returns 0, or raises its error (or a
/// panic, as "`name` panicked") as a ValueError and returns -1.
///
/// # Safety
/// `args` holds `count` valid values that outlive the call, and `result` is a slot to
/// write an owned value to (TVM's safe-call contract).
pub(crate) unsafe fn answer(
    name: &str,
    args: *const sys::TVMFFIAny,
    count: i32,
    result: *mut sys::TVMFFIAny,
    body: impl FnOnce(&[sys::TVMFFIAny]) -> Result<Object, String>,
) -> i32 {
    // SAFETY: the caller's contract.
    let args = unsafe { arguments(args, count) };
    let message = match catch_unwind(AssertUnwindSafe(|| body(args))) {
        Ok(Ok(object)) => {
            // SAFETY: the caller's contract: TVM takes the reference given.
            unsafe { *result = object.into_owned_any() };
            return 0;
        }
        Ok(Err(message)) => message,
        Err(_) => format!("{name} panicked"),
    };
    raise(crate::api::loaded(), "ValueError", &message);
    -1
}

/// Raises a TVM error of `kind` with `message` on this thread, for a safe call to
/// return -1 after.
pub(crate) fn raise(api: &Api, kind: &str, message: &str) {
    let kind = std::ffi::CString::new(kind).expect("error kinds have no NUL");
    let message = std::ffi::CString::new(message.replace('\0', " ")).expect("NULs replaced");
    // SAFETY: both are valid C strings; TVM copies them into the raised error.
    unsafe { (api.ffi.TVMFFIErrorSetRaisedFromCStr)(kind.as_ptr(), message.as_ptr()) };
}

/// Whether a global function named `name` is registered (TVM's builtins, relax-runtime's).
pub(crate) fn is_global(api: &Api, name: &str) -> bool {
    global(api, name).is_some()
}

/// The global function named `name`, if one is registered.
pub(crate) fn global(api: &Api, name: &str) -> Option<Object> {
    let bytes = sys::TVMFFIByteArray {
        data: name.as_ptr().cast(),
        size: name.len(),
    };
    let mut handle: sys::TVMFFIObjectHandle = std::ptr::null_mut();
    // SAFETY: `bytes` describes a live string; `handle` receives an owned function or null.
    let status = unsafe { (api.ffi.TVMFFIFunctionGetGlobal)(&bytes, &mut handle) };
    // SAFETY: `handle` is null or the owned reference the lookup returned, released when
    // the `Object` drops.
    let function = unsafe { Object::from_owned(handle) };
    function.filter(|_| status == 0)
}
