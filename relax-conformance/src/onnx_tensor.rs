//! ONNX `TensorProto` files (`input_0.pb`, `output_0.pb`) decoded into relax-runtime tensors.

use prost::Message;
use relax_runtime::{DType, Tensor};

/// The fields of onnx.TensorProto that test data uses.
#[derive(Clone, PartialEq, Message)]
struct TensorProto {
    #[prost(int64, repeated, tag = "1")]
    dims: Vec<i64>,
    #[prost(int32, tag = "2")]
    data_type: i32,
    #[prost(float, repeated, tag = "4")]
    float_data: Vec<f32>,
    #[prost(int32, repeated, tag = "5")]
    int32_data: Vec<i32>,
    #[prost(bytes = "vec", repeated, tag = "6")]
    string_data: Vec<Vec<u8>>,
    #[prost(int64, repeated, tag = "7")]
    int64_data: Vec<i64>,
    #[prost(string, tag = "8")]
    name: String,
    #[prost(bytes = "vec", tag = "9")]
    raw_data: Vec<u8>,
    #[prost(double, repeated, tag = "10")]
    double_data: Vec<f64>,
    #[prost(uint64, repeated, tag = "11")]
    uint64_data: Vec<u64>,
}

/// ONNX's element type numbers -> dtypes (None: strings and other unsupported types).
fn dtype_of(data_type: i32) -> Option<DType> {
    Some(match data_type {
        1 => DType::F32,
        2 => DType::U8,
        3 => DType::I8,
        4 => DType::U16,
        5 => DType::I16,
        6 => DType::I32,
        7 => DType::I64,
        9 => DType::BOOL,
        10 => DType::F16,
        11 => DType::F64,
        12 => DType::U32,
        13 => DType::U64,
        16 => DType::BF16,
        17 => DType::parse("float8_e4m3fn")?,
        18 => DType::parse("float8_e4m3fnuz")?,
        19 => DType::parse("float8_e5m2")?,
        20 => DType::parse("float8_e5m2fnuz")?,
        24 => DType::parse("float8_e8m0fnu")?,
        _ => return None,
    })
}

/// Reads one `.pb` file into a CPU tensor.
pub fn read(path: &std::path::Path) -> Result<Tensor, String> {
    let bytes =
        std::fs::read(path).map_err(|error| format!("cannot read {}: {error}", path.display()))?;
    let proto = TensorProto::decode(bytes.as_slice())
        .map_err(|error| format!("{} is not a TensorProto: {error}", path.display()))?;
    let dtype = dtype_of(proto.data_type)
        .ok_or_else(|| format!("element type {} is not supported", proto.data_type))?;
    let shape: Vec<usize> = proto.dims.iter().map(|&dim| dim as usize).collect();
    let data = if !proto.raw_data.is_empty() {
        proto.raw_data
    } else {
        typed_data(&proto, dtype)
    };
    Tensor::from_bytes(dtype, &shape, &data).map_err(|error| format!("{}: {error}", path.display()))
}

/// Little-endian element bytes from the typed fields (where raw_data is not used).
fn typed_data(proto: &TensorProto, dtype: DType) -> Vec<u8> {
    let mut out = Vec::new();
    match dtype {
        DType::F32 => proto
            .float_data
            .iter()
            .for_each(|v| out.extend(v.to_le_bytes())),
        DType::F64 => proto
            .double_data
            .iter()
            .for_each(|v| out.extend(v.to_le_bytes())),
        DType::I64 => proto
            .int64_data
            .iter()
            .for_each(|v| out.extend(v.to_le_bytes())),
        DType::U32 | DType::U64 => proto.uint64_data.iter().for_each(|v| {
            let bytes = v.to_le_bytes();
            out.extend(&bytes[..dtype.size_in_bytes()]);
        }),
        // int32_data carries every type of 32 bits or fewer (float16 as its bits).
        _ => proto.int32_data.iter().for_each(|v| {
            let bytes = v.to_le_bytes();
            out.extend(&bytes[..dtype.size_in_bytes()]);
        }),
    }
    let _ = (&proto.string_data, &proto.name);
    out
}

/// Element values as f64 for comparison (float16, bfloat16 and the 8-bit floats widened
/// from their bits).
pub fn values(tensor: &Tensor) -> Result<Vec<f64>, String> {
    let bytes = tensor.as_bytes().map_err(|error| error.to_string())?;
    let dtype = tensor.dtype();
    let name = dtype.to_string();
    if name.starts_with("float8_") {
        return Ok(bytes
            .iter()
            .map(|&byte| float8_to_f64(&name, byte))
            .collect());
    }
    let size = dtype.size_in_bytes();
    let read = |chunk: &[u8]| -> f64 {
        let mut word = [0u8; 8];
        word[..size].copy_from_slice(chunk);
        let unsigned = u64::from_le_bytes(word);
        match dtype {
            DType::F32 => f32::from_bits(unsigned as u32) as f64,
            DType::F64 => f64::from_bits(unsigned),
            DType::F16 => f16_to_f64(unsigned as u16),
            DType::BF16 => f32::from_bits((unsigned as u32) << 16) as f64,
            DType::I8 => unsigned as u8 as i8 as f64,
            DType::I16 => unsigned as u16 as i16 as f64,
            DType::I32 => unsigned as u32 as i32 as f64,
            DType::I64 => unsigned as i64 as f64,
            _ => unsigned as f64,
        }
    };
    Ok(bytes.chunks_exact(size).map(read).collect())
}

