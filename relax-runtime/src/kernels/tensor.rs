//! Reading a kernel's arguments: float32 tensors and integer or float scalars, each
//! checked before use.

use crate::sys;

/// A compact row-major float32 CPU tensor passed to a kernel.
#[derive(Clone, Copy)]
pub(crate) struct View<'a> {
    pub(crate) data: *mut f32,
    pub(crate) shape: &'a [i64],
}

impl View<'_> {
    /// The number of elements.
    pub(crate) fn len(&self) -> usize {
        self.shape.iter().map(|&dim| dim as usize).product()
    }

    /// Dim `index` counted from the end (1: the last).
    pub(crate) fn dim_from_end(&self, index: usize) -> usize {
        self.shape[self.shape.len() - index] as usize
    }

    /// Fails when the two tensors' memory overlaps (a kernel reads one while writing the
    /// other).
    pub(crate) fn check_disjoint(&self, other: &View<'_>) -> Result<(), String> {
        let range = |view: &View<'_>| {
            let start = view.data as usize;
            start..start + view.len() * std::mem::size_of::<f32>()
        };
        let (mine, theirs) = (range(self), range(other));
        if mine.start < theirs.end && theirs.start < mine.end {
            Err("a kernel's input and output share memory".to_string())
        } else {
            Ok(())
        }
    }

    /// The product of every dim but the last `trailing`.
    pub(crate) fn leading(&self, trailing: usize) -> usize {
        self.shape[..self.shape.len() - trailing]
            .iter()
            .map(|&dim| dim as usize)
            .product()
    }
}

/// A kernel's arguments, with its name for messages.
pub(crate) struct Arguments<'a> {
    pub(crate) name: &'static str,
    args: &'a [sys::TVMFFIAny],
}

impl<'a> Arguments<'a> {
    pub(crate) fn new(name: &'static str, args: &'a [sys::TVMFFIAny]) -> Arguments<'a> {
        Arguments { name, args }
    }

    /// Fails unless there are exactly `count` arguments.
    pub(crate) fn expect_count(&self, count: usize) -> Result<(), String> {
        if self.args.len() == count {
            Ok(())
        } else {
            Err(format!(
                "{} takes {count} arguments, got {}",
                self.name,
                self.args.len()
            ))
        }
    }

    fn any(&self, index: usize) -> Result<&'a sys::TVMFFIAny, String> {
        self.args
            .get(index)
            .ok_or_else(|| format!("{}: argument {index} is missing", self.name))
    }

    /// Argument `index` as a float32 tensor of rank `rank` (or any rank with `None`).
    pub(crate) fn tensor(&self, index: usize, rank: Option<usize>) -> Result<View<'a>, String> {
        let any = self.any(index)?;
        let wrong = |what: String| format!("{}: argument {index} {what}", self.name);
        let tensor: *const sys::DLTensor = match any.type_index {
            sys::TVMFFITypeIndex_kTVMFFIDLTensorPtr => {
                // SAFETY: a DLTensor* argument holds the pointer in v_ptr.
                unsafe { any.__bindgen_anon_2.v_ptr.cast() }
            }
            sys::TVMFFITypeIndex_kTVMFFITensor => {
                // SAFETY: a tensor object argument holds the object in v_obj; its DLTensor
                // follows the object header (TVMFFITensorGetDLTensorPtr).
                unsafe {
                    any.__bindgen_anon_2
                        .v_obj
                        .cast::<u8>()
                        .add(std::mem::size_of::<sys::TVMFFIObject>())
                        .cast()
                }
            }
            other => return Err(wrong(format!("is not a tensor (type index {other})"))),
        };
        if tensor.is_null() {
            return Err(wrong("is a null tensor".to_string()));
        }
        // SAFETY: TVM passes a valid DLTensor that outlives the call.
        let tensor = unsafe { &*tensor };
        if tensor.dtype.code != sys::DLDataTypeCode_kDLFloat as u8
            || tensor.dtype.bits != 32
            || tensor.dtype.lanes != 1
        {
            return Err(wrong("is not float32".to_string()));
        }
        if tensor.device.device_type != sys::DLDeviceType_kDLCPU {
            return Err(wrong("is not on the CPU".to_string()));
        }
        let ndim =
            usize::try_from(tensor.ndim).map_err(|_| wrong("has a negative rank".to_string()))?;
        if rank.is_some_and(|rank| rank != ndim) {
            return Err(wrong(format!(
                "has rank {ndim}, not {}",
                rank.unwrap_or_default()
            )));
        }
        let shape: &[i64] = if ndim == 0 {
            &[]
        } else {
            // SAFETY: a DLTensor's shape has `ndim` entries, alive with the tensor.
            unsafe { std::slice::from_raw_parts(tensor.shape, ndim) }
        };
        if shape.iter().any(|&dim| dim < 0) {
            return Err(wrong(format!("has shape {shape:?}")));
        }
        if !tensor.strides.is_null() {
            // SAFETY: strides has `ndim` entries when not null.
            let strides = unsafe { std::slice::from_raw_parts(tensor.strides, ndim) };
            let mut expected = 1i64;
            for (dim, stride) in shape.iter().zip(strides).rev() {
                if *dim != 1 && *stride != expected {
                    return Err(wrong("is strided".to_string()));
                }
                expected *= dim;
            }
        }
        let data = tensor.data.cast::<u8>();
        if data.is_null() && shape.iter().all(|&dim| dim > 0) {
            return Err(wrong("has no data".to_string()));
        }
        // SAFETY: byte_offset addresses inside the tensor's allocation.
        let data = unsafe { data.add(tensor.byte_offset as usize) }.cast::<f32>();
        if !(data as usize).is_multiple_of(std::mem::align_of::<f32>()) {
            return Err(wrong("is not aligned for float32".to_string()));
        }
        Ok(View { data, shape })
    }

    /// Argument `index` as an integer.
    pub(crate) fn int(&self, index: usize) -> Result<i64, String> {
        let any = self.any(index)?;
        match any.type_index {
            sys::TVMFFITypeIndex_kTVMFFIInt | sys::TVMFFITypeIndex_kTVMFFIBool => {
                // SAFETY: integer arguments are stored in v_int64.
                Ok(unsafe { any.__bindgen_anon_2.v_int64 })
            }
            other => Err(format!(
                "{}: argument {index} is not an integer (type index {other})",
                self.name
            )),
        }
    }

    /// Argument `index` as a float (an integer is accepted).
    pub(crate) fn float(&self, index: usize) -> Result<f64, String> {
        let any = self.any(index)?;
        match any.type_index {
            // SAFETY: float arguments are stored in v_float64.
            sys::TVMFFITypeIndex_kTVMFFIFloat => Ok(unsafe { any.__bindgen_anon_2.v_float64 }),
            _ => self.int(index).map(|value| value as f64),
        }
    }
}
