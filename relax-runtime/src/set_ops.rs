//! `relax.run.nonzero` and `relax.run.unique`: the operators whose output shapes depend
//! on the values, which TVM's legalization leaves to global functions of these names
//! (`R.call_pure_packed`). TVM registers them in Python, with numpy, so a model using
//! them (ONNX's `NonZero`, `Compress`, `Unique`, a `Squeeze` of axes known only at run
//! time) would not run without Python; relax-runtime registers them natively.
//!
//! | name | arguments | returns |
//! |---|---|---|
//! | `relax.run.nonzero` | `x` | int64 `[rank (1 for a scalar), count]`: the indices of x's non-zero elements, in row-major order |
//! | `relax.run.unique` | `x, sorted, return_index, return_inverse, return_counts[, axis]` (no axis, or None) | the unique elements (slices along `axis`; of the flattened x without one), then, as asked, the int64 index of each one's first occurrence, the index of each element's (slice's) unique value, and the counts: a tensor, or a tuple of them |
//!
//! As numpy's `unique` (TVM's Python function): sorted in ascending order, or in the
//! order of first occurrence when `sorted` is false; `-0.0` equals `0.0`, and NaNs sort
//! last, all one value.

use std::cmp::Ordering;
use std::ffi::c_void;

use crate::api::Api;
use crate::dtype::DType;
use crate::globals;
use crate::kernels::{compact_cpu_shape, dl_tensor};
use crate::object::{self, Callee, Object, Value};
use crate::outputs::tvm_tensor_holding;
use crate::sys;

const NONZERO: &str = "relax.run.nonzero";
const UNIQUE: &str = "relax.run.unique";

/// Registers [`NONZERO`] and [`UNIQUE`].
pub(crate) fn register(api: &Api) -> Result<(), String> {
    // SAFETY: both functions ignore their handle, so a null one stays valid.
    unsafe {
        globals::set_global(api, NONZERO, std::ptr::null_mut(), nonzero_call)?;
        globals::set_global(api, UNIQUE, std::ptr::null_mut(), unique_call)
    }
}

unsafe extern "C" fn nonzero_call(
    _handle: *mut c_void,
    args: *const sys::TVMFFIAny,
    count: i32,
    result: *mut sys::TVMFFIAny,
) -> i32 {
    let body =
        |args: &[sys::TVMFFIAny]| nonzero(args).map_err(|error| format!("{NONZERO}: {error}"));
    // SAFETY: TVM's safe-call contract, passed on.
    unsafe { globals::answer(NONZERO, args, count, result, body) }
}

unsafe extern "C" fn unique_call(
    _handle: *mut c_void,
    args: *const sys::TVMFFIAny,
    count: i32,
    result: *mut sys::TVMFFIAny,
) -> i32 {
    let body = |args: &[sys::TVMFFIAny]| unique(args).map_err(|error| format!("{UNIQUE}: {error}"));
    // SAFETY: TVM's safe-call contract, passed on.
    unsafe { globals::answer(UNIQUE, args, count, result, body) }
}

/// A compact CPU tensor argument, borrowed for the call.
struct Input<'a> {
    dtype: DType,
    shape: &'a [i64],
    bytes: &'a [u8],
}

impl Input<'_> {
    /// Element `index` as a number.
    fn number(&self, index: usize) -> Number {
        let size = self.dtype.size_in_bytes();
        let mut word = [0u8; 8];
        word[..size].copy_from_slice(&self.bytes[index * size..(index + 1) * size]);
        let bits = u64::from_le_bytes(word);
        let sign_extended =
            |bits_used: u32| ((bits << (64 - bits_used)) as i64) >> (64 - bits_used);
        match (self.dtype.code as u32, self.dtype.bits) {
            (sys::DLDataTypeCode_kDLInt, width) => Number::Int(sign_extended(width.into()).into()),
            (sys::DLDataTypeCode_kDLFloat, 16) => Number::Float(f16_value(bits as u16)),
            (sys::DLDataTypeCode_kDLFloat, 32) => Number::Float(f32::from_bits(bits as u32).into()),
            (sys::DLDataTypeCode_kDLFloat, _) => Number::Float(f64::from_bits(bits)),
            (sys::DLDataTypeCode_kDLBfloat, _) => {
                Number::Float(f32::from_bits((bits as u32) << 16).into())
            }
            // uint and bool.
            _ => Number::Int(bits.into()),
        }
    }
}

