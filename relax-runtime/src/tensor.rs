//! `Tensor`: an n-dimensional array that relax-runtime passes to and gets from TVM.

use std::alloc::Layout;
use std::sync::{Arc, OnceLock};

use crate::api;
use crate::device::Device;
use crate::dtype::{DType, Element};
use crate::error::{Error, Result};
use crate::object::Object;
use crate::sys;

/// Alignment of host buffers; TVM's generated kernels assume 64-byte aligned data.
pub(crate) const ALIGNMENT: usize = 64;

/// An n-dimensional array of one element type on one device.
///
/// Tensors made in Rust ([`Tensor::from_slice`], [`Tensor::from_bytes`]) own an aligned
/// host buffer and need no TVM to exist; they are handed to TVM without a copy when a
/// model is called. Tensors returned by a model are TVM's own, viewed without a copy.
/// A tensor is immutable; cloning it shares its data. It is `Send` and `Sync`.
#[derive(Clone)]
pub struct Tensor {
    repr: Repr,
    dtype: DType,
    /// The element count, checked against `isize::MAX` bytes when the tensor was made.
    elements: usize,
}

#[derive(Clone)]
enum Repr {
    Host {
        buffer: Arc<HostBuffer>,
        shape: Arc<[i64]>,
        /// The TVM tensor over `buffer`, made on first use in a call and reused after.
        object: OnceLock<Object>,
    },
    Tvm(Object),
}

// SAFETY: a tensor's data is never written after it is made (no `&mut` access exists,
// and TVM's Relax functions do not write their arguments); its TVM object is reference
// counted atomically. Moving it to another thread moves only references.
unsafe impl Send for Tensor {}
// SAFETY: as above: every method reads; the lazily made TVM object is set once through
// `OnceLock`, and a `Tensor` shared by `&` is read by all threads alike.
unsafe impl Sync for Tensor {}

/// The byte size of `dims` elements of `dtype`, if it fits in `isize::MAX`; zero-sized
/// dims count as one, so that no shape derived from this one by dropping an empty dim
/// (a model summing it away) can overflow either.
pub(crate) fn checked_bytes(dims: impl Iterator<Item = usize>, dtype: DType) -> Option<usize> {
    let mut elements = 1usize;
    for dim in dims {
        elements = elements.checked_mul(dim.max(1))?;
    }
    let bytes = dtype.bytes_for(elements)?;
    (bytes <= isize::MAX as usize).then_some(bytes)
}

impl Tensor {
    /// A CPU tensor holding a copy of `data`, with the given shape.
    ///
    /// # Errors
    ///
    /// When the shape's element count differs from `data.len()`.
    ///
    /// ```
    /// let x = relax_runtime::Tensor::from_slice(&[1f32, 2.0, 3.0, 4.0], &[2, 2])?;
    /// assert_eq!(x.shape(), &[2, 2]);
    /// # Ok::<(), relax_runtime::Error>(())
    /// ```
    pub fn from_slice<T: Element>(data: &[T], shape: &[usize]) -> Result<Tensor> {
        // SAFETY: every Element type is plain data without padding, so its bytes are
        // initialized; the slice covers exactly `data`.
        let bytes = unsafe {
            std::slice::from_raw_parts(data.as_ptr().cast::<u8>(), std::mem::size_of_val(data))
        };
        Tensor::from_bytes(T::DTYPE, shape, bytes)
    }

    /// A CPU tensor holding a copy of `bytes`, read as elements of `dtype` in row-major
    /// order (little-endian).
    ///
    /// # Errors
    ///
    /// When the shape does not match the byte count, the shape is too large for the
    /// address space (ignoring empty dims), or `dtype` is `bool` and a byte is neither
    /// 0 nor 1.
    pub fn from_bytes(dtype: DType, shape: &[usize], bytes: &[u8]) -> Result<Tensor> {
        let invalid = |message: String| Error::InvalidTensor { message };
        if checked_bytes(shape.iter().copied(), dtype).is_none() {
            return Err(invalid(format!(
                "shape {shape:?} of {dtype} is larger than the address space"
            )));
        }
        let elements: usize = shape.iter().product();
        let expected = dtype
            .bytes_for(elements)
            .expect("checked_bytes bounds the byte count");
        if expected != bytes.len() {
            return Err(invalid(format!(
                "shape {shape:?} of {dtype} needs {expected} bytes, but {} were given",
                bytes.len()
            )));
        }
        if dtype == DType::BOOL {
            if let Some(position) = bytes.iter().position(|&byte| byte > 1) {
                return Err(invalid(format!(
                    "byte {position} of a bool tensor is {}, but a bool is 0 or 1",
                    bytes[position]
                )));
            }
        }
        let shape = shape
            .iter()
            .map(|&dim| i64::try_from(dim))
            .collect::<Result<Arc<[i64]>, _>>()
            .map_err(|_| {
                invalid(format!(
                    "shape {shape:?} has a dimension larger than i64::MAX"
                ))
            })?;
        Ok(Tensor {
            repr: Repr::Host {
                buffer: Arc::new(HostBuffer::copy_of(bytes)),
                shape,
                object: OnceLock::new(),
            },
            dtype,
            elements,
        })
    }

