//! Model weights: a safetensors file, read into tensors by parameter name, once per
//! loaded model and shared by all its VMs.

use std::collections::HashMap;

use safetensors::{Dtype as StDtype, SafeTensors};

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::signature::{format_dims, Dim, ModelSignature, WeightLayout};
use crate::tensor::Tensor;
use relax_kernels::weights::{WinogradTile, PANEL};

/// Reads every weight the model's functions take from safetensors bytes, checking
/// dtype and shape against the compiled signature; returns, per function, its weights
/// in argument order (a weight several functions take is loaded once per layout: as
/// stored, and converted for the functions that take it packed or transformed).
pub(crate) fn load(signature: &ModelSignature, bytes: Option<&[u8]>) -> Result<Vec<Vec<Tensor>>> {
    let wanted: Vec<_> = signature
        .functions
        .iter()
        .flat_map(|function| &function.weights)
        .collect();
    if wanted.is_empty() {
        return Ok(vec![Vec::new(); signature.functions.len()]);
    }
    let error = |message: String| Error::Weights {
        model: signature.name.clone(),
        message,
    };
    let bytes = bytes.ok_or_else(|| {
        error("are missing: the model takes weights but none were embedded".to_string())
    })?;
    let file = SafeTensors::deserialize(bytes)
        .map_err(|cause| error(format!("are not a valid safetensors file: {cause}")))?;
    let mut tensors: HashMap<(&str, WeightLayout), Tensor> = HashMap::new();
    for expected in wanted {
        if tensors.contains_key(&(expected.name.as_str(), expected.layout)) {
            continue;
        }
        let view = file
            .tensor(&expected.name)
            .map_err(|_| error(format!("have no tensor `{}`", expected.name)))?;
        let dtype = dtype_of(view.dtype()).ok_or_else(|| {
            error(format!(
                "tensor `{}` has unsupported dtype {:?}",
                expected.name,
                view.dtype()
            ))
        })?;
        let stored = expected
            .layout
            .stored_shape(&expected.shape, expected.columns, expected.depth)
            .ok_or_else(|| {
                error(format!(
                    "tensor `{}`: the signature takes it {:?} as {}, which that layout cannot be",
                    expected.name,
                    expected.layout,
                    format_dims(&expected.shape)
                ))
            })?;
        let shape_matches = view.shape().len() == stored.len()
            && (expected.layout == WeightLayout::Stored || dtype == DType::F32)
            && stored.iter().zip(view.shape()).all(
                |(dim, &size)| !matches!(dim, Dim::Static(expected) if *expected != size as i64),
            );
        if dtype != expected.dtype || !shape_matches {
            return Err(error(format!(
                "tensor `{}` is {dtype}{:?}, but the model expects {}{}",
                expected.name,
                view.shape(),
                expected.dtype,
                format_dims(&stored)
            )));
        }
        let tensor = match expected.layout {
            WeightLayout::Stored => Tensor::from_bytes(dtype, view.shape(), view.data())?,
            WeightLayout::Panels | WeightLayout::TransposedPanels | WeightLayout::FilterPanels => {
                panels(view.shape(), view.data(), expected.layout)?
            }
            WeightLayout::Winograd => winograd(view.shape(), view.data(), WinogradTile::Two)?,
            WeightLayout::Winograd4 => winograd(view.shape(), view.data(), WinogradTile::Four)?,
            WeightLayout::BlockedWinograd => {
                blocked_winograd(view.shape(), view.data(), WinogradTile::Two)?
            }
            WeightLayout::BlockedWinograd4 => {
                blocked_winograd(view.shape(), view.data(), WinogradTile::Four)?
            }
            WeightLayout::Bf16Panels | WeightLayout::Bf16TransposedPanels => {
                bf16_panels(view.shape(), view.data(), expected.layout)?
            }
            WeightLayout::Bf16FilterPanels => bf16_filter_panels(view.shape(), view.data())?,
            WeightLayout::Transposed => transposed(view.shape(), view.data())?,
        };
        // The library does not check the weights it is passed (the driver drops the VM's
        // checks of what relax-runtime checks), so a packed form must be the one it takes.
        if !fits(tensor.shape(), &expected.shape) {
            return Err(error(format!(
                "tensor `{}` in layout {:?} came out {:?}, but the model takes {}: a bug in relax-runtime's packing",
                expected.name,
                expected.layout,
                tensor.shape(),
                format_dims(&expected.shape)
            )));
        }
        tensors.insert((&expected.name, expected.layout), tensor);
    }
    Ok(signature
        .functions
        .iter()
        .map(|function| {
            function
                .weights
                .iter()
                .map(|weight| tensors[&(weight.name.as_str(), weight.layout)].clone())
                .collect()
        })
        .collect())
}