/// An element's value: integers (and bools) exactly, floats as f64.
#[derive(Clone, Copy)]
enum Number {
    Int(i128),
    Float(f64),
}

impl Number {
    fn is_zero(self) -> bool {
        match self {
            Number::Int(value) => value == 0,
            Number::Float(value) => value == 0.0,
        }
    }

    /// numpy's order: ascending, `-0.0` equal to `0.0`, NaNs last and equal.
    fn order(self, other: Number) -> Ordering {
        match (self, other) {
            (Number::Int(a), Number::Int(b)) => a.cmp(&b),
            (Number::Float(a), Number::Float(b)) => match (a.is_nan(), b.is_nan()) {
                (false, false) => a.partial_cmp(&b).unwrap_or(Ordering::Equal),
                (nan_a, nan_b) => nan_a.cmp(&nan_b),
            },
            // One tensor has one dtype.
            _ => Ordering::Equal,
        }
    }
}

fn f16_value(bits: u16) -> f64 {
    let sign = if bits >> 15 == 1 { -1.0 } else { 1.0 };
    let exponent = i32::from((bits >> 10) & 0x1f);
    let fraction = f64::from(bits & 0x3ff);
    match exponent {
        0 => sign * fraction * 2f64.powi(-24),
        31 if fraction == 0.0 => sign * f64::INFINITY,
        31 => f64::NAN,
        _ => sign * (1.0 + fraction / 1024.0) * 2f64.powi(exponent - 15),
    }
}

/// The tensor argument `index`: a compact CPU tensor of a dtype with numeric values.
fn input(args: &[sys::TVMFFIAny], index: usize) -> Result<Input<'_>, String> {
    let any = args
        .get(index)
        .ok_or_else(|| format!("argument {index} is missing"))?;
    let tensor = dl_tensor(any)
        .filter(|tensor| !tensor.is_null())
        .ok_or_else(|| format!("argument {index} is not a tensor"))?;
    // SAFETY: TVM passes a valid DLTensor that outlives the call.
    let tensor = unsafe { &*tensor };
    let dtype = DType::from_dlpack(tensor.dtype);
    let known = [
        sys::DLDataTypeCode_kDLInt,
        sys::DLDataTypeCode_kDLUInt,
        sys::DLDataTypeCode_kDLBool,
    ]
    .contains(&u32::from(dtype.code))
        || (u32::from(dtype.code) == sys::DLDataTypeCode_kDLFloat && dtype.bits >= 16)
        || dtype == DType::BF16;
    if !known || dtype.lanes != 1 || dtype.bits > 64 {
        return Err(format!("tensors of {dtype} are not supported"));
    }
    let shape = compact_cpu_shape(tensor).map_err(|what| format!("argument {index} {what}"))?;
    let count = shape.iter().try_fold(1usize, |count, &dim| {
        count.checked_mul(usize::try_from(dim).ok()?)
    });
    let bytes = count
        .and_then(|count| count.checked_mul(dtype.size_in_bytes()))
        .ok_or_else(|| format!("the tensor's shape {shape:?} is invalid"))?;
    let bytes = if bytes == 0 {
        &[][..]
    } else if tensor.data.is_null() {
        return Err("the tensor has no data".to_string());
    } else {
        // SAFETY: a compact CPU tensor's `bytes` bytes start at data + byte_offset and
        // stay valid for the call; u8 needs no alignment.
        unsafe {
            std::slice::from_raw_parts(
                tensor.data.cast::<u8>().add(tensor.byte_offset as usize),
                bytes,
            )
        }
    };
    Ok(Input {
        dtype,
        shape,
        bytes,
    })
}