    /// Wraps a tensor object returned by TVM, after checking that its shape describes
    /// a buffer that can exist, and (for bool) that its values are bools.
    pub(crate) fn from_tvm(object: Object) -> Result<Tensor> {
        debug_assert_eq!(object.type_index(), sys::TVMFFITypeIndex_kTVMFFITensor);
        // SAFETY: a tensor object's payload is its DLTensor, alive as long as the object.
        let tensor = unsafe { &*object.payload::<sys::DLTensor>() };
        let dtype = DType::from_dlpack(tensor.dtype);
        let invalid = |message: String| Error::InvalidTensor { message };
        let ndim = usize::try_from(tensor.ndim)
            .map_err(|_| invalid(format!("TVM returned a tensor of rank {}", tensor.ndim)))?;
        // SAFETY: a TVM tensor's shape array has `ndim` entries, alive with the tensor.
        let shape = unsafe { slice_or_empty(tensor.shape, ndim) };
        if shape.iter().any(|&dim| dim < 0) {
            return Err(invalid(format!("TVM returned a tensor of shape {shape:?}")));
        }
        // A size beyond usize (on a 32-bit host) becomes usize::MAX, which checked_bytes
        // refuses.
        let dims = || {
            shape
                .iter()
                .map(|&dim| usize::try_from(dim).unwrap_or(usize::MAX))
        };
        if checked_bytes(dims(), dtype).is_none() {
            return Err(invalid(format!(
                "TVM returned a tensor of shape {shape:?} of {dtype}, larger than the address space"
            )));
        }
        let made = Tensor {
            elements: dims().product(),
            dtype,
            repr: Repr::Tvm(object),
        };
        if dtype == DType::BOOL && made.device() == Device::cpu() {
            if let Ok(bytes) = made.as_bytes() {
                if bytes.iter().any(|&byte| byte > 1) {
                    return Err(invalid(
                        "TVM returned a bool tensor holding values other than 0 and 1".to_string(),
                    ));
                }
            }
        }
        Ok(made)
    }

    /// The element type.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// The dimensions, outermost first.
    pub fn shape(&self) -> &[i64] {
        match &self.repr {
            Repr::Host { shape, .. } => shape,
            Repr::Tvm(_) => {
                let tensor = self.dl_tensor();
                // SAFETY: a TVM tensor's shape array has `ndim` entries (checked
                // non-negative in from_tvm) and lives as long as the tensor.
                unsafe { slice_or_empty(tensor.shape, tensor.ndim as usize) }
            }
        }
    }

    /// The device that holds the data.
    pub fn device(&self) -> Device {
        match &self.repr {
            Repr::Host { .. } => Device::cpu(),
            Repr::Tvm(_) => Device::from_dlpack(self.dl_tensor().device),
        }
    }

    /// The number of elements (the product of the shape).
    pub fn num_elements(&self) -> usize {
        self.elements
    }

    /// The elements, in row-major order, without a copy.
    ///
    /// # Errors
    ///
    /// When `T` is not the tensor's element type, or the data is not on the CPU.
    pub fn as_slice<T: Element>(&self) -> Result<&[T]> {
        if self.dtype != T::DTYPE {
            return Err(Error::ElementType {
                requested: T::DTYPE,
                found: self.dtype,
            });
        }
        let bytes = self.as_bytes()?;
        debug_assert_eq!(bytes.len(), self.elements * std::mem::size_of::<T>());
        if bytes.is_empty() {
            return Ok(&[]);
        }
        if !(bytes.as_ptr() as usize).is_multiple_of(std::mem::align_of::<T>()) {
            return Err(Error::InvalidTensor {
                message: format!("the data is not aligned for {}", T::DTYPE),
            });
        }
        // SAFETY: `bytes` holds `elements` values of T (the dtype matches, and the byte
        // count was checked when the tensor was made), aligned for T (checked above), and
        // every bit pattern is a valid T (bool tensors hold only 0 and 1, checked when
        // made); the data lives as long as `self`.
        Ok(unsafe { std::slice::from_raw_parts(bytes.as_ptr().cast::<T>(), self.elements) })
    }

    /// The elements copied into a `Vec`.
    ///
    /// # Errors
    ///
    /// As [`Tensor::as_slice`].
    pub fn to_vec<T: Element>(&self) -> Result<Vec<T>> {
        self.as_slice::<T>().map(<[T]>::to_vec)
    }

