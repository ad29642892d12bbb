//! `relax_runtime.unbuilt_branch`: the body of an `If` branch relax-build could not
//! build for the input dims the model was built for (its driver's
//! `onnx_ops/control_flow.py`): taking the branch at run time fails with its message,
//! as onnxruntime fails when it runs such a branch.
//!
//! | name | arguments | returns |
//! |---|---|---|
//! | `relax_runtime.unbuilt_branch` | `message` (a string) | never: an error with the message |

use std::ffi::c_void;

use crate::api::Api;
use crate::globals;
use crate::object::{self, Object};
use crate::sys;

/// The global name the driver's branches call.
pub(crate) const UNBUILT_BRANCH: &str = "relax_runtime.unbuilt_branch";

/// Registers [`UNBUILT_BRANCH`].
pub(crate) fn register(api: &Api) -> Result<(), String> {
    // SAFETY: `fail` ignores its handle, so a null one stays valid.
    unsafe { globals::set_global(api, UNBUILT_BRANCH, std::ptr::null_mut(), fail) }
}

/// The safe call of [`UNBUILT_BRANCH`].
unsafe extern "C" fn fail(
    _handle: *mut c_void,
    args: *const sys::TVMFFIAny,
    count: i32,
    result: *mut sys::TVMFFIAny,
) -> i32 {
    // SAFETY: TVM's safe-call contract, passed on.
    unsafe { globals::answer(UNBUILT_BRANCH, args, count, result, message_error) }
}

/// The error the branch's message gives (never a value).
fn message_error(args: &[sys::TVMFFIAny]) -> Result<Object, String> {
    let message = args.first().and_then(|first| {
        // SAFETY: TVM passes valid values, alive during the call.
        unsafe { object::string_value(first) }
    });
    Err(message.unwrap_or_else(|| {
        format!("{UNBUILT_BRANCH}: the model took a branch relax-build could not build")
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw_string(text: &std::ffi::CStr) -> sys::TVMFFIAny {
        // SAFETY: an all-zero TVMFFIAny is a valid value (type index 0, None); the fields
        // set next make it a raw string pointing at `text`, which outlives the call.
        let mut any: sys::TVMFFIAny = unsafe { std::mem::zeroed() };
        any.type_index = sys::TVMFFITypeIndex_kTVMFFIRawStr;
        any.__bindgen_anon_2.v_c_str = text.as_ptr();
        any
    }

    #[test]
    fn the_branch_fails_with_its_message() {
        let message = c"the else branch of If node `If_0` was not built";
        let error = message_error(&[raw_string(message)]).err().unwrap();
        assert_eq!(error, "the else branch of If node `If_0` was not built");
    }

    #[test]
    fn without_a_message_it_still_fails_and_names_itself() {
        let error = message_error(&[]).err().unwrap();
        assert!(error.contains(UNBUILT_BRANCH), "{error}");
    }
}