/// Whether `shape` has the rank of `dims` and their static sizes.
fn fits(shape: &[i64], dims: &[Dim]) -> bool {
    shape.len() == dims.len()
        && dims
            .iter()
            .zip(shape)
            .all(|(dim, &size)| !matches!(dim, Dim::Static(expected) if *expected != size))
}

/// The Winograd form with output tiles `tile` (`[16 or 36, in, out]`) of float32 3x3
/// kernels stored `[out, in, 3, 3]` (little-endian bytes; the shape was checked).
fn winograd(shape: &[usize], data: &[u8], tile: WinogradTile) -> Result<Tensor> {
    let (filters, channels) = (shape[0], shape[1]);
    let kernels = floats(data);
    let transformed = relax_kernels::weights::winograd(&kernels, filters, channels, tile);
    Tensor::from_slice(&transformed, &[tile.values(), channels, filters])
}

/// The Winograd form with output tiles `tile` for channel-blocked tensors (`[16 or 36,
/// ceil(out / 64), in, 64]`) of float32 3x3 kernels stored `[out, in, 3, 3]` (the shape
/// was checked).
fn blocked_winograd(shape: &[usize], data: &[u8], tile: WinogradTile) -> Result<Tensor> {
    let (filters, channels) = (shape[0], shape[1]);
    let transformed =
        relax_kernels::weights::blocked_winograd(&floats(data), filters, channels, tile);
    Tensor::from_slice(
        &transformed,
        &[tile.values(), filters.div_ceil(PANEL), channels, PANEL],
    )
}

/// The little-endian float32 values of a weight (its dtype was checked).
fn floats(data: &[u8]) -> Vec<f32> {
    data.chunks_exact(4)
        .map(|bytes| f32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]))
        .collect()
}

/// A float32 weight packed in the kernels' panels, `[ceil(N / 64), K.., 64]`: a matrix
/// stored `[K, N]` (`Panels`) or `[N, K]` (`TransposedPanels`), for the dense kernel; or a
/// convolution kernel stored `[out, in, kh, kw]` (`FilterPanels`: N = out, and K's dims
/// `in, kh, kw` kept), for relax-kernels' filter panels.
fn panels(shape: &[usize], data: &[u8], layout: WeightLayout) -> Result<Tensor> {
    let values = floats(data);
    // N, and the dims of K as the packed weight keeps them.
    let (columns, depth_dims) = match layout {
        WeightLayout::Panels => (shape[1], &shape[..1]),
        _ => (shape[0], &shape[1..]),
    };
    let depth = depth_dims.iter().product::<usize>();
    let packed = relax_kernels::weights::pack_panels(depth, columns, |k, n| match layout {
        WeightLayout::Panels => values[k * columns + n],
        _ => values[n * depth + k],
    });
    let dims: Vec<usize> = std::iter::once(columns.div_ceil(PANEL))
        .chain(depth_dims.iter().copied())
        .chain([PANEL])
        .collect();
    Tensor::from_slice(&packed, &dims)
}

/// A float32 matrix stored `[K, N]` (`Bf16Panels`) or `[N, K]` (`Bf16TransposedPanels`)
/// rounded to bf16 and packed in the bf16 dense kernels' panels of pairs, `[ceil(N / 64),
/// ceil(K / 2), 64]` (each float32 slot holds a pair's bits).
fn bf16_panels(shape: &[usize], data: &[u8], layout: WeightLayout) -> Result<Tensor> {
    let values = floats(data);
    let (depth, columns) = match layout {
        WeightLayout::Bf16Panels => (shape[0], shape[1]),
        _ => (shape[1], shape[0]),
    };
    let packed = relax_kernels::weights::pack_bf16_panels(depth, columns, |k, n| match layout {
        WeightLayout::Bf16Panels => values[k * columns + n],
        _ => values[n * depth + k],
    });
    Tensor::from_slice(
        &packed,
        &[columns.div_ceil(PANEL), depth.div_ceil(2), PANEL],
    )
}

