//! Owned references to tvm-ffi objects and values, and calls through the C ABI.
//!
//! Everything that touches reference counts or `TVMFFIAny` lives here, so the rest of
//! the crate deals in [`Object`] and [`Value`] and never in raw handles.

use std::ffi::CStr;
use std::ptr::NonNull;

use crate::error::{Error, Result};
use crate::library::Runtime;
use crate::sys;

/// A strong reference to a tvm-ffi object (function, module, tensor, array, ...).
pub(crate) struct Object(NonNull<sys::TVMFFIObject>);

// tvm-ffi reference counts are atomic, and relax-runtime only reads through shared objects.
unsafe impl Send for Object {}
unsafe impl Sync for Object {}

impl Object {
    /// Takes ownership of one strong reference.
    ///
    /// # Safety
    /// `handle` must be a live tvm-ffi object whose reference the caller gives up.
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
}

impl Clone for Object {
    fn clone(&self) -> Self {
        // SAFETY: the object is alive; this adds the reference the clone owns.
        unsafe { (Runtime::loaded().api.TVMFFIObjectIncRef)(self.handle()) };
        Object(self.0)
    }
}

impl Drop for Object {
    fn drop(&mut self) {
        // SAFETY: `self` owns one strong reference; an Object only exists once the runtime is loaded.
        unsafe { (Runtime::loaded().api.TVMFFIObjectDecRef)(self.handle()) };
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
            return match Object::from_owned(any.__bindgen_anon_2.v_obj.cast()) {
                Some(object) => Value::Object(object),
                None => Value::None,
            };
        }
        match index {
            sys::TVMFFITypeIndex_kTVMFFINone => Value::None,
            sys::TVMFFITypeIndex_kTVMFFIInt | sys::TVMFFITypeIndex_kTVMFFIBool => {
                Value::Int(any.__bindgen_anon_2.v_int64)
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
    // SAFETY: TVMFFIGetTypeInfo returns null or a pointer to static type information.
    unsafe {
        let info = (Runtime::loaded().api.TVMFFIGetTypeInfo)(type_index);
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
    let slice = std::slice::from_raw_parts(bytes.data.cast::<u8>(), bytes.size);
    String::from_utf8_lossy(slice).into_owned()
}

/// Calls a tvm-ffi function object with borrowed arguments.
///
/// `context` says what relax-runtime was doing, for the error message.
pub(crate) fn call(
    function: &Object,
    arguments: &mut [sys::TVMFFIAny],
    context: impl FnOnce() -> String,
) -> Result<Value> {
    let runtime = Runtime::loaded();
    let mut result = empty_any(sys::TVMFFITypeIndex_kTVMFFINone);
    let count = i32::try_from(arguments.len()).expect("argument count fits in i32");
    // SAFETY: the function object is alive, the arguments are valid borrowed values
    // that outlive the call, and `result` receives an owned value.
    let status = unsafe {
        (runtime.api.TVMFFIFunctionCall)(
            function.handle(),
            arguments.as_mut_ptr(),
            count,
            &mut result,
        )
    };
    if status != 0 {
        return Err(take_raised_error(context()));
    }
    // SAFETY: on success `result` holds an owned value.
    Ok(unsafe { Value::from_owned(result) })
}

/// Turns the error TVM raised on this thread into an [`Error::Tvm`].
pub(crate) fn take_raised_error(context: String) -> Error {
    let runtime = Runtime::loaded();
    let mut handle: sys::TVMFFIObjectHandle = std::ptr::null_mut();
    // SAFETY: moves this thread's raised error (if any) into `handle`, which we then own.
    unsafe { (runtime.api.TVMFFIErrorMoveFromRaised)(&mut handle) };
    // SAFETY: `handle` is null or an owned error object.
    let Some(error) = (unsafe { Object::from_owned(handle) }) else {
        return Error::Tvm {
            kind: "UnknownError".to_string(),
            message: "TVM reported a failure but raised no error".to_string(),
            context,
        };
    };
    // SAFETY: an error object's cell follows its object header (TVMFFIErrorGetCellPtr in c_api.h).
    let (kind, message) = unsafe {
        let cell = error
            .handle()
            .cast::<u8>()
            .add(std::mem::size_of::<sys::TVMFFIObject>())
            .cast::<sys::TVMFFIErrorCell>();
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
