//! Owned references to tvm-ffi objects and values, and calls through the C ABI.
//!
//! Everything that touches reference counts or `TVMFFIAny` lives here, so the rest of
//! the crate deals in [`Object`] and [`Value`] and never in raw handles. An `Object` is
//! neither `Send` nor `Sync`: whether a TVM object may cross threads depends on what it
//! is, so the types that hold one (tensor, VM, library) decide, each with its reason.

use std::ffi::CStr;
use std::ptr::NonNull;

use crate::api::{self, GLOBALS};
use crate::error::{Error, Result};
use crate::sys;

/// A strong reference to a tvm-ffi object (function, module, tensor, array, ...).
pub(crate) struct Object(NonNull<sys::TVMFFIObject>);

impl Object {
    /// Takes ownership of one strong reference.
    ///
    /// # Safety
    /// `handle` must be null or a live tvm-ffi object whose reference the caller gives
    /// up, created after the runtime was loaded.
    pub(crate) unsafe fn from_owned(handle: sys::TVMFFIObjectHandle) -> Option<Object> {
        NonNull::new(handle.cast::<sys::TVMFFIObject>()).map(Object)
    }

    pub(crate) fn handle(&self) -> sys::TVMFFIObjectHandle {
        self.0.as_ptr().cast()
    }

    pub(crate) fn type_index(&self) -> i32 {
        // SAFETY: the object is alive while `self` holds a reference.
        unsafe { self.0.as_ref().type_index }
    }

    /// The object as a borrowed call argument.
    pub(crate) fn as_argument(&self) -> sys::TVMFFIAny {
        let mut any = empty_any(self.type_index());
        any.__bindgen_anon_2.v_obj = self.0.as_ptr();
        any
    }

    /// The object as an owned value, for a result slot that takes over its reference.
    pub(crate) fn into_owned_any(self) -> sys::TVMFFIAny {
        let any = self.as_argument();
        std::mem::forget(self);
        any
    }

    /// The address of the payload that follows the object header (a tensor's
    /// `DLTensor`, an error's cell), as `c_api.h` lays objects out.
    pub(crate) fn payload<T>(&self) -> *const T {
        // SAFETY: every tvm-ffi object starts with a TVMFFIObject header; the payload
        // starts right after it (TVMFFITensorGetDLTensorPtr, TVMFFIErrorGetCellPtr).
        unsafe {
            self.0
                .as_ptr()
                .cast::<u8>()
                .add(std::mem::size_of::<sys::TVMFFIObject>())
                .cast::<T>()
        }
    }
}

impl Clone for Object {
    fn clone(&self) -> Self {
        // SAFETY: the object is alive; this adds the reference the clone owns. The
        // runtime is loaded, since the object exists.
        unsafe { (api::loaded().ffi.TVMFFIObjectIncRef)(self.handle()) };
        Object(self.0)
    }
}

impl Drop for Object {
    fn drop(&mut self) {
        // SAFETY: `self` owns one strong reference, released once; the runtime is loaded
        // since the object exists.
        unsafe { (api::loaded().ffi.TVMFFIObjectDecRef)(self.handle()) };
    }
}

fn empty_any(type_index: i32) -> sys::TVMFFIAny {
    sys::TVMFFIAny {
        type_index,
        __bindgen_anon_1: sys::TVMFFIAny__bindgen_ty_1 { zero_padding: 0 },
        __bindgen_anon_2: sys::TVMFFIAny__bindgen_ty_2 { v_int64: 0 },
    }
}

/// Argument builders for the plain values relax-runtime passes to TVM.
pub(crate) mod argument {
    use super::*;

    /// An empty slot (TVM's None).
    pub(crate) fn none() -> sys::TVMFFIAny {
        empty_any(sys::TVMFFITypeIndex_kTVMFFINone)
    }

    pub(crate) fn int(value: i64) -> sys::TVMFFIAny {
        let mut any = empty_any(sys::TVMFFITypeIndex_kTVMFFIInt);
        any.__bindgen_anon_2.v_int64 = value;
        any
    }

    pub(crate) fn bool(value: bool) -> sys::TVMFFIAny {
        let mut any = empty_any(sys::TVMFFITypeIndex_kTVMFFIBool);
        any.__bindgen_anon_2.v_int64 = i64::from(value);
        any
    }

    /// A borrowed C string; it must outlive the call.
    pub(crate) fn str(value: &CStr) -> sys::TVMFFIAny {
        let mut any = empty_any(sys::TVMFFITypeIndex_kTVMFFIRawStr);
        any.__bindgen_anon_2.v_c_str = value.as_ptr();
        any
    }
}

