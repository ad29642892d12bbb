//! Reading a kernel call's TVM arguments as relax-kernels' [`Argument`]s: float32 CPU
//! tensors (compact and aligned) and integer or float scalars, each checked before the
//! kernel touches any memory.

use relax_kernels::Argument;

use crate::sys;

/// The DLTensor an argument holds, if it holds one.
pub(crate) fn dl_tensor(any: &sys::TVMFFIAny) -> Option<*const sys::DLTensor> {
    match any.type_index {
        sys::TVMFFITypeIndex_kTVMFFIDLTensorPtr => {
            // SAFETY: a DLTensor* argument holds the pointer in v_ptr.
            Some(unsafe { any.__bindgen_anon_2.v_ptr.cast() })
        }
        sys::TVMFFITypeIndex_kTVMFFITensor => {
            // SAFETY: a tensor object argument holds the object in v_obj; its DLTensor
            // follows the object header (TVMFFITensorGetDLTensorPtr).
            Some(unsafe {
                any.__bindgen_anon_2
                    .v_obj
                    .cast::<u8>()
                    .add(std::mem::size_of::<sys::TVMFFIObject>())
                    .cast()
            })
        }
        _ => None,
    }
}

/// The memory a tensor argument covers, as a byte range (empty for an empty tensor).
type Span = std::ops::Range<usize>;

/// Reads every argument of the kernel `name`: tensors, integers (bools as 0 or 1) and
/// floats. Fails on any other kind of value, a tensor that is not a compact aligned
/// float32 CPU tensor, or two tensors whose memory overlaps while one of them is the
/// call's last argument (its output, by destination passing).
///
/// # Safety
/// `args` are the values TVM passed to the call, valid (tensors included) until it
/// returns; TVM's outputs are written by this call only.
pub(super) unsafe fn read<'a>(
    name: &str,
    args: &'a [sys::TVMFFIAny],
) -> Result<Vec<Argument<'a>>, String> {
    let mut values = Vec::with_capacity(args.len());
    let mut spans: Vec<Span> = Vec::with_capacity(args.len());
    for (index, any) in args.iter().enumerate() {
        let wrong = |what: String| format!("{name}: argument {index} {what}");
        let Some(tensor) = dl_tensor(any) else {
            values.push(match any.type_index {
                sys::TVMFFITypeIndex_kTVMFFIInt | sys::TVMFFITypeIndex_kTVMFFIBool => {
                    // SAFETY: integer arguments are stored in v_int64.
                    Argument::int(unsafe { any.__bindgen_anon_2.v_int64 })
                }
                sys::TVMFFITypeIndex_kTVMFFIFloat => {
                    // SAFETY: float arguments are stored in v_float64.
                    Argument::float(unsafe { any.__bindgen_anon_2.v_float64 })
                }
                other => {
                    return Err(wrong(format!(
                        "is neither a tensor nor a number (type index {other})"
                    )))
                }
            });
            continue;
        };
        if tensor.is_null() {
            return Err(wrong("is a null tensor".to_string()));
        }
        // SAFETY: TVM passes a valid DLTensor that outlives the call.
        let tensor = unsafe { &*tensor };
        let (data, shape) = check(tensor).map_err(wrong)?;
        let bytes = shape.iter().map(|&dim| dim as usize).product::<usize>() * 4;
        spans.push(data as usize..data as usize + bytes);
        // SAFETY: `check` found a float32 CPU tensor, compact, aligned, with non-negative
        // dims, whose data TVM keeps valid for the call (this function's contract); the
        // output's overlap with the other tensors is checked below, before any kernel
        // runs.
        values.push(unsafe { Argument::from_raw(data, shape) });
    }
    if let Some((output, inputs)) = spans.split_last() {
        let overlaps = |span: &Span| span.start < output.end && output.start < span.end;
        if !output.is_empty() && inputs.iter().any(|span| !span.is_empty() && overlaps(span)) {
            return Err(format!("{name}: a kernel's input and output share memory"));
        }
    }
    Ok(values)
}

/// The shape of a compact CPU tensor (any dtype), or what it is not.
pub(crate) fn compact_cpu_shape(tensor: &sys::DLTensor) -> Result<&[i64], String> {
    if tensor.device.device_type != sys::DLDeviceType_kDLCPU {
        return Err("is not on the CPU".to_string());
    }
    let ndim = usize::try_from(tensor.ndim).map_err(|_| "has a negative rank".to_string())?;
    let shape: &[i64] = if ndim == 0 {
        &[]
    } else {
        // SAFETY: a DLTensor's shape has `ndim` entries, alive with the tensor.
        unsafe { std::slice::from_raw_parts(tensor.shape, ndim) }
    };
    if shape.iter().any(|&dim| dim < 0) {
        return Err(format!("has shape {shape:?}"));
    }
    if !tensor.strides.is_null() {
        // SAFETY: strides has `ndim` entries when not null.
        let strides = unsafe { std::slice::from_raw_parts(tensor.strides, ndim) };
        let mut expected = 1i64;
        for (dim, stride) in shape.iter().zip(strides).rev() {
            if *dim != 1 && *stride != expected {
                return Err("is strided".to_string());
            }
            expected *= dim;
        }
    }
    Ok(shape)
}

/// The data and shape of a float32 CPU tensor, compact and aligned, or what it is not.
fn check(tensor: &sys::DLTensor) -> Result<(*mut f32, &[i64]), String> {
    if tensor.dtype.code != sys::DLDataTypeCode_kDLFloat as u8
        || tensor.dtype.bits != 32
        || tensor.dtype.lanes != 1
    {
        return Err("is not float32".to_string());
    }
    let shape = compact_cpu_shape(tensor)?;
    let data = tensor.data.cast::<u8>();
    if data.is_null() && shape.iter().all(|&dim| dim > 0) {
        return Err("has no data".to_string());
    }
    // SAFETY: byte_offset addresses inside the tensor's allocation.
    let data = unsafe { data.add(tensor.byte_offset as usize) }.cast::<f32>();
    if !(data as usize).is_multiple_of(std::mem::align_of::<f32>()) {
        return Err("is not aligned for float32".to_string());
    }
    Ok((data, shape))
}