/// The value of one byte of the 8-bit float format TVM names `name`.
fn float8_to_f64(name: &str, byte: u8) -> f64 {
    if name == "float8_e8m0fnu" {
        // A power of two, 0xff is NaN.
        return if byte == 0xff {
            f64::NAN
        } else {
            2f64.powi(i32::from(byte) - 127)
        };
    }
    // (exponent bits, bias, NaN/infinity rule)
    let (exponent_bits, bias, format) = match name {
        "float8_e4m3fn" => (4, 7, "fn"),
        "float8_e4m3fnuz" => (4, 8, "fnuz"),
        "float8_e5m2" => (5, 15, "ieee"),
        _ => (5, 16, "fnuz"),
    };
    let mantissa_bits = 7 - exponent_bits;
    let sign = if byte & 0x80 != 0 { -1.0 } else { 1.0 };
    let exponent = i32::from((byte >> mantissa_bits) & ((1 << exponent_bits) - 1));
    let mantissa = f64::from(byte & ((1 << mantissa_bits) - 1));
    let all_ones = (1 << exponent_bits) - 1;
    match format {
        // Only the negative zero's pattern is NaN; there is no infinity.
        "fnuz" if byte == 0x80 => return f64::NAN,
        // Every bit set but the sign's is NaN; there is no infinity.
        "fn" if exponent == all_ones && mantissa == f64::from((1 << mantissa_bits) - 1) => {
            return f64::NAN
        }
        "ieee" if exponent == all_ones => {
            return if mantissa == 0.0 {
                sign * f64::INFINITY
            } else {
                f64::NAN
            }
        }
        _ => {}
    }
    let scale = f64::from(1 << mantissa_bits);
    if exponent == 0 {
        sign * mantissa / scale * 2f64.powi(1 - bias)
    } else {
        sign * (1.0 + mantissa / scale) * 2f64.powi(exponent - bias)
    }
}

fn f16_to_f64(bits: u16) -> f64 {
    let sign = if bits >> 15 == 1 { -1.0 } else { 1.0 };
    let exponent = ((bits >> 10) & 0x1f) as i32;
    let fraction = (bits & 0x3ff) as f64;
    match exponent {
        0 => sign * fraction * 2f64.powi(-24),
        31 if fraction == 0.0 => sign * f64::INFINITY,
        31 => f64::NAN,
        _ => sign * (1.0 + fraction / 1024.0) * 2f64.powi(exponent - 15),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn float8_bits_widen() {
        let cases = [
            ("float8_e8m0fnu", 127, 1.0),
            ("float8_e8m0fnu", 130, 8.0),
            ("float8_e4m3fn", 0x38, 1.0),
            ("float8_e4m3fn", 0x7e, 448.0),
            ("float8_e4m3fn", 0x01, 2f64.powi(-9)),
            ("float8_e4m3fnuz", 0x40, 1.0),
            ("float8_e5m2", 0x3c, 1.0),
            ("float8_e5m2", 0xfc, f64::NEG_INFINITY),
            ("float8_e5m2fnuz", 0x40, 1.0),
        ];
        for (name, byte, expected) in cases {
            assert_eq!(float8_to_f64(name, byte), expected, "{name} {byte:#x}");
        }
        for (name, byte) in [
            ("float8_e8m0fnu", 0xff),
            ("float8_e4m3fn", 0x7f),
            ("float8_e4m3fnuz", 0x80),
            ("float8_e5m2", 0x7d),
        ] {
            assert!(float8_to_f64(name, byte).is_nan(), "{name} {byte:#x}");
        }
    }

    #[test]
    fn float16_bits_widen() {
        assert_eq!(f16_to_f64(0x3c00), 1.0);
        assert_eq!(f16_to_f64(0xc000), -2.0);
        assert_eq!(f16_to_f64(0x0001), 2f64.powi(-24));
        assert!(f16_to_f64(0x7e00).is_nan());
    }

    #[test]
    fn typed_fields_become_little_endian_bytes() {
        let proto = TensorProto {
            dims: vec![2],
            data_type: 7,
            int64_data: vec![1, -2],
            ..TensorProto::default()
        };
        let tensor = Tensor::from_bytes(DType::I64, &[2], &typed_data(&proto, DType::I64)).unwrap();
        assert_eq!(tensor.as_slice::<i64>().unwrap(), &[1, -2]);
        assert_eq!(values(&tensor).unwrap(), vec![1.0, -2.0]);
    }
}