    /// The raw bytes of the elements, in row-major order, without a copy.
    ///
    /// # Errors
    ///
    /// When the data is not on the CPU, or is strided.
    pub fn as_bytes(&self) -> Result<&[u8]> {
        // Checked against isize::MAX when the tensor was made; sub-byte elements packed.
        let length = self
            .dtype
            .bytes_for(self.elements)
            .expect("the byte count was checked when the tensor was made");
        match &self.repr {
            Repr::Host { buffer, .. } => {
                buffer
                    .as_slice()
                    .get(..length)
                    .ok_or_else(|| Error::InvalidTensor {
                        message: format!(
                            "{} elements of {} take {length} bytes, but the buffer holds {}",
                            self.elements,
                            self.dtype,
                            buffer.as_slice().len()
                        ),
                    })
            }
            Repr::Tvm(_) => {
                let tensor = self.dl_tensor();
                let device = Device::from_dlpack(tensor.device);
                if device != Device::cpu() {
                    return Err(Error::InvalidTensor {
                        message: format!(
                            "the data is on {device:?}; only CPU data can be read from Rust"
                        ),
                    });
                }
                if !is_compact(tensor) {
                    return Err(Error::InvalidTensor {
                        message: "the tensor is strided; only compact row-major data can be read"
                            .to_string(),
                    });
                }
                if length == 0 {
                    return Ok(&[]);
                }
                // SAFETY: a compact CPU tensor made by TVM holds `length` bytes from
                // data + byte_offset: its shape's byte size as TVM's allocator computes it
                // (`bytes_for`, sub-byte elements packed), checked to fit isize when wrapped,
                // alive as long as the tensor object.
                Ok(unsafe {
                    slice_or_empty(
                        tensor
                            .data
                            .cast::<u8>()
                            .add(tensor.byte_offset as usize)
                            .cast_const(),
                        length,
                    )
                })
            }
        }
    }

    /// The TVM tensor object to pass to a call, made on first use for host tensors.
    pub(crate) fn tvm_object(&self) -> Result<&Object> {
        match &self.repr {
            Repr::Tvm(object) => Ok(object),
            Repr::Host {
                buffer,
                shape,
                object,
            } => {
                if let Some(object) = object.get() {
                    return Ok(object);
                }
                let made = wrap_host_buffer(buffer, self.dtype, shape)?;
                Ok(object.get_or_init(|| made))
            }
        }
    }

    fn dl_tensor(&self) -> &sys::DLTensor {
        let Repr::Tvm(object) = &self.repr else {
            unreachable!("dl_tensor is only read from TVM tensors")
        };
        // SAFETY: a tensor object's payload is its DLTensor, alive as long as the object.
        unsafe { &*object.payload::<sys::DLTensor>() }
    }
}

impl std::fmt::Debug for Tensor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tensor")
            .field("dtype", &self.dtype().to_string())
            .field("shape", &self.shape())
            .field("device", &self.device())
            .finish()
    }
}

/// # Safety
/// When `length` is not zero and `data` is not null, `data` must point to `length`
/// readable, initialized values that outlive `'a`.
pub(crate) unsafe fn slice_or_empty<'a, T>(data: *const T, length: usize) -> &'a [T] {
    if length == 0 || data.is_null() {
        &[]
    } else {
        // SAFETY: the caller's contract.
        unsafe { std::slice::from_raw_parts(data, length) }
    }
}

fn is_compact(tensor: &sys::DLTensor) -> bool {
    if tensor.strides.is_null() {
        return true;
    }
    let ndim = tensor.ndim as usize;
    // SAFETY: shape and strides have `ndim` entries.
    let (shape, strides) = unsafe {
        (
            slice_or_empty(tensor.shape, ndim),
            slice_or_empty(tensor.strides, ndim),
        )
    };
    let mut expected = 1i64;
    for (dim, stride) in shape.iter().zip(strides).rev() {
        if *dim != 1 && *stride != expected {
            return false;
        }
        expected *= dim;
    }
    true
}

/// A 64-byte aligned, immutable host allocation.
pub(crate) struct HostBuffer {
    data: std::ptr::NonNull<u8>,
    layout: Layout,
}

// SAFETY: the buffer is written only in `copy_of`, before it is shared; after that it is
// only read (by Rust and by TVM).
unsafe impl Send for HostBuffer {}
// SAFETY: as above.
unsafe impl Sync for HostBuffer {}

impl HostBuffer {
    fn copy_of(bytes: &[u8]) -> HostBuffer {
        let layout = Layout::from_size_align(bytes.len().max(1), ALIGNMENT).expect("valid layout");
        // SAFETY: the layout has a non-zero size.
        let data = unsafe { std::alloc::alloc(layout) };
        let Some(data) = std::ptr::NonNull::new(data) else {
            std::alloc::handle_alloc_error(layout)
        };
        // SAFETY: the new allocation holds at least bytes.len() bytes and does not
        // overlap `bytes`.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), data.as_ptr(), bytes.len()) };
        HostBuffer { data, layout }
    }