/// An integer or bool argument; None for a `None` one.
fn int_argument(args: &[sys::TVMFFIAny], index: usize) -> Result<Option<i64>, String> {
    let any = args
        .get(index)
        .ok_or_else(|| format!("argument {index} is missing"))?;
    match any.type_index {
        sys::TVMFFITypeIndex_kTVMFFINone => Ok(None),
        sys::TVMFFITypeIndex_kTVMFFIInt | sys::TVMFFITypeIndex_kTVMFFIBool => {
            // SAFETY: integer and bool arguments are stored in v_int64.
            Ok(Some(unsafe { any.__bindgen_anon_2.v_int64 }))
        }
        other => Err(format!(
            "argument {index} must be an integer, not {}",
            object::type_name(other)
        )),
    }
}

fn int64_tensor(shape: &[i64], values: &[i64]) -> Result<Object, String> {
    let bytes: Vec<u8> = values
        .iter()
        .flat_map(|value| value.to_le_bytes())
        .collect();
    tvm_tensor_holding(DType::I64, shape, &bytes).map_err(|error| error.to_string())
}

fn nonzero(args: &[sys::TVMFFIAny]) -> Result<Object, String> {
    if args.len() != 1 {
        return Err(format!(
            "takes one tensor, but was passed {} arguments",
            args.len()
        ));
    }
    let x = input(args, 0)?;
    let count = x.bytes.len() / x.dtype.size_in_bytes();
    let dims: Vec<usize> = if x.shape.is_empty() {
        vec![1]
    } else {
        x.shape.iter().map(|&dim| dim as usize).collect()
    };
    let found: Vec<usize> = (0..count)
        .filter(|&index| !x.number(index).is_zero())
        .collect();
    int64_tensor(
        &[dims.len() as i64, found.len() as i64],
        &coordinates(&dims, &found),
    )
}

/// The coordinates of the elements at row-major offsets `found` in a tensor of `dims`:
/// row d holds each one's index along dim d.
fn coordinates(dims: &[usize], found: &[usize]) -> Vec<i64> {
    let mut indices = vec![0i64; dims.len() * found.len()];
    for (column, &flat) in found.iter().enumerate() {
        let mut rest = flat;
        for (row, &dim) in dims.iter().enumerate().rev() {
            indices[row * found.len() + column] = (rest % dim) as i64;
            rest /= dim;
        }
    }
    indices
}

/// The unique values' groups: for each, in output order, the first slice holding it and
/// how many do; and for each slice, its group's position.
struct Groups {
    first: Vec<usize>,
    counts: Vec<i64>,
    inverse: Vec<i64>,
}

/// Groups `slices` slices (compared by `order`) as numpy's `unique` does.
fn groups(slices: usize, sorted: bool, order: impl Fn(usize, usize) -> Ordering) -> Groups {
    let mut by_value: Vec<usize> = (0..slices).collect();
    // Stable: the first of equal slices is the first occurrence.
    by_value.sort_by(|&a, &b| order(a, b));
    let mut first = Vec::new();
    let mut counts = Vec::new();
    let mut group_of = vec![0usize; slices];
    for (position, &slice) in by_value.iter().enumerate() {
        if position == 0 || order(by_value[position - 1], slice) != Ordering::Equal {
            first.push(slice);
            counts.push(0);
        }
        group_of[slice] = first.len() - 1;
        *counts.last_mut().expect("a group was pushed") += 1;
    }
    // Group positions in output order: ascending value, or first occurrence.
    let mut output_order: Vec<usize> = (0..first.len()).collect();
    if !sorted {
        output_order.sort_by_key(|&group| first[group]);
    }
    let mut position_of = vec![0i64; first.len()];
    for (position, &group) in output_order.iter().enumerate() {
        position_of[group] = position as i64;
    }
    Groups {
        first: output_order.iter().map(|&group| first[group]).collect(),
        counts: output_order.iter().map(|&group| counts[group]).collect(),
        inverse: group_of.iter().map(|&group| position_of[group]).collect(),
    }
}

