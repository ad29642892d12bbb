//! Element types of tensors, in TVM's naming (`float32`, `int64`, `bool`, ...).

use std::fmt;

use crate::sys;

/// A tensor element type: DLPack's type code, bit width and vector lanes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DType {
    /// DLPack's type code (int, uint, float, bfloat, bool).
    pub code: u8,
    /// Bits per lane.
    pub bits: u8,
    /// Vector lanes (1 for scalars).
    pub lanes: u16,
}

const INT: u8 = sys::DLDataTypeCode_kDLInt as u8;
const UINT: u8 = sys::DLDataTypeCode_kDLUInt as u8;
const FLOAT: u8 = sys::DLDataTypeCode_kDLFloat as u8;
const BFLOAT: u8 = sys::DLDataTypeCode_kDLBfloat as u8;
const BOOL: u8 = sys::DLDataTypeCode_kDLBool as u8;

/// The 8-bit float formats, by TVM's name and DLPack's code: one byte each, read and
/// written as bytes ([`Tensor::as_bytes`](crate::Tensor::as_bytes)).
const FLOAT8: [(&str, u8); 5] = [
    ("float8_e4m3fn", sys::DLDataTypeCode_kDLFloat8_e4m3fn as u8),
    (
        "float8_e4m3fnuz",
        sys::DLDataTypeCode_kDLFloat8_e4m3fnuz as u8,
    ),
    ("float8_e5m2", sys::DLDataTypeCode_kDLFloat8_e5m2 as u8),
    (
        "float8_e5m2fnuz",
        sys::DLDataTypeCode_kDLFloat8_e5m2fnuz as u8,
    ),
    (
        "float8_e8m0fnu",
        sys::DLDataTypeCode_kDLFloat8_e8m0fnu as u8,
    ),
];

impl DType {
    /// `float16`.
    pub const F16: DType = DType::scalar(FLOAT, 16);
    /// `float32`.
    pub const F32: DType = DType::scalar(FLOAT, 32);
    /// `float64`.
    pub const F64: DType = DType::scalar(FLOAT, 64);
    /// `bfloat16`.
    pub const BF16: DType = DType::scalar(BFLOAT, 16);
    /// `int8`.
    pub const I8: DType = DType::scalar(INT, 8);
    /// `int16`.
    pub const I16: DType = DType::scalar(INT, 16);
    /// `int32`.
    pub const I32: DType = DType::scalar(INT, 32);
    /// `int64`.
    pub const I64: DType = DType::scalar(INT, 64);
    /// `uint8`.
    pub const U8: DType = DType::scalar(UINT, 8);
    /// `uint16`.
    pub const U16: DType = DType::scalar(UINT, 16);
    /// `uint32`.
    pub const U32: DType = DType::scalar(UINT, 32);
    /// `uint64`.
    pub const U64: DType = DType::scalar(UINT, 64);
    /// `bool, one byte holding 0 or 1`.
    pub const BOOL: DType = DType::scalar(BOOL, 8);

    const fn scalar(code: u8, bits: u8) -> DType {
        DType {
            code,
            bits,
            lanes: 1,
        }
    }

    /// Parses TVM's name of a scalar type: `float32`, `int64`, `uint8`, `bool`, `bfloat16`,
    /// or an 8-bit float format (`float8_e4m3fn`, `float8_e5m2`, `float8_e8m0fnu`, ...).
    pub fn parse(name: &str) -> Option<DType> {
        if name == "bool" {
            return Some(DType::BOOL);
        }
        if let Some((_, code)) = FLOAT8.iter().find(|(float8, _)| *float8 == name) {
            return Some(DType::scalar(*code, 8));
        }
        let (code, bits) = [
            ("bfloat", BFLOAT),
            ("float", FLOAT),
            ("uint", UINT),
            ("int", INT),
        ]
        .iter()
        .find_map(|(prefix, code)| Some((*code, name.strip_prefix(prefix)?)))?;
        let bits: u8 = bits.parse().ok()?;
        let valid = match code {
            FLOAT => matches!(bits, 16 | 32 | 64),
            BFLOAT => bits == 16,
            _ => matches!(bits, 8 | 16 | 32 | 64),
        };
        valid.then_some(DType::scalar(code, bits))
    }

    /// Whether the type is a signed or unsigned integer (`bool` is not).
    pub fn is_integer(self) -> bool {
        matches!(self.code, INT | UINT)
    }

    /// Bytes taken by one element (all lanes).
    pub fn size_in_bytes(self) -> usize {
        (self.bits as usize * self.lanes as usize).div_ceil(8)
    }

    /// Bytes that `elements` values take in a tensor, as TVM allocates them
    /// (`GetDataSize`): values narrower than a byte (`int4`, ...) are packed and the
    /// whole tensor is rounded up to a byte once, while `uint1` takes a byte per value.
    /// `None` when the count overflows.
    pub fn bytes_for(self, elements: usize) -> Option<usize> {
        if self.code == UINT && self.bits == 1 && self.lanes == 1 {
            return Some(elements);
        }
        let bits = elements
            .checked_mul(self.bits as usize)?
            .checked_mul(self.lanes as usize)?;
        Some(bits.div_ceil(8))
    }

    pub(crate) fn to_dlpack(self) -> sys::DLDataType {
        sys::DLDataType {
            code: self.code,
            bits: self.bits,
            lanes: self.lanes,
        }
    }

