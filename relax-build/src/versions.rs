//! The pinned versions relax-build compiles with, in one place.
//!
//! The compile driver gets [`TVM_VERSION`] in every request (it does not repeat the
//! pin), and the managed toolchain installs [`requirements`].

/// The apache-tvm version relax-build supports.
pub const TVM_VERSION: &str = "0.27.0.post1";
/// The apache-tvm-ffi version installed with it (0.1.15 breaks meta-schedule's database).
pub const TVM_FFI_VERSION: &str = "0.1.14.post1";
/// The onnx version installed with it, for `.onnx` sources.
pub const ONNX_VERSION: &str = "1.23.2";
/// The onnxslim version installed with it, for the ONNX preparation step.
pub const ONNXSLIM_VERSION: &str = "0.1.98";

/// The torch version the managed toolchain installs for PyTorch sources (only when a
/// package declares one: with its CUDA libraries it is about 6 GB).
pub const TORCH_VERSION: &str = "2.15.0";

/// The version of the Rust <-> driver protocol; the driver refuses any other.
pub const DRIVER_PROTOCOL: u32 = 1;

/// What the managed toolchain installs; its completion marker records this list, and a
/// toolchain made with another list is completed with pip before use.
pub fn requirements() -> Vec<String> {
    vec![
        format!("apache-tvm=={TVM_VERSION}"),
        format!("apache-tvm-ffi=={TVM_FFI_VERSION}"),
        format!("onnx=={ONNX_VERSION}"),
        format!("onnxslim=={ONNXSLIM_VERSION}"),
        // Meta-schedule tuning (`cargo relax tune`).
        "psutil==7.2.2".to_string(),
        "xgboost-cpu==3.2.0".to_string(),
        "cloudpickle==3.1.3".to_string(),
    ]
}

/// The pip command that installs the pinned TVM into a Python of the user's.
pub fn install_command() -> String {
    format!("python -m pip install apache-tvm=={TVM_VERSION} apache-tvm-ffi=={TVM_FFI_VERSION}")
}
