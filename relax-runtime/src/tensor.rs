//! `Tensor`: an n-dimensional array that relax-runtime passes to and gets from TVM.

use std::alloc::Layout;
use std::sync::{Arc, OnceLock};

use crate::device::Device;
use crate::dtype::{DType, Element};
use crate::error::{Error, Result};
use crate::library::Runtime;
use crate::object::Object;
use crate::sys;

/// Alignment of host buffers; TVM's generated kernels assume 64-byte aligned data.
const ALIGNMENT: usize = 64;

/// An n-dimensional array of one element type on one device.
///
/// Tensors made in Rust ([`Tensor::from_slice`], [`Tensor::from_bytes`]) own an aligned
/// host buffer and need no TVM to exist; they are handed to TVM without a copy when a
/// model is called. Tensors returned by a model are TVM's own, viewed without a copy.
/// Cloning a tensor shares its data.
#[derive(Clone)]
pub struct Tensor {
    repr: Repr,
}

#[derive(Clone)]
enum Repr {
    Host {
        buffer: Arc<HostBuffer>,
        dtype: DType,
        shape: Arc<[i64]>,
        /// The TVM tensor over `buffer`, made on first use in a call and reused after.
        object: OnceLock<Object>,
    },
    Tvm(Object),
}

impl Tensor {
    /// A CPU tensor holding a copy of `data`, with the given shape.
    ///
    /// Fails when the shape's element count differs from `data.len()`.
    pub fn from_slice<T: Element>(data: &[T], shape: &[usize]) -> Result<Tensor> {
        // SAFETY: every Element type is plain data without padding.
        let bytes = unsafe {
            std::slice::from_raw_parts(data.as_ptr().cast::<u8>(), std::mem::size_of_val(data))
        };
        Tensor::from_bytes(T::DTYPE, shape, bytes)
    }

    /// A CPU tensor holding a copy of `bytes`, read as elements of `dtype` in row-major order.
    pub fn from_bytes(dtype: DType, shape: &[usize], bytes: &[u8]) -> Result<Tensor> {
        let elements = shape
            .iter()
            .try_fold(1usize, |count, &dim| count.checked_mul(dim));
        let expected = elements.and_then(|count| count.checked_mul(dtype.size_in_bytes()));
        if expected != Some(bytes.len()) {
            return Err(Error::InvalidTensor {
                message: format!(
                    "shape {shape:?} of {dtype} needs {} bytes, but {} were given",
                    expected.map_or("more than usize::MAX".to_string(), |size| size.to_string()),
                    bytes.len()
                ),
            });
        }
        let shape = shape
            .iter()
            .map(|&dim| i64::try_from(dim))
            .collect::<Result<Arc<[i64]>, _>>()
            .map_err(|_| Error::InvalidTensor {
                message: format!("shape {shape:?} has a dimension larger than i64::MAX"),
            })?;
        let buffer = HostBuffer::copy_of(bytes);
        Ok(Tensor {
            repr: Repr::Host {
                buffer: Arc::new(buffer),
                dtype,
                shape,
                object: OnceLock::new(),
            },
        })
    }

    /// Wraps a tensor object returned by TVM.
    pub(crate) fn from_tvm(object: Object) -> Tensor {
        debug_assert_eq!(object.type_index(), sys::TVMFFITypeIndex_kTVMFFITensor);
        Tensor {
            repr: Repr::Tvm(object),
        }
    }

    /// The element type.
    pub fn dtype(&self) -> DType {
        match &self.repr {
            Repr::Host { dtype, .. } => *dtype,
            Repr::Tvm(_) => DType::from_dlpack(self.dl_tensor().dtype),
        }
    }

