//! `ndarray` interop (feature `ndarray`): tensors from arrays of any layout, and arrays
//! viewing a tensor's elements without a copy.

use ndarray::{ArrayBase, ArrayD, ArrayViewD, Data, Dimension, IxDyn};

use crate::dtype::Element;
use crate::error::{Error, Result};
use crate::tensor::Tensor;

impl Tensor {
    /// A CPU tensor holding a copy of `array`'s elements in row-major order. A
    /// standard-layout array is copied in one block; any other (a transposed or strided
    /// view) is gathered element by element first.
    ///
    /// # Errors
    ///
    /// When the shape is too large for the address space.
    ///
    /// ```
    /// use ndarray::array;
    /// let a = array![[1f32, 2.0, 3.0], [4.0, 5.0, 6.0]];
    /// let t = relax_runtime::Tensor::from_array(&a.t())?; // a transposed view
    /// assert_eq!(t.shape(), &[3, 2]);
    /// assert_eq!(t.as_slice::<f32>()?, &[1.0, 4.0, 2.0, 5.0, 3.0, 6.0]);
    /// # Ok::<(), relax_runtime::Error>(())
    /// ```
    pub fn from_array<S, D, T>(array: &ArrayBase<S, D>) -> Result<Tensor>
    where
        S: Data<Elem = T>,
        D: Dimension,
        T: Element,
    {
        let shape = array.shape().to_vec();
        match array.as_slice() {
            Some(elements) => Tensor::from_slice(elements, &shape),
            None => {
                let gathered: Vec<T> = array.iter().copied().collect();
                Tensor::from_slice(&gathered, &shape)
            }
        }
    }

    /// The elements as an n-dimensional array view, without a copy.
    ///
    /// # Errors
    ///
    /// As [`Tensor::as_slice`]: when `T` is not the tensor's element type, or the data
    /// is not on the CPU.
    ///
    /// ```
    /// let t = relax_runtime::Tensor::from_slice(&[1i64, 2, 3, 4, 5, 6], &[2, 3])?;
    /// let view = t.view::<i64>()?;
    /// assert_eq!(view[[1, 2]], 6);
    /// # Ok::<(), relax_runtime::Error>(())
    /// ```
    pub fn view<T: Element>(&self) -> Result<ArrayViewD<'_, T>> {
        let elements = self.as_slice::<T>()?;
        let shape: Vec<usize> = self.shape().iter().map(|&dim| dim as usize).collect();
        ArrayViewD::from_shape(IxDyn(&shape), elements).map_err(|error| Error::InvalidTensor {
            message: format!(
                "shape {shape:?} does not fit {} elements: {error}",
                elements.len()
            ),
        })
    }

    /// The elements copied into an owned n-dimensional array.
    ///
    /// # Errors
    ///
    /// As [`Tensor::view`].
    pub fn to_array<T: Element>(&self) -> Result<ArrayD<T>> {
        Ok(self.view::<T>()?.to_owned())
    }
}

#[cfg(test)]
mod tests {
    use ndarray::{s, Array, Array3, ArrayD, IxDyn};

    use crate::{DType, Error, Tensor};

    #[test]
    fn a_standard_layout_array_round_trips() {
        let array = Array::from_shape_fn((2, 3, 4), |(i, j, k)| (i * 100 + j * 10 + k) as f32);
        let tensor = Tensor::from_array(&array).unwrap();
        assert_eq!(tensor.shape(), &[2, 3, 4]);
        assert_eq!(tensor.view::<f32>().unwrap(), array.clone().into_dyn());
        assert_eq!(tensor.to_array::<f32>().unwrap(), array.into_dyn());
    }

    #[test]
    fn non_contiguous_views_are_read_in_logical_order() {
        let array: Array3<i32> =
            Array::from_shape_fn((4, 5, 6), |(i, j, k)| (i * 100 + j * 10 + k) as i32);
        let sliced = array.slice(s![1..4;2, .., 1..6;2]);
        let permuted = array.view().permuted_axes([2, 0, 1]);
        for view in [sliced, permuted] {
            assert!(
                view.as_slice().is_none(),
                "the case under test is not contiguous"
            );
            let tensor = Tensor::from_array(&view).unwrap();
            let expected: Vec<i32> = view.iter().copied().collect();
            assert_eq!(tensor.as_slice::<i32>().unwrap(), expected.as_slice());
            assert_eq!(tensor.view::<i32>().unwrap(), view.into_dyn());
        }
    }

    #[test]
    fn views_check_the_element_type_and_allow_empty_and_scalar_shapes() {
        let tensor = Tensor::from_slice(&[1.0f64, 2.0], &[2]).unwrap();
        assert!(matches!(
            tensor.view::<f32>(),
            Err(Error::ElementType {
                requested: DType::F32,
                found: DType::F64
            })
        ));
        let empty = Tensor::from_array(&ArrayD::<f32>::zeros(IxDyn(&[3, 0]))).unwrap();
        assert_eq!(empty.view::<f32>().unwrap().shape(), &[3, 0]);
        let scalar = Tensor::from_array(&ndarray::arr0(7u8)).unwrap();
        assert_eq!(scalar.shape(), &[] as &[i64]);
        assert_eq!(scalar.view::<u8>().unwrap()[[]], 7);
    }
}