    pub(crate) fn from_dlpack(dtype: sys::DLDataType) -> Self {
        DType {
            code: dtype.code,
            bits: dtype.bits,
            lanes: dtype.lanes,
        }
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let base = match self.code {
            BOOL => return f.write_str("bool"),
            INT => "int",
            UINT => "uint",
            FLOAT => "float",
            BFLOAT => "bfloat",
            other => match FLOAT8.iter().find(|(_, code)| *code == other) {
                Some((name, _)) if self.bits == 8 => name,
                _ => {
                    return write!(
                        f,
                        "dtype(code={other}, bits={}, lanes={})",
                        self.bits, self.lanes
                    )
                }
            },
        };
        f.write_str(base)?;
        if !base.starts_with("float8_") {
            write!(f, "{}", self.bits)?;
        }
        if self.lanes != 1 {
            write!(f, "x{}", self.lanes)?;
        }
        Ok(())
    }
}

mod sealed {
    pub trait Sealed {}
}

/// A Rust type whose values can be tensor elements.
///
/// float16 and bfloat16 elements are `half::f16` / `half::bf16` with the `half` feature;
/// without it, read and write their bits with [`Tensor::as_bytes`](crate::Tensor::as_bytes)
/// and [`Tensor::from_bytes`](crate::Tensor::from_bytes).
///
/// Sealed: every implementation is plain data for which each bit pattern of its size
/// is valid, except `bool`, whose tensors are checked to hold only 0 and 1.
pub trait Element: sealed::Sealed + Copy + Send + Sync + 'static {
    /// The tensor element type of `Self`.
    const DTYPE: DType;
}

macro_rules! element {
    ($($rust:ty => $dtype:ident),* $(,)?) => {$(
        impl sealed::Sealed for $rust {}
        impl Element for $rust {
            const DTYPE: DType = DType::$dtype;
        }
    )*};
}

element! {
    f32 => F32, f64 => F64,
    i8 => I8, i16 => I16, i32 => I32, i64 => I64,
    u8 => U8, u16 => U16, u32 => U32, u64 => U64,
    bool => BOOL,
}

#[cfg(feature = "half")]
element! { half::f16 => F16, half::bf16 => BF16 }

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for name in [
            "float16",
            "float32",
            "float64",
            "bfloat16",
            "int8",
            "int16",
            "int32",
            "int64",
            "uint8",
            "uint16",
            "uint32",
            "uint64",
            "bool",
            "float8_e4m3fn",
            "float8_e4m3fnuz",
            "float8_e5m2",
            "float8_e5m2fnuz",
            "float8_e8m0fnu",
        ] {
            let dtype = DType::parse(name).unwrap_or_else(|| panic!("{name} should parse"));
            assert_eq!(dtype.to_string(), name);
        }
    }

    #[test]
    fn integers_are_the_int_and_uint_types() {
        let integers = [
            "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
        ];
        for name in ["float16", "float32", "bfloat16", "bool", "float8_e5m2"]
            .into_iter()
            .chain(integers)
        {
            let dtype = DType::parse(name).unwrap_or_else(|| panic!("{name} should parse"));
            assert_eq!(dtype.is_integer(), integers.contains(&name), "{name}");
        }
    }

    #[test]
    fn rejects_unknown_names() {
        for name in [
            "float",
            "float8",
            "int7",
            "f32",
            "uint",
            "bfloat32",
            "float8_e4m3",
            "",
        ] {
            assert_eq!(DType::parse(name), None, "{name} should not parse");
        }
    }

    #[test]
    fn sub_byte_types_round_up_once_per_tensor() {
        let int4 = DType {
            code: INT,
            bits: 4,
            lanes: 1,
        };
        // Three int4 values share two bytes, not one byte each.
        assert_eq!(int4.bytes_for(3), Some(2));
        assert_eq!(int4.bytes_for(4), Some(2));
        assert_eq!(int4.bytes_for(0), Some(0));
        let int4x2 = DType { lanes: 2, ..int4 };
        assert_eq!(int4x2.bytes_for(3), Some(3));
        // TVM keeps uint1 one byte per value (its bool before kDLBool).
        let uint1 = DType {
            code: UINT,
            bits: 1,
            lanes: 1,
        };
        assert_eq!(uint1.bytes_for(3), Some(3));
        assert_eq!(DType::BOOL.bytes_for(3), Some(3));
        assert_eq!(DType::F32.bytes_for(3), Some(12));
        assert_eq!(DType::I64.bytes_for(usize::MAX), None);
    }

    #[cfg(feature = "half")]
    #[test]
    fn half_elements_round_trip() {
        let values = [half::f16::from_f32(1.5), half::f16::from_f32(-2.0)];
        let tensor = crate::Tensor::from_slice(&values, &[2]).unwrap();
        assert_eq!(tensor.dtype(), DType::F16);
        assert_eq!(tensor.as_slice::<half::f16>().unwrap(), &values);
        assert_eq!(tensor.as_bytes().unwrap(), &[0x00, 0x3e, 0x00, 0xc0]);
    }

    #[test]
    fn element_sizes() {
        assert_eq!(DType::F32.size_in_bytes(), 4);
        assert_eq!(DType::BOOL.size_in_bytes(), 1);
        assert_eq!(DType::I64.size_in_bytes(), 8);
    }
}