    /// The dimensions, outermost first.
    pub fn shape(&self) -> &[i64] {
        match &self.repr {
            Repr::Host { shape, .. } => shape,
            Repr::Tvm(_) => {
                let tensor = self.dl_tensor();
                // SAFETY: a TVM tensor's shape array has `ndim` entries and lives as long as the tensor.
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
        self.shape().iter().map(|&dim| dim as usize).product()
    }

    /// The elements, in row-major order, without a copy.
    ///
    /// Fails when `T` is not the tensor's element type, or the data is not on the CPU.
    pub fn as_slice<T: Element>(&self) -> Result<&[T]> {
        if self.dtype() != T::DTYPE {
            return Err(Error::ElementType {
                requested: T::DTYPE,
                found: self.dtype(),
            });
        }
        let bytes = self.as_bytes()?;
        // SAFETY: the data is aligned for T (64-byte host buffers; TVM aligns its own),
        // holds num_elements values of T, and T is plain data.
        Ok(unsafe { std::slice::from_raw_parts(bytes.as_ptr().cast::<T>(), self.num_elements()) })
    }

    /// The elements copied into a `Vec`.
    pub fn to_vec<T: Element>(&self) -> Result<Vec<T>> {
        self.as_slice::<T>().map(<[T]>::to_vec)
    }

    /// The raw bytes of the elements, in row-major order, without a copy.
    pub fn as_bytes(&self) -> Result<&[u8]> {
        let length = self.num_elements() * self.dtype().size_in_bytes();
        match &self.repr {
            Repr::Host { buffer, .. } => Ok(&buffer.as_slice()[..length]),
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
                // SAFETY: a compact CPU tensor holds `length` bytes from data + byte_offset,
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
                dtype,
                shape,
                object,
            } => {
                if let Some(object) = object.get() {
                    return Ok(object);
                }
                let made = wrap_host_buffer(buffer, *dtype, shape)?;
                Ok(object.get_or_init(|| made))
            }
        }
    }

    fn dl_tensor(&self) -> &sys::DLTensor {
        let Repr::Tvm(object) = &self.repr else {
            unreachable!("dl_tensor is only read from TVM tensors")
        };
        // SAFETY: a tensor object's DLTensor follows its object header
        // (TVMFFITensorGetDLTensorPtr in c_api.h) and lives as long as the object.
        unsafe {
            &*object
                .handle()
                .cast::<u8>()
                .add(std::mem::size_of::<sys::TVMFFIObject>())
                .cast::<sys::DLTensor>()
        }
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
/// When `length` is not zero, `data` must point to `length` readable values that outlive `'a`.
unsafe fn slice_or_empty<'a, T>(data: *const T, length: usize) -> &'a [T] {
    if length == 0 || data.is_null() {
        &[]
    } else {
        std::slice::from_raw_parts(data, length)
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

// The buffer is never written after construction.
unsafe impl Send for HostBuffer {}
unsafe impl Sync for HostBuffer {}

impl HostBuffer {
    fn copy_of(bytes: &[u8]) -> HostBuffer {
        let layout = Layout::from_size_align(bytes.len().max(1), ALIGNMENT).expect("valid layout");
        // SAFETY: the layout has a non-zero size.
        let data = unsafe { std::alloc::alloc(layout) };
        let Some(data) = std::ptr::NonNull::new(data) else {
            std::alloc::handle_alloc_error(layout)
        };
        // SAFETY: the new allocation holds at least bytes.len() bytes.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), data.as_ptr(), bytes.len()) };
        HostBuffer { data, layout }
    }

    fn as_slice(&self) -> &[u8] {
        // SAFETY: the allocation holds layout.size() initialized-or-copied bytes; only the
        // copied prefix is ever exposed by callers.
        unsafe { std::slice::from_raw_parts(self.data.as_ptr(), self.layout.size()) }
    }
}

impl Drop for HostBuffer {
    fn drop(&mut self) {
        // SAFETY: allocated in copy_of with this layout.
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
    let runtime = Runtime::loaded();
    let owner = Box::new(DlpackOwner {
        _buffer: Arc::clone(buffer),
        _shape: Arc::clone(shape),
    });
    let managed = Box::new(sys::DLManagedTensorVersioned {
        version: sys::DLPackVersion {
            major: sys::DLPACK_MAJOR_VERSION,
            minor: sys::DLPACK_MINOR_VERSION,
        },
        manager_ctx: Box::into_raw(owner).cast(),
        deleter: Some(delete_dlpack),
        flags: 0,
        dl_tensor: sys::DLTensor {
            data: buffer.data.as_ptr().cast(),
            device: Device::cpu().to_dlpack(),
            ndim: shape.len() as i32,
            dtype: dtype.to_dlpack(),
            shape: shape.as_ptr().cast_mut(),
            strides: std::ptr::null_mut(),
            byte_offset: 0,
        },
    });
    let managed = Box::into_raw(managed);
    let mut handle: sys::TVMFFIObjectHandle = std::ptr::null_mut();
    // SAFETY: `managed` is a valid DLPack tensor; on success TVM owns it and calls the deleter.
    let status =
        unsafe { (runtime.api.TVMFFITensorFromDLPackVersioned)(managed, 0, 1, &mut handle) };
    if status != 0 {
        // SAFETY: on failure ownership stays with us.
        unsafe { delete_dlpack(managed) };
        return Err(crate::object::take_raised_error(
            "handing a Rust tensor to TVM".to_string(),
        ));
    }
    // SAFETY: on success `handle` is an owned tensor object.
    Ok(unsafe { Object::from_owned(handle) }.expect("TVM returned a tensor"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn from_slice_keeps_data_shape_and_dtype() {
        let tensor = Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3]).unwrap();
        assert_eq!(tensor.shape(), &[2, 3]);
        assert_eq!(tensor.dtype(), DType::F32);
        assert_eq!(
            tensor.as_slice::<f32>().unwrap(),
            &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
        );
        assert_eq!(tensor.as_bytes().unwrap().len(), 24);
    }

    #[test]
    fn from_slice_rejects_a_shape_of_another_size() {
        let error = Tensor::from_slice(&[1i32, 2, 3], &[2, 2]).unwrap_err();
        assert_eq!(
            error.to_string(),
            "invalid tensor: shape [2, 2] of int32 needs 16 bytes, but 12 were given"
        );
    }

    #[test]
    fn as_slice_rejects_another_element_type() {
        let tensor = Tensor::from_slice(&[1i64, 2], &[2]).unwrap();
        let error = tensor.as_slice::<f32>().unwrap_err();
        assert_eq!(
            error.to_string(),
            "tensor holds int64 elements, not float32"
        );
    }

    #[test]
    fn zero_sized_tensors_have_no_elements() {
        let tensor = Tensor::from_slice::<f32>(&[], &[0, 4]).unwrap();
        assert_eq!(tensor.num_elements(), 0);
        assert!(tensor.as_slice::<f32>().unwrap().is_empty());
    }

    #[test]
    fn host_buffers_are_aligned() {
        let tensor = Tensor::from_slice(&[7u8; 3], &[3]).unwrap();
        assert_eq!(tensor.as_bytes().unwrap().as_ptr() as usize % ALIGNMENT, 0);
    }
}