/// A float32 convolution kernel stored `[out, in, kh, kw]` rounded to bf16 and packed in
/// the bf16 blocked convolutions' filter panels of pairs, `[ceil(out / 64), ceil(in / 2),
/// kh, kw, 64]` (the shape was checked).
fn bf16_filter_panels(shape: &[usize], data: &[u8]) -> Result<Tensor> {
    let (filters, channels, kernel) = (shape[0], shape[1], (shape[2], shape[3]));
    let packed =
        relax_kernels::weights::pack_bf16_filter_panels(filters, channels, kernel, &floats(data));
    Tensor::from_slice(
        &packed,
        &[
            filters.div_ceil(PANEL),
            channels.div_ceil(2),
            kernel.0,
            kernel.1,
            PANEL,
        ],
    )
}

/// A float32 tensor stored `[.., a, b]` as `[.., b, a]`.
fn transposed(shape: &[usize], data: &[u8]) -> Result<Tensor> {
    let values = floats(data);
    let (rows, columns) = (shape[shape.len() - 2], shape[shape.len() - 1]);
    let mut swapped = vec![0f32; values.len()];
    for (from, to) in values
        .chunks_exact((rows * columns).max(1))
        .zip(swapped.chunks_exact_mut((rows * columns).max(1)))
    {
        for (row, values) in from.chunks_exact(columns.max(1)).enumerate() {
            for (column, &value) in values.iter().enumerate() {
                to[column * rows + row] = value;
            }
        }
    }
    let mut dims = shape.to_vec();
    let last = dims.len() - 1;
    dims.swap(last - 1, last);
    Tensor::from_slice(&swapped, &dims)
}