    /// The copied bytes and any padding byte (a zero-length buffer has one).
    fn as_slice(&self) -> &[u8] {
        // SAFETY: the allocation holds layout.size() bytes; the copied prefix is
        // initialized, and callers slice no further than it.
        unsafe { std::slice::from_raw_parts(self.data.as_ptr(), self.layout.size()) }
    }
}

impl Drop for HostBuffer {
    fn drop(&mut self) {
        // SAFETY: allocated in copy_of with this layout, freed once.
        unsafe { std::alloc::dealloc(self.data.as_ptr(), self.layout) };
    }
}

/// What a DLPack tensor made from a host buffer keeps alive until TVM releases it.
struct DlpackOwner {
    _buffer: Arc<HostBuffer>,
    _shape: Arc<[i64]>,
}

unsafe extern "C" fn delete_dlpack(managed: *mut sys::DLManagedTensorVersioned) {
    // SAFETY: `managed` and its context were made by Box::into_raw in wrap_host_buffer,
    // and TVM calls the deleter exactly once.
    unsafe {
        let managed = Box::from_raw(managed);
        drop(Box::from_raw(managed.manager_ctx.cast::<DlpackOwner>()));
    }
}

/// Makes a TVM tensor over a host buffer without copying it.
fn wrap_host_buffer(buffer: &Arc<HostBuffer>, dtype: DType, shape: &Arc<[i64]>) -> Result<Object> {
    let owner = Box::new(DlpackOwner {
        _buffer: Arc::clone(buffer),
        _shape: Arc::clone(shape),
    });
    let managed = Box::new(cpu_dlpack(
        buffer.data.as_ptr().cast(),
        dtype,
        (shape.as_ptr().cast_mut(), shape.len()),
        Box::into_raw(owner).cast(),
        delete_dlpack,
    ));
    // SAFETY: a valid DLPack tensor whose buffer and shape outlive it (the owner holds
    // them), released by its deleter.
    unsafe { tvm_tensor_from_dlpack(Box::into_raw(managed)) }
}

/// A DLPack tensor of compact CPU data of `dtype` at `data`, its `shape` (dims, count)
/// and `manager_ctx` kept alive by the owner that `deleter` releases.
pub(crate) fn cpu_dlpack(
    data: *mut std::ffi::c_void,
    dtype: DType,
    (shape, ndim): (*mut i64, usize),
    manager_ctx: *mut std::ffi::c_void,
    deleter: unsafe extern "C" fn(*mut sys::DLManagedTensorVersioned),
) -> sys::DLManagedTensorVersioned {
    sys::DLManagedTensorVersioned {
        version: sys::DLPackVersion {
            major: sys::DLPACK_MAJOR_VERSION,
            minor: sys::DLPACK_MINOR_VERSION,
        },
        manager_ctx,
        deleter: Some(deleter),
        flags: 0,
        dl_tensor: sys::DLTensor {
            data,
            device: Device::cpu().to_dlpack(),
            ndim: ndim as i32,
            dtype: dtype.to_dlpack(),
            shape,
            strides: std::ptr::null_mut(),
            byte_offset: 0,
        },
    }
}

/// Hands a DLPack tensor to TVM: its tensor object, which calls the deleter when released.
///
/// # Safety
/// `managed` must be a valid DLPack tensor of compact CPU data that lives until its
/// deleter is called, and the deleter must release it and what it owns exactly once.
/// Ownership passes to this function: on failure it calls the deleter itself.
pub(crate) unsafe fn tvm_tensor_from_dlpack(
    managed: *mut sys::DLManagedTensorVersioned,
) -> Result<Object> {
    let api = api::loaded();
    let mut handle: sys::TVMFFIObjectHandle = std::ptr::null_mut();
    // SAFETY: `managed` is valid (the caller's contract); on success TVM owns it and
    // calls the deleter once.
    let status = unsafe { (api.ffi.TVMFFITensorFromDLPackVersioned)(managed, 0, 1, &mut handle) };
    if status != 0 {
        // SAFETY: on failure ownership stays with us; it is released once here, by the
        // deleter the caller made it with.
        unsafe {
            if let Some(deleter) = (*managed).deleter {
                deleter(managed);
            }
        }
        return Err(crate::object::take_raised_error(
            "handing a Rust tensor to TVM".to_string(),
        ));
    }
    // SAFETY: on success `handle` is an owned tensor object.
    unsafe { Object::from_owned(handle) }.ok_or_else(|| Error::InvalidTensor {
        message: "TVM returned no tensor for a Rust buffer".to_string(),
    })
}

#[cfg(test)]
mod tests;