/// A value returned by TVM, owned by relax-runtime.
pub(crate) enum Value {
    None,
    Int(i64),
    Object(Object),
    /// A value of a kind relax-runtime does not use, by its type index.
    Other(i32),
}

impl Value {
    /// Takes ownership of a value TVM returned.
    ///
    /// # Safety
    /// `any` must be an owned value written by a tvm-ffi call.
    unsafe fn from_owned(any: sys::TVMFFIAny) -> Value {
        let index = any.type_index;
        if index >= sys::TVMFFITypeIndex_kTVMFFIStaticObjectBegin {
            // SAFETY: an object-typed value holds an owned object handle (the caller's contract).
            return match unsafe { Object::from_owned(any.__bindgen_anon_2.v_obj.cast()) } {
                Some(object) => Value::Object(object),
                None => Value::None,
            };
        }
        match index {
            sys::TVMFFITypeIndex_kTVMFFINone => Value::None,
            sys::TVMFFITypeIndex_kTVMFFIInt | sys::TVMFFITypeIndex_kTVMFFIBool => {
                // SAFETY: integer and boolean values are stored in v_int64.
                Value::Int(unsafe { any.__bindgen_anon_2.v_int64 })
            }
            other => Value::Other(other),
        }
    }

    /// A short description of the value's kind for error messages.
    pub(crate) fn describe(&self) -> String {
        match self {
            Value::None => "None".to_string(),
            Value::Int(value) => format!("the integer {value}"),
            Value::Object(object) => type_name(object.type_index()),
            Value::Other(index) => type_name(*index),
        }
    }
}

/// TVM's name of a type index (`ffi.Tensor`, `ffi.Array`, ...).
pub(crate) fn type_name(type_index: i32) -> String {
    // SAFETY: TVMFFIGetTypeInfo returns null or a pointer to static type information,
    // whose type key is a valid byte array.
    unsafe {
        let info = (api::loaded().ffi.TVMFFIGetTypeInfo)(type_index);
        match info.as_ref() {
            Some(info) => byte_array_to_string(&info.type_key),
            None => format!("type #{type_index}"),
        }
    }
}

/// Copies a tvm-ffi byte array into a `String` (lossy UTF-8).
///
/// # Safety
/// `bytes` must point to `size` readable bytes (or be empty).
pub(crate) unsafe fn byte_array_to_string(bytes: &sys::TVMFFIByteArray) -> String {
    if bytes.data.is_null() || bytes.size == 0 {
        return String::new();
    }
    // SAFETY: the caller guarantees `size` readable bytes at `data`.
    let slice = unsafe { std::slice::from_raw_parts(bytes.data.cast::<u8>(), bytes.size) };
    String::from_utf8_lossy(slice).into_owned()
}

/// The text of a string value (a raw C string, a small string or a string object),
/// lossily; `None` for a value of another kind.
///
/// # Safety
/// `any` must be a valid value, alive during the call.
pub(crate) unsafe fn string_value(any: &sys::TVMFFIAny) -> Option<String> {
    match any.type_index {
        sys::TVMFFITypeIndex_kTVMFFIRawStr => {
            // SAFETY: a raw string value holds a NUL-terminated C string.
            let text = unsafe { CStr::from_ptr(any.__bindgen_anon_2.v_c_str) };
            Some(text.to_string_lossy().into_owned())
        }
        sys::TVMFFITypeIndex_kTVMFFISmallStr => {
            // SAFETY: a small string keeps its length in small_str_len and its bytes
            // (at most 7) in v_bytes.
            let (length, bytes) = unsafe {
                (
                    any.__bindgen_anon_1.small_str_len,
                    any.__bindgen_anon_2.v_bytes,
                )
            };
            let bytes: Vec<u8> = bytes
                .iter()
                .take(length as usize)
                .map(|&byte| byte as u8)
                .collect();
            Some(String::from_utf8_lossy(&bytes).into_owned())
        }
        sys::TVMFFITypeIndex_kTVMFFIStr => {
            // SAFETY: a string object's payload, after the object header, is its byte
            // array (TVMFFIStrGetByteArrayPtr), valid while the object lives.
            Some(unsafe {
                let cell = any
                    .__bindgen_anon_2
                    .v_obj
                    .cast::<u8>()
                    .add(std::mem::size_of::<sys::TVMFFIObject>())
                    .cast::<sys::TVMFFIByteArray>();
                byte_array_to_string(&*cell)
            })
        }
        _ => None,
    }
}

/// A function to call: an [`Object`] of ours, or one of the runtime's globals.
pub(crate) enum Callee<'a> {
    Object(&'a Object),
    /// An index into [`GLOBALS`].
    Global(usize),
}