fn dtype_of(dtype: StDtype) -> Option<DType> {
    Some(match dtype {
        StDtype::BOOL => DType::BOOL,
        StDtype::U8 => DType::U8,
        StDtype::I8 => DType::I8,
        StDtype::I16 => DType::I16,
        StDtype::U16 => DType::U16,
        StDtype::F16 => DType::F16,
        StDtype::BF16 => DType::BF16,
        StDtype::I32 => DType::I32,
        StDtype::U32 => DType::U32,
        StDtype::F32 => DType::F32,
        StDtype::F64 => DType::F64,
        StDtype::I64 => DType::I64,
        StDtype::U64 => DType::U64,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// safetensors bytes holding one float32 tensor `w` of shape [2, 3] = 0..6.
    fn file() -> Vec<u8> {
        let data: Vec<u8> = (0..6)
            .flat_map(|value| (value as f32).to_le_bytes())
            .collect();
        let view = safetensors::tensor::TensorView::new(StDtype::F32, vec![2, 3], &data).unwrap();
        safetensors::serialize([("w", view)], &None).unwrap()
    }

    #[test]
    fn a_packed_weight_must_come_out_in_the_shape_the_function_takes() {
        let dims = [
            Dim::Static(2),
            Dim::Symbolic("n".to_string()),
            Dim::Static(64),
        ];
        assert!(fits(&[2, 7, 64], &dims));
        assert!(!fits(&[2, 7, 32], &dims));
        assert!(!fits(&[2, 7], &dims));
        assert!(!fits(&[2, 7, 64, 1], &dims));
    }

    #[test]
    fn a_weight_packed_by_one_function_stays_as_stored_for_another() {
        let function = |name: &str, shape: &str, layout: &str| {
            format!(
                r#"{{"name": "{name}", "inputs": [], "outputs": [], "returns_tuple": false,
                "weights": [{{"name": "w", "dtype": "float32", "shape": {shape}, "layout": "{layout}", "columns": 2}}]}}"#
            )
        };
        let json = format!(
            r#"{{"model": "m", "tvm_version": "0.27.0.post1", "target": "{{}}", "functions": [{}, {}]}}"#,
            function("plain", "[2, 3]", "stored"),
            function("packing", "[1, 3, 64]", "transposed_panels")
        );
        let signature = ModelSignature::from_json("m", &json).unwrap();
        let weights = load(&signature, Some(&file())).unwrap();
        assert_eq!(weights[0][0].shape(), [2, 3]);
        assert_eq!(
            weights[0][0].as_slice::<f32>().unwrap(),
            [0., 1., 2., 3., 4., 5.]
        );
        // Stored [N = 2, K = 3]: panel row k holds w[0][k], w[1][k], then zeros.
        assert_eq!(weights[1][0].shape(), [1, 3, 64]);
        let packed = weights[1][0].as_slice::<f32>().unwrap();
        for (k, row) in packed.chunks_exact(64).enumerate() {
            assert_eq!(row[..2], [k as f32, 3.0 + k as f32]);
            assert!(row[2..].iter().all(|&value| value == 0.0));
        }
    }

    #[test]
    fn a_transposed_weight_has_its_last_two_dims_swapped() {
        let json = r#"{"model": "m", "tvm_version": "0.27.0.post1", "target": "{}", "functions": [
            {"name": "main", "inputs": [], "outputs": [], "returns_tuple": false,
             "weights": [{"name": "w", "dtype": "float32", "shape": [3, 2], "layout": "transposed"}]}]}"#;
        let signature = ModelSignature::from_json("m", json).unwrap();
        let weights = load(&signature, Some(&file())).unwrap();
        assert_eq!(weights[0][0].shape(), [3, 2]);
        assert_eq!(
            weights[0][0].as_slice::<f32>().unwrap(),
            [0., 3., 1., 4., 2., 5.]
        );
        // Taken as [2, 3] it would be stored [3, 2], which the file's [2, 3] is not.
        let wrong = json.replace("[3, 2]", "[2, 3]");
        let signature = ModelSignature::from_json("m", &wrong).unwrap();
        let error = load(&signature, Some(&file())).unwrap_err().to_string();
        assert!(
            error.contains("but the model expects float32[3, 2]"),
            "{error}"
        );
    }

    #[test]
    fn a_packed_weight_whose_panels_do_not_fit_its_columns_is_an_error() {
        let json = r#"{"model": "m", "tvm_version": "0.27.0.post1", "target": "{}", "functions": [
            {"name": "main", "inputs": [], "outputs": [], "returns_tuple": false,
             "weights": [{"name": "w", "dtype": "float32", "shape": [2, 3, 64], "layout": "panels", "columns": 2}]}]}"#;
        let signature = ModelSignature::from_json("m", json).unwrap();
        let error = load(&signature, Some(&file())).unwrap_err().to_string();
        assert!(error.contains("which that layout cannot be"), "{error}");
    }

    #[test]
    fn a_bf16_weight_is_rounded_into_panels_of_pairs_and_needs_its_depth() {
        // Stored [N = 2, K = 3] (0..6): taken as [1, ceil(3 / 2) = 2, 64] bf16 pairs.
        let json = r#"{"model": "m", "tvm_version": "0.27.0.post1", "target": "{}", "functions": [
            {"name": "main", "inputs": [], "outputs": [], "returns_tuple": false,
             "weights": [{"name": "w", "dtype": "float32", "shape": [1, 2, 64],
                          "layout": "bf16_transposed_panels", "columns": 2, "depth": 3}]}]}"#;
        let signature = ModelSignature::from_json("m", json).unwrap();
        let weights = load(&signature, Some(&file())).unwrap();
        assert_eq!(weights[0][0].shape(), [1, 2, 64]);
        let words: Vec<u32> = weights[0][0]
            .as_slice::<f32>()
            .unwrap()
            .iter()
            .map(|value| value.to_bits())
            .collect();
        let bf16 = |value: f32| relax_kernels::weights::round_bf16(value) as u32;
        // Pair row p of column n holds w[n][2p] low and w[n][2p + 1] high (0 past K).
        assert_eq!(words[0], bf16(0.0) | bf16(1.0) << 16);
        assert_eq!(words[1], bf16(3.0) | bf16(4.0) << 16);
        assert_eq!(words[64], bf16(2.0));
        assert_eq!(words[65], bf16(5.0));
        assert!(words[2..64]
            .iter()
            .chain(&words[66..])
            .all(|&word| word == 0));
        // Without the depth, or with one the panels cannot hold, the layout cannot be.
        for wrong in [r#", "depth": 3"#, r#", "depth": 5"#] {
            let json = json.replace(
                r#", "depth": 3"#,
                if wrong.contains('5') { wrong } else { "" },
            );
            let signature = ModelSignature::from_json("m", &json).unwrap();
            let error = load(&signature, Some(&file())).unwrap_err().to_string();
            assert!(error.contains("which that layout cannot be"), "{error}");
        }
    }

    /// safetensors bytes holding one float32 tensor `k` of shape [2, 1, 3, 3].
    fn kernels_file(values: &[f32]) -> Vec<u8> {
        let data: Vec<u8> = values
            .iter()
            .flat_map(|value| value.to_le_bytes())
            .collect();
        let view =
            safetensors::tensor::TensorView::new(StDtype::F32, vec![2, 1, 3, 3], &data).unwrap();
        safetensors::serialize([("k", view)], &None).unwrap()
    }

    fn kernels_signature(shape: &str, layout: &str) -> ModelSignature {
        signature_with_weight(&format!(r#""shape": {shape}, "layout": "{layout}""#))
    }

    /// The signature of a weight `k` packed in `layout` as `shape`, of `columns` filters.
    fn packed_kernels_signature(shape: &str, layout: &str, columns: usize) -> ModelSignature {
        signature_with_weight(&format!(
            r#""shape": {shape}, "layout": "{layout}", "columns": {columns}"#
        ))
    }

    /// The signature of one function taking one float32 weight `k` described by `fields`.
    fn signature_with_weight(fields: &str) -> ModelSignature {
        let json = format!(
            r#"{{"model": "m", "tvm_version": "0.27.0.post1", "target": "{{}}", "functions": [
            {{"name": "main", "inputs": [], "outputs": [], "returns_tuple": false,
              "weights": [{{"name": "k", "dtype": "float32", {fields}}}]}}]}}"#
        );
        ModelSignature::from_json("m", &json).unwrap()
    }

    #[test]
    fn a_winograd_weight_is_transformed_at_load() {
        let values: Vec<f32> = (0..18).map(|value| value as f32 * 0.5 - 3.0).collect();
        for (layout, tile) in [
            ("winograd", WinogradTile::Two),
            ("winograd4", WinogradTile::Four),
        ] {
            let shape = format!("[{}, 1, 2]", tile.values());
            let weights = load(
                &kernels_signature(&shape, layout),
                Some(&kernels_file(&values)),
            )
            .unwrap();
            assert_eq!(weights[0][0].shape(), [tile.values() as i64, 1, 2]);
            assert_eq!(
                weights[0][0].as_slice::<f32>().unwrap(),
                relax_kernels::weights::winograd(&values, 2, 1, tile)
            );
        }
    }

    #[test]
    fn a_convolution_kernel_is_packed_in_filter_panels_at_load_or_refused_when_they_do_not_fit() {
        let values: Vec<f32> = (0..18).map(|value| value as f32).collect();
        let signature = |shape: &str| packed_kernels_signature(shape, "filter_panels", 2);
        let weights = load(&signature("[1, 1, 3, 3, 64]"), Some(&kernels_file(&values))).unwrap();
        assert_eq!(weights[0][0].shape(), [1, 1, 3, 3, 64]);
        let packed = weights[0][0].as_slice::<f32>().unwrap();
        // Value k of filter f (stored at f * 9 + k) is at k * 64 + f; the padding is 0.
        for k in 0..9 {
            assert_eq!(packed[k * 64..k * 64 + 3], [k as f32, 9.0 + k as f32, 0.0]);
        }
        for shape in ["[2, 1, 3, 3, 64]", "[1, 1, 3, 3, 32]", "[1, 1, 3, 64]"] {
            let error = load(&signature(shape), Some(&kernels_file(&values)))
                .unwrap_err()
                .to_string();
            assert!(
                error.contains("which that layout cannot be"),
                "{shape}: {error}"
            );
        }
    }

    #[test]
    fn a_bf16_convolution_kernel_is_rounded_into_filter_panels_of_pairs_and_needs_its_depth() {
        // Two filters of one channel ([2, 1, 3, 3], values 0..18): one panel of one pair,
        // the high half of each word (channel 1) zero.
        let values: Vec<f32> = (0..18).map(|value| value as f32 + 0.5).collect();
        let signature = |depth: &str| {
            signature_with_weight(&format!(
                r#""shape": [1, 1, 3, 3, 64], "layout": "bf16_filter_panels", "columns": 2{depth}"#
            ))
        };
        let weights = load(&signature(r#", "depth": 1"#), Some(&kernels_file(&values))).unwrap();
        assert_eq!(weights[0][0].shape(), [1, 1, 3, 3, 64]);
        let words: Vec<u32> = weights[0][0]
            .as_slice::<f32>()
            .unwrap()
            .iter()
            .map(|value| value.to_bits())
            .collect();
        let bf16 = |value: f32| u32::from(relax_kernels::weights::round_bf16(value));
        // Tap k of filter f (stored at f * 9 + k) is the low half of word k * 64 + f.
        for k in 0..9 {
            assert_eq!(
                words[k * 64..k * 64 + 3],
                [bf16(values[k]), bf16(values[9 + k]), 0]
            );
        }
        // Without the depth, or with one the pairs cannot hold, the layout cannot be.
        for depth in ["", r#", "depth": 3"#] {
            let error = load(&signature(depth), Some(&kernels_file(&values)))
                .unwrap_err()
                .to_string();
            assert!(
                error.contains("which that layout cannot be"),
                "{depth}: {error}"
            );
        }
    }

    #[test]
    fn a_kernel_is_transformed_to_blocked_winograd_form_at_load_or_refused_when_it_does_not_fit() {
        // Two filters of one channel (`kernels_file`: [2, 1, 3, 3]), in F(2x2, 3x3)'s form
        // and in F(4x4, 3x3)'s.
        let values: Vec<f32> = (0..18).map(|value| value as f32 * 0.5 - 3.0).collect();
        for (layout, tile, other) in [
            ("blocked_winograd", WinogradTile::Two, 36),
            ("blocked_winograd4", WinogradTile::Four, 16),
        ] {
            let count = tile.values();
            let signature = |shape: &str| packed_kernels_signature(shape, layout, 2);
            let shape = format!("[{count}, 1, 1, 64]");
            let weights = load(&signature(&shape), Some(&kernels_file(&values))).unwrap();
            assert_eq!(weights[0][0].shape(), [count as i64, 1, 1, 64]);
            let transformed = weights[0][0].as_slice::<f32>().unwrap();
            // U[ξ] of filter f at ξ * 64 + f, as winograd's `[values, in, out]` has it at
            // ξ * 2 + f.
            let plain = relax_kernels::weights::winograd(&values, 2, 1, tile);
            for xi in 0..count {
                assert_eq!(
                    transformed[xi * 64..xi * 64 + 3],
                    [plain[xi * 2], plain[xi * 2 + 1], 0.0],
                    "{layout}"
                );
            }
            for shape in [
                format!("[{count}, 2, 1, 64]"),
                format!("[{other}, 1, 1, 64]"),
                format!("[{count}, 1, 1, 32]"),
                format!("[{count}, 1, 64]"),
            ] {
                let error = load(&signature(&shape), Some(&kernels_file(&values)))
                    .unwrap_err()
                    .to_string();
                assert!(
                    error.contains("which that layout cannot be"),
                    "{layout} {shape}: {error}"
                );
            }
        }
    }

    #[test]
    fn a_winograd_weight_of_the_wrong_shape_is_an_error() {
        let values = vec![0f32; 18];
        for (shape, layout, expected) in [
            (
                "[16, 2, 2]",
                "winograd",
                "but the model expects float32[2, 2, 3, 3]",
            ),
            (
                "[36, 2, 2]",
                "winograd4",
                "but the model expects float32[2, 2, 3, 3]",
            ),
            ("[16, 2]", "winograd", "which that layout cannot be"),
            ("[9, 1, 2]", "winograd", "which that layout cannot be"),
            ("[36, 1, 2]", "winograd", "which that layout cannot be"),
            ("[16, 1, 2]", "winograd4", "which that layout cannot be"),
        ] {
            let error = load(
                &kernels_signature(shape, layout),
                Some(&kernels_file(&values)),
            )
            .unwrap_err()
            .to_string();
            assert!(error.contains(expected), "{shape} {layout}: {error}");
        }
    }
}
