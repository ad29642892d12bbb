//! A kernel's arguments: float32 tensors (a slice and its shape) and integer or float
//! scalars, in the order of the kernel's signature, each checked before use.

use std::marker::PhantomData;

use crate::parallel::Launch;

/// A compact row-major float32 CPU tensor passed to a kernel.
#[derive(Clone, Copy)]
pub struct View<'a> {
    pub(crate) data: *mut f32,
    pub(crate) shape: &'a [i64],
    /// Made from a mutable borrow (or by the runtime, from a buffer it may write).
    writable: bool,
    _borrow: PhantomData<&'a mut [f32]>,
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

#[cfg(test)]
impl<'a> View<'a> {
    /// A view of `shape` over `data`, for the kernels' tests of their shape checks.
    pub(crate) fn of(data: *mut f32, shape: &'a [i64]) -> View<'a> {
        View {
            data,
            shape,
            writable: false,
            _borrow: PhantomData,
        }
    }
}

/// One argument of a kernel: a tensor, an integer or a float. Not `Clone`: an output's
/// memory reaches a kernel once, so that it cannot also be read as another argument.
pub struct Argument<'a>(Value<'a>);

enum Value<'a> {
    /// A float32 tensor, read, or written when it is in an output's place.
    Tensor(View<'a>),
    /// An integer (or a bool, as 0 or 1).
    Int(i64),
    /// A float.
    Float(f64),
}

/// The element count of `shape`, when every dim is non-negative and the count fits.
fn element_count(shape: &[i64]) -> Option<usize> {
    shape.iter().try_fold(1usize, |count, &dim| {
        count.checked_mul(usize::try_from(dim).ok()?)
    })
}

impl<'a> Argument<'a> {
    /// A tensor the kernel only reads; fails unless `data` holds exactly `shape`'s
    /// elements.
    pub fn input(data: &'a [f32], shape: &'a [i64]) -> Result<Argument<'a>, String> {
        Argument::checked(data.as_ptr().cast_mut(), data.len(), shape, false)
    }

    /// A tensor the kernel may write (an output); fails unless `data` holds exactly
    /// `shape`'s elements.
    pub fn output(data: &'a mut [f32], shape: &'a [i64]) -> Result<Argument<'a>, String> {
        Argument::checked(data.as_mut_ptr(), data.len(), shape, true)
    }

    fn checked(
        data: *mut f32,
        len: usize,
        shape: &'a [i64],
        writable: bool,
    ) -> Result<Argument<'a>, String> {
        match element_count(shape) {
            Some(count) if count == len => Ok(Argument(Value::Tensor(View {
                data,
                shape,
                writable,
                _borrow: PhantomData,
            }))),
            _ => Err(format!(
                "a tensor of shape {shape:?} does not fit {len} values"
            )),
        }
    }

    /// A tensor over memory that the caller (a runtime passing its own buffers) owns.
    ///
    /// # Safety
    /// `data` is aligned for f32 and valid for reads and writes of `shape`'s elements
    /// (every dim non-negative) for `'a`; nothing else accesses that memory meanwhile
    /// but the kernel's other arguments, and a tensor in an output's place overlaps no
    /// other argument of the call.
    pub unsafe fn from_raw(data: *mut f32, shape: &'a [i64]) -> Argument<'a> {
        Argument(Value::Tensor(View {
            data,
            shape,
            writable: true,
            _borrow: PhantomData,
        }))
    }

    /// An integer (a bool as 0 or 1).
    pub fn int(value: i64) -> Argument<'a> {
        Argument(Value::Int(value))
    }

    /// A float.
    pub fn float(value: f64) -> Argument<'a> {
        Argument(Value::Float(value))
    }
}

/// A kernel's arguments, with its name for messages and the launch that runs its
/// parallel work.
pub struct Arguments<'a> {
    pub(crate) name: &'static str,
    args: &'a [Argument<'a>],
    pub(crate) launch: Launch,
}

impl<'a> Arguments<'a> {
    /// The arguments `args` of the kernel `name`, run with `launch`.
    pub fn new(name: &'static str, args: &'a [Argument<'a>], launch: Launch) -> Arguments<'a> {
        Arguments { name, args, launch }
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

    fn any(&self, index: usize) -> Result<&'a Value<'a>, String> {
        self.args
            .get(index)
            .map(|argument| &argument.0)
            .ok_or_else(|| format!("{}: argument {index} is missing", self.name))
    }

    /// Argument `index` as a float32 tensor of rank `rank` (or any rank with `None`).
    pub(crate) fn tensor(&self, index: usize, rank: Option<usize>) -> Result<View<'a>, String> {
        let wrong = |what: String| format!("{}: argument {index} {what}", self.name);
        let view = match self.any(index)? {
            Value::Tensor(view) => *view,
            Value::Int(_) | Value::Float(_) => return Err(wrong("is not a tensor".to_string())),
        };
        if rank.is_some_and(|rank| rank != view.shape.len()) {
            return Err(wrong(format!(
                "has rank {}, not {}",
                view.shape.len(),
                rank.unwrap_or_default()
            )));
        }
        Ok(view)
    }

    /// Argument `index` as a float32 tensor the kernel writes (its place is an output's).
    pub(crate) fn output(&self, index: usize, rank: Option<usize>) -> Result<View<'a>, String> {
        let view = self.tensor(index, rank)?;
        if view.writable {
            Ok(view)
        } else {
            Err(format!(
                "{}: argument {index} is an output, but was given as an input (read-only)",
                self.name
            ))
        }
    }

    /// Argument `index` as an integer.
    pub(crate) fn int(&self, index: usize) -> Result<i64, String> {
        match self.any(index)? {
            Value::Int(value) => Ok(*value),
            _ => Err(format!("{}: argument {index} is not an integer", self.name)),
        }
    }

    /// Argument `index` as a float (an integer is accepted).
    pub(crate) fn float(&self, index: usize) -> Result<f64, String> {
        match self.any(index)? {
            Value::Float(value) => Ok(*value),
            _ => self.int(index).map(|value| value as f64),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parallel::inline;

    #[test]
    fn a_slice_must_hold_its_shape() {
        let data = [0f32; 6];
        assert!(Argument::input(&data, &[2, 3]).is_ok());
        assert!(Argument::input(&data, &[2, 4]).is_err());
        assert!(Argument::input(&data, &[-1, -6]).is_err());
        assert!(Argument::input(&[], &[i64::MAX, i64::MAX, 2]).is_err());
    }

    #[test]
    fn an_input_in_an_outputs_place_is_refused() {
        let data = [0f32; 4];
        let args = [Argument::input(&data, &[4]).unwrap()];
        let args = Arguments::new("k", &args, inline);
        assert!(args.tensor(0, Some(1)).is_ok());
        let error = args.output(0, Some(1)).err().unwrap();
        assert!(error.contains("read-only"), "{error}");
        assert!(args.int(0).is_err() && args.tensor(1, None).is_err());
    }
}