/// Index of `ffi.Module.load_from_file.so` in [`GLOBALS`].
pub(crate) const LOAD_SHARED_LIBRARY: usize = 0;
/// Index of `ffi.ModuleGetFunction`.
pub(crate) const MODULE_GET_FUNCTION: usize = 1;
/// Index of `ffi.ArraySize`.
pub(crate) const ARRAY_SIZE: usize = 2;
/// Index of `ffi.ArrayGetItem`.
pub(crate) const ARRAY_GET_ITEM: usize = 3;
/// Index of `ffi.Array` (makes an array of its arguments) in [`GLOBALS`].
pub(crate) const MAKE_ARRAY: usize = 4;
const _: () = assert!(GLOBALS.len() == 5);

/// Calls a tvm-ffi function with borrowed arguments.
///
/// `context` says what relax-runtime was doing, for the error message.
pub(crate) fn call(
    callee: Callee<'_>,
    arguments: &mut [sys::TVMFFIAny],
    context: impl FnOnce() -> String,
) -> Result<Value> {
    let api = api::loaded();
    let handle = match callee {
        Callee::Object(object) => object.handle(),
        Callee::Global(index) => api.globals[index],
    };
    let mut result = empty_any(sys::TVMFFITypeIndex_kTVMFFINone);
    let count = i32::try_from(arguments.len()).expect("argument count fits in i32");
    // SAFETY: the function object is alive (ours, or a global never released), the
    // arguments are valid borrowed values that outlive the call, and `result` receives
    // an owned value.
    let status =
        unsafe { (api.ffi.TVMFFIFunctionCall)(handle, arguments.as_mut_ptr(), count, &mut result) };
    if status != 0 {
        return Err(take_raised_error(context()));
    }
    // SAFETY: on success `result` holds an owned value.
    Ok(unsafe { Value::from_owned(result) })
}

/// Looks up a method of a module (`vm_load_executable`, a Relax function, ...).
pub(crate) fn module_function(module: &Object, name: &str) -> Result<Option<Object>> {
    let name_c = std::ffi::CString::new(name).map_err(|_| Error::InvalidTensor {
        message: format!("the function name {name:?} contains a NUL byte"),
    })?;
    let mut arguments = [
        module.as_argument(),
        argument::str(&name_c),
        argument::bool(true),
    ];
    match call(Callee::Global(MODULE_GET_FUNCTION), &mut arguments, || {
        format!("looking up function `{name}`")
    })? {
        Value::Object(function)
            if function.type_index() == sys::TVMFFITypeIndex_kTVMFFIFunction =>
        {
            Ok(Some(function))
        }
        _ => Ok(None),
    }
}

/// The items of a tvm-ffi array (a Relax tuple).
pub(crate) fn array_items(array: &Object) -> Result<Vec<Value>> {
    let context = || "reading a tuple returned by a model".to_string();
    let size = match call(
        Callee::Global(ARRAY_SIZE),
        &mut [array.as_argument()],
        context,
    )? {
        Value::Int(size) => size,
        other => {
            return Err(Error::Tvm {
                kind: "TypeError".to_string(),
                message: format!("ffi.ArraySize returned {}", other.describe()),
                context: context(),
            })
        }
    };
    (0..size)
        .map(|index| {
            let mut arguments = [array.as_argument(), argument::int(index)];
            call(Callee::Global(ARRAY_GET_ITEM), &mut arguments, context)
        })
        .collect()
}

/// Turns the error TVM raised on this thread into an [`Error::Tvm`].
pub(crate) fn take_raised_error(context: String) -> Error {
    let api = api::loaded();
    let mut handle: sys::TVMFFIObjectHandle = std::ptr::null_mut();
    // SAFETY: moves this thread's raised error (if any) into `handle`, which we then own.
    unsafe { (api.ffi.TVMFFIErrorMoveFromRaised)(&mut handle) };
    // SAFETY: `handle` is null or an owned error object.
    let Some(error) = (unsafe { Object::from_owned(handle) }) else {
        return Error::Tvm {
            kind: "UnknownError".to_string(),
            message: "TVM reported a failure but raised no error".to_string(),
            context,
        };
    };
    let cell = error.payload::<sys::TVMFFIErrorCell>();
    // SAFETY: an error object's payload is its TVMFFIErrorCell, whose kind and message
    // are valid byte arrays while the error lives.
    let (kind, message) = unsafe {
        (
            byte_array_to_string(&(*cell).kind),
            byte_array_to_string(&(*cell).message),
        )
    };
    Error::Tvm {
        kind,
        message,
        context,
    }
}
