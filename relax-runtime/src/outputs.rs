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
//! The DLPack header, the shape and the data are one allocation ([`Block`]), freed by
//! the deleter TVM calls when the tensor's last reference goes: one `malloc` besides
//! TVM's own tensor object, where an aligned buffer, its owners and its header were
//! five. The [1, 4] addition, old and new binaries in turn: 1.31-1.42 µs a call, then
//! 0.98-1.05.
//!
//! | name | arguments | returns |
//! |---|---|---|
//! | `relax_runtime.output` | `shape` (a `ffi.Shape`), `dtype` | a tensor of that shape, zeros |

use std::alloc::Layout;
use std::ffi::c_void;

use crate::api::Api;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::globals;
use crate::object::{self, Object};
use crate::sys;
use crate::tensor::{checked_bytes, cpu_dlpack, tvm_tensor_from_dlpack, ALIGNMENT};

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
    // SAFETY: TVM's safe-call contract, passed on.
    unsafe { globals::answer(OUTPUT, args, count, result, output_tensor) }
}

/// The tensor `args` (a shape and a dtype) ask for.
fn output_tensor(args: &[sys::TVMFFIAny]) -> std::result::Result<Object, String> {
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
    let dtype = if dtype.type_index == sys::TVMFFITypeIndex_kTVMFFIDataType {
        // SAFETY: a dtype-typed value holds a DLDataType.
        DType::from_dlpack(unsafe { dtype.__bindgen_anon_2.v_dtype })
    } else {
        // A VM with an instrument (`RELAX_PROFILE=1`) passes dtypes as their names.
        // SAFETY: TVM passes valid values, alive during the call.
        let name = unsafe { object::string_value(dtype) }.ok_or_else(|| {
            format!(
                "{OUTPUT}: its second argument must be a dtype, but is of type index {}",
                dtype.type_index
            )
        })?;
        DType::parse(&name).ok_or_else(|| format!("{OUTPUT}: `{name}` is not a dtype"))?
    };
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
    zeroed_tvm_tensor(dtype, sizes).map_err(|error| format!("{OUTPUT}: {error}"))
}

/// A zero-filled CPU tensor of `dtype` and `shape`, as a TVM object: a model's output,
/// which its function fills. Errs when a size is negative or the tensor would not fit
/// in the address space or in what the allocator has.
pub(crate) fn zeroed_tvm_tensor(dtype: DType, shape: &[i64]) -> Result<Object> {
    let block = Block::zeroed(dtype, shape)?;
    // SAFETY: the block's header is a valid DLPack tensor over its own shape and data,
    // which live until its deleter frees the whole block, once.
    unsafe { tvm_tensor_from_dlpack(block.into_dlpack()) }
}

/// A CPU tensor of `dtype` and `shape` holding `bytes` (its elements, little-endian), as
/// a TVM object. Errs as [`zeroed_tvm_tensor`] does, or when `bytes` does not fill it.
pub(crate) fn tvm_tensor_holding(dtype: DType, shape: &[i64], bytes: &[u8]) -> Result<Object> {
    let block = Block::zeroed(dtype, shape)?;
    let size = checked_bytes(shape.iter().map(|&dim| dim as usize), dtype);
    if size != Some(bytes.len()) {
        return Err(Error::InvalidTensor {
            message: format!(
                "{} bytes do not fill a tensor of {dtype} of shape {shape:?}",
                bytes.len()
            ),
        });
    }
    let managed = block.into_dlpack();
    // SAFETY: the block's header is a valid DLPack tensor whose data has room for the
    // shape's bytes (Block::zeroed sized it), `bytes.len()` of them (checked above), and
    // is not yet shared; then as in zeroed_tvm_tensor.
    unsafe {
        std::ptr::copy_nonoverlapping(
            bytes.as_ptr(),
            (*managed).dl_tensor.data.cast::<u8>(),
            bytes.len(),
        );
        tvm_tensor_from_dlpack(managed)
    }
}

/// The size of a returned tensor's allocation: its [`Header`] at offset 0, then the
/// shape, then the data at the first multiple of [`ALIGNMENT`] after it.
///
/// The allocation itself is only aligned for the header, as `malloc` aligns: a 64-byte
/// aligned one is glibc's `posix_memalign`, which allocates more and frees what it
/// skips (about 0.2 µs of a 1.2 µs call here). The data's offset therefore depends on
/// the address ([`BlockLayout::data_offset`]); the size leaves room for any.
#[derive(Debug, Clone, Copy, PartialEq)]
struct BlockLayout {
    whole: Layout,
    shape_offset: usize,
    /// Where the shape ends.
    shape_end: usize,
}

