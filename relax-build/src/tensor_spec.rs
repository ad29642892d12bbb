//! Tensor specs as the manifest writes them: `float32[batch, 64]`.

use std::fmt;

/// Dtypes a model input may have.
pub const DTYPES: &[&str] = &[
    "float16", "float32", "float64", "bfloat16", "int8", "int16", "int32", "int64", "uint8",
    "uint16", "uint32", "uint64", "bool",
];

/// `float32[batch, 64]`: a dtype and dims, static or named.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorSpec {
    /// TVM's dtype name.
    pub dtype: String,
    /// The dims, outermost first.
    pub shape: Vec<SpecDim>,
}

/// One dim of a spec: a size, or a name shared by every dim that must be equal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SpecDim {
    /// At most `i64::MAX`, the largest size TVM can represent.
    Static(u64),
    /// A name shared by every dim that must be equal.
    Symbolic(String),
}

impl fmt::Display for SpecDim {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SpecDim::Static(size) => write!(f, "{size}"),
            SpecDim::Symbolic(name) => f.write_str(name),
        }
    }
}

impl fmt::Display for TensorSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let dims: Vec<String> = self.shape.iter().map(SpecDim::to_string).collect();
        write!(f, "{}[{}]", self.dtype, dims.join(", "))
    }
}

const USAGE: &str = "expected \"<dtype>[<dims>]\" like \"float32[batch, 64]\"";

/// Parses `float32[batch, 64]` (a scalar is `float32[]`).
pub fn parse(text: &str) -> Result<TensorSpec, String> {
    let (dtype, rest) = text
        .trim()
        .split_once('[')
        .ok_or_else(|| format!("{USAGE}, found \"{text}\" (no `[`)"))?;
    let dims = rest
        .trim_end()
        .strip_suffix(']')
        .ok_or_else(|| format!("{USAGE}, found \"{text}\" (no closing `]`)"))?;
    let dtype = dtype.trim();
    if dtype.is_empty() {
        return Err(format!(
            "{USAGE}, found \"{text}\": the dtype is missing before `[`; write e.g. \"float32{}\"",
            &text.trim()[text.trim().find('[').unwrap_or(0)..]
        ));
    }
    if !DTYPES.contains(&dtype) {
        return Err(format!(
            "{USAGE}, found \"{text}\": unknown dtype `{dtype}`; use one of {}",
            DTYPES.join(", ")
        ));
    }
    let mut shape = Vec::new();
    if !dims.trim().is_empty() {
        for dim in dims.split(',') {
            shape.push(parse_dim(dim.trim(), text)?);
        }
    }
    Ok(TensorSpec {
        dtype: dtype.to_string(),
        shape,
    })
}

fn parse_dim(dim: &str, text: &str) -> Result<SpecDim, String> {
    if !dim.is_empty() && dim.bytes().all(|byte| byte.is_ascii_digit()) {
        return match dim.parse::<i64>() {
            Ok(size) => Ok(SpecDim::Static(size as u64)),
            Err(_) => Err(format!(
                "{USAGE}, found \"{text}\": dim `{dim}` is larger than the largest size a tensor can have ({})",
                i64::MAX
            )),
        };
    }
    if is_dim_name(dim) {
        return Ok(SpecDim::Symbolic(dim.to_string()));
    }
    Err(format!(
        "{USAGE}, found \"{text}\": dim `{dim}` is neither a size nor a name"
    ))
}

/// A symbolic dim's name: `[A-Za-z_][A-Za-z0-9_]*`.
pub fn is_dim_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn static_and_symbolic_dims_parse() {
        let spec = parse("float32[batch, 64]").unwrap();
        assert_eq!(spec.dtype, "float32");
        assert_eq!(
            spec.shape,
            vec![SpecDim::Symbolic("batch".to_string()), SpecDim::Static(64)]
        );
        assert_eq!(parse("int64[]").unwrap().shape, Vec::new());
        assert_eq!(spec.to_string(), "float32[batch, 64]");
    }

    #[test]
    fn errors_say_what_is_wrong() {
        assert!(parse("float32").unwrap_err().contains("(no `[`)"));
        assert!(parse("float32[1, 2")
            .unwrap_err()
            .contains("(no closing `]`)"));
        assert!(parse("float32[1, 2x]")
            .unwrap_err()
            .contains("dim `2x` is neither a size nor a name"));
        assert!(parse("f32[1]").unwrap_err().contains("unknown dtype `f32`"));
    }

    #[test]
    fn a_missing_dtype_is_named_as_missing() {
        let error = parse("[batch, 16]").unwrap_err();
        assert!(
            error.contains("the dtype is missing before `[`; write e.g. \"float32[batch, 16]\""),
            "{error}"
        );
        assert!(!error.contains("unknown dtype ``"), "{error}");
    }

    #[test]
    fn sizes_beyond_i64_are_refused() {
        let error = parse("float32[9223372036854775808, 64]").unwrap_err();
        assert!(error.contains("larger than the largest size"), "{error}");
        assert_eq!(
            parse("float32[9223372036854775807]").unwrap().shape,
            vec![SpecDim::Static(i64::MAX as u64)]
        );
    }
}