/// How `unique` compares x: as `[outer, slices, inner]` around the axis (its index,
/// checked against x's rank), or element by element without one.
#[derive(Debug, PartialEq)]
struct Slicing {
    axis: Option<usize>,
    outer: usize,
    slices: usize,
    inner: usize,
}

fn slicing(shape: &[i64], axis: Option<i64>) -> Result<Slicing, String> {
    let dims: Vec<usize> = shape.iter().map(|&dim| dim as usize).collect();
    let Some(axis) = axis else {
        return Ok(Slicing {
            axis: None,
            outer: 1,
            slices: dims.iter().product(),
            inner: 1,
        });
    };
    let rank = dims.len() as i64;
    let index = usize::try_from(if axis < 0 { axis + rank } else { axis })
        .ok()
        .filter(|&index| index < dims.len())
        .ok_or_else(|| format!("axis {axis} is out of range for x of shape {shape:?}"))?;
    Ok(Slicing {
        axis: Some(index),
        outer: dims[..index].iter().product(),
        slices: dims[index],
        inner: dims[index + 1..].iter().product(),
    })
}

fn unique(args: &[sys::TVMFFIAny]) -> Result<Object, String> {
    if !(5..=6).contains(&args.len()) {
        return Err(format!(
            "takes x, sorted, return_index, return_inverse, return_counts and an optional axis, but was passed {} arguments",
            args.len()
        ));
    }
    let x = input(args, 0)?;
    let flag = |index| Ok::<bool, String>(int_argument(args, index)?.unwrap_or(0) != 0);
    let (sorted, return_index, return_inverse, return_counts) =
        (flag(1)?, flag(2)?, flag(3)?, flag(4)?);
    let axis = if args.len() == 6 {
        int_argument(args, 5)?
    } else {
        None
    };
    let Slicing {
        axis,
        outer,
        slices,
        inner,
    } = slicing(x.shape, axis)?;
    let element = |slice: usize, offset: usize| {
        x.number((offset / inner * slices + slice) * inner + offset % inner)
    };
    let order = |a: usize, b: usize| {
        (0..outer * inner)
            .map(|offset| element(a, offset).order(element(b, offset)))
            .find(|ordering| ordering.is_ne())
            .unwrap_or(Ordering::Equal)
    };
    let groups = groups(slices, sorted, order);
    let size = x.dtype.size_in_bytes();
    let mut values = Vec::with_capacity(groups.first.len() * outer * inner * size);
    for chunk in 0..outer {
        for &slice in &groups.first {
            let start = ((chunk * slices + slice) * inner) * size;
            values.extend_from_slice(&x.bytes[start..start + inner * size]);
        }
    }
    let unique_shape: Vec<i64> = match axis {
        None => vec![groups.first.len() as i64],
        Some(index) => {
            let mut shape = x.shape.to_vec();
            shape[index] = groups.first.len() as i64;
            shape
        }
    };
    let values =
        tvm_tensor_holding(x.dtype, &unique_shape, &values).map_err(|error| error.to_string())?;
    if !(return_index || return_inverse || return_counts) {
        return Ok(values);
    }
    let groups_dim = [groups.first.len() as i64];
    let first: Vec<i64> = groups.first.iter().map(|&slice| slice as i64).collect();
    let mut fields = vec![values];
    if return_index {
        fields.push(int64_tensor(&groups_dim, &first)?);
    }
    if return_inverse {
        fields.push(int64_tensor(&[slices as i64], &groups.inverse)?);
    }
    if return_counts {
        fields.push(int64_tensor(&groups_dim, &groups.counts)?);
    }
    let mut arguments: Vec<sys::TVMFFIAny> = fields.iter().map(Object::as_argument).collect();
    match object::call(Callee::Global(object::MAKE_ARRAY), &mut arguments, || {
        "making the tuple of unique's results".to_string()
    }) {
        Ok(Value::Object(array)) => Ok(array),
        Ok(_) => Err("ffi.Array did not return an array".to_string()),
        Err(error) => Err(error.to_string()),
    }
}

#[cfg(test)]
mod tests;