impl BlockLayout {
    /// The layout for `rank` dims and `bytes` of data (one byte when zero), or None when
    /// it would exceed `isize::MAX` bytes.
    fn new(rank: usize, bytes: usize) -> Option<BlockLayout> {
        let header = Layout::new::<Header>();
        let (with_shape, shape_offset) = header.extend(Layout::array::<i64>(rank).ok()?).ok()?;
        let size = with_shape
            .size()
            .checked_add(ALIGNMENT - 1)?
            .checked_add(bytes.max(1))?;
        Some(BlockLayout {
            whole: Layout::from_size_align(size, with_shape.align()).ok()?,
            shape_offset,
            shape_end: with_shape.size(),
        })
    }

    /// Where the data starts in the block allocated at `start`.
    fn data_offset(&self, start: usize) -> usize {
        (start + self.shape_end).next_multiple_of(ALIGNMENT) - start
    }
}

/// The start of a [`Block`]: the DLPack tensor handed to TVM (first, so that the pointer
/// TVM gives the deleter is the block's), and the layout to free the block with.
#[repr(C)]
struct Header {
    managed: sys::DLManagedTensorVersioned,
    layout: Layout,
}

/// One allocation holding a returned tensor's DLPack header, shape and zeroed data.
struct Block {
    start: std::ptr::NonNull<Header>,
}

impl Block {
    fn zeroed(dtype: DType, shape: &[i64]) -> Result<Block> {
        let invalid = |what: &str| Error::InvalidTensor {
            message: format!("an output of shape {shape:?} of {dtype} {what}"),
        };
        if shape.iter().any(|&dim| dim < 0) {
            return Err(invalid("has a negative size"));
        }
        let dims = shape
            .iter()
            .map(|&dim| usize::try_from(dim).unwrap_or(usize::MAX));
        let too_large = || invalid("is larger than the address space");
        let bytes = checked_bytes(dims, dtype).ok_or_else(too_large)?;
        let layout = BlockLayout::new(shape.len(), bytes).ok_or_else(too_large)?;
        // SAFETY: the layout has a non-zero size (the data's at least).
        let start = unsafe { std::alloc::alloc_zeroed(layout.whole) };
        let start = std::ptr::NonNull::new(start).ok_or_else(|| {
            invalid(&format!(
                "needs {bytes} bytes, more than could be allocated"
            ))
        })?;
        // SAFETY: the offsets lie within the allocation (BlockLayout), aligned for what
        // is written there: the header at the start, `shape.len()` i64s at shape_offset,
        // the data (`bytes`) at data_offset, at most ALIGNMENT - 1 past the shape's end.
        unsafe {
            let shape_start = start.as_ptr().add(layout.shape_offset).cast::<i64>();
            std::ptr::copy_nonoverlapping(shape.as_ptr(), shape_start, shape.len());
            let data = start
                .as_ptr()
                .add(layout.data_offset(start.as_ptr() as usize));
            start.cast::<Header>().as_ptr().write(Header {
                managed: cpu_dlpack(
                    data.cast(),
                    dtype,
                    (shape_start, shape.len()),
                    std::ptr::null_mut(),
                    free_block,
                ),
                layout: layout.whole,
            });
        }
        Ok(Block {
            start: start.cast(),
        })
    }

    /// The DLPack tensor, whose deleter frees the block.
    fn into_dlpack(self) -> *mut sys::DLManagedTensorVersioned {
        let block = std::mem::ManuallyDrop::new(self);
        // The header's first field, at the block's start.
        block.start.as_ptr().cast()
    }
}

impl Drop for Block {
    fn drop(&mut self) {
        // SAFETY: a block not handed over is freed here, once, as its deleter would.
        unsafe { free_block(self.start.as_ptr().cast()) }
    }
}

/// The deleter of a [`Block`]'s DLPack tensor.
unsafe extern "C" fn free_block(managed: *mut sys::DLManagedTensorVersioned) {
    // SAFETY: `managed` is the start of a block made by Block::zeroed, whose header holds
    // the layout it was allocated with; TVM (or tvm_tensor_from_dlpack on failure) calls
    // the deleter once.
    unsafe {
        let layout = (*managed.cast::<Header>()).layout;
        std::alloc::dealloc(managed.cast(), layout);
    }
}

#[cfg(test)]
mod tests;
