//! Cargo target -> TVM target dict.
//!
//! TVM 0.27 takes targets only as JSON dicts. The dict is derived from Cargo's `TARGET`
//! (never the host) and the rustflags of the build:
//!
//! | Cargo | TVM |
//! |---|---|
//! | `x86_64-unknown-linux-gnu` | `{"kind": "llvm", "mtriple": "x86_64-unknown-linux-gnu"}` |
//! | `aarch64-unknown-linux-gnu` | `{"kind": "llvm", "mtriple": "aarch64-unknown-linux-gnu", "mattr": ["+neon"]}` |
//! | `-C target-cpu=NAME` | `"mcpu": "NAME"` (`native`: the build machine's CPU, as LLVM names it) |
//! | `-C target-feature=+a,-b` | appended to `"mattr"` |
//!
//! For a cross build (`TARGET` differs from `HOST`), the model library is linked by
//! TVM's `tvm.support.cc.cross_compiler` with the target's C++ compiler, looked up as
//! Cargo and the `cc` crate name it: `CXX_<target>`, `CXX_<target_with_underscores>`,
//! `TARGET_CXX`, `CARGO_TARGET_<TARGET>_LINKER`, else `aarch64-linux-gnu-g++` /
//! `x86_64-linux-gnu-g++`. The host's plain `CC`/`CXX` are never used for a cross build.
//! The linked library's ELF machine is checked against the target before it is used.
//!
//! Like rustc, relax-build compiles for the target's baseline CPU unless told
//! otherwise, so a binary runs on every machine of its target; pass
//! `-C target-cpu=native` (e.g. `RUSTFLAGS="-C target-cpu=native"`) to tune the model
//! code for the build machine as well.

use serde_json::{json, Map, Value};

use crate::cargo::Cargo;
use crate::env;
use crate::error::{Error, Result};

/// Cargo targets relax-build knows how to compile for.
pub const SUPPORTED_TARGETS: &[&str] = &["x86_64-unknown-linux-gnu", "aarch64-unknown-linux-gnu"];

/// The compiler that links model libraries for a cross target, and where it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CrossCompiler {
    pub command: String,
    /// The variable that named it, or "the default for <target>".
    pub origin: String,
}

/// The cross compiler for `cargo_target`, or None when building for the host.
pub fn cross_compiler(cargo: Cargo, cargo_target: &str, host: &str) -> Option<CrossCompiler> {
    if cargo_target == host {
        return None;
    }
    for variable in env::cross_compiler_variables(cargo_target) {
        if let Some(command) = env::var(cargo, &variable) {
            return Some(CrossCompiler {
                command: command.to_string_lossy().into_owned(),
                origin: variable,
            });
        }
    }
    let arch = cargo_target.split('-').next().unwrap_or(cargo_target);
    Some(CrossCompiler {
        command: format!("{arch}-linux-gnu-g++"),
        origin: format!("the default for {cargo_target}"),
    })
}

/// The build machine's CPU as LLVM names it (what `-C target-cpu=native` means), from
/// `rustc --print target-cpus`; only valid when building for the host.
pub fn native_cpu(cargo_target: &str, host: &str) -> Result<String> {
    let error = |message: String| Error::UnsupportedTarget {
        target: cargo_target.to_string(),
        message,
    };
    if cargo_target != host {
        return Err(error(format!(
            "mcpu = \"native\" names the build machine ({host}), not the target; name the target's CPU instead"
        )));
    }
    let rustc = std::env::var(env::RUSTC).unwrap_or_else(|_| "rustc".to_string());
    let output = std::process::Command::new(&rustc)
        .args(["--print", "target-cpus"])
        .output()
        .map_err(|cause| {
            error(format!(
                "cannot run `{rustc} --print target-cpus` to resolve mcpu = \"native\": {cause}"
            ))
        })?;
    let text = String::from_utf8_lossy(&output.stdout);
    text.lines()
        .filter(|line| line.trim_start().starts_with("native"))
        .find_map(|line| line.split("currently ").nth(1))
        .map(|rest| {
            rest.trim_end_matches(|c: char| c == ')' || c == '.' || c.is_whitespace())
                .to_string()
        })
        .ok_or_else(|| {
            error(format!(
                "`{rustc} --print target-cpus` did not name the host CPU; set mcpu by name"
            ))
        })
}

/// The TVM target dict for a Cargo target, given the build's rustflags.
///
/// `rustflags` is `CARGO_ENCODED_RUSTFLAGS` split on its `\x1f` separators.
pub fn tvm_target(cargo_target: &str, host: &str, rustflags: &[String]) -> Result<Value> {
    let mut attributes: Vec<String> = match cargo_target {
        "x86_64-unknown-linux-gnu" => Vec::new(),
        "aarch64-unknown-linux-gnu" => vec!["+neon".to_string()],
        _ => {
            return Err(Error::UnsupportedTarget {
                target: cargo_target.to_string(),
                message: format!(
                    "relax-build has no TVM target for it (supported: {}); give one by hand with \
                     target = {{ kind = \"llvm\", mtriple = \"<llvm triple>\" }} under \
                     [package.metadata.relax] or a model, or in RELAX_<MODEL>_TARGET as JSON",
                    SUPPORTED_TARGETS.join(", ")
                ),
            })
        }
    };
    let codegen = codegen_options(rustflags);
    let mut target = Map::new();
    target.insert("kind".into(), json!("llvm"));
    target.insert("mtriple".into(), json!(cargo_target));
    if let Some(cpu) = codegen
        .iter()
        .rev()
        .find_map(|(key, value)| (key == "target-cpu").then_some(value))
    {
        if cpu == "native" && cargo_target != host {
            return Err(Error::UnsupportedTarget {
                target: cargo_target.to_string(),
                message: format!("-C target-cpu=native names the build machine ({host}), not the target; name the target's CPU instead"),
            });
        }
        let cpu = match cpu.as_str() {
            "native" => native_cpu(cargo_target, host)?,
            name => name.to_string(),
        };
        target.insert("mcpu".into(), json!(cpu));
    }
    for (key, value) in &codegen {
        if key == "target-feature" {
            attributes.extend(
                value
                    .split(',')
                    .filter(|feature| !feature.is_empty())
                    .map(str::to_string),
            );
        }
    }
    if !attributes.is_empty() {
        target.insert("mattr".into(), json!(attributes));
    }
    Ok(Value::Object(target))
}

/// `-C key=value` / `-Ckey=value` / `--codegen key=value` pairs of the rustflags.
fn codegen_options(rustflags: &[String]) -> Vec<(String, String)> {
    let mut options = Vec::new();
    let mut flags = rustflags.iter();
    while let Some(flag) = flags.next() {
        let option = if flag == "-C" || flag == "--codegen" {
            flags.next().cloned()
        } else {
            flag.strip_prefix("-C")
                .or_else(|| flag.strip_prefix("--codegen="))
                .map(str::to_string)
        };
        if let Some((key, value)) = option.as_deref().and_then(|option| option.split_once('=')) {
            options.push((key.to_string(), value.to_string()));
        }
    }
    options
}

/// What a build knows of the target CPU's bf16 hardware: a build for this machine asks
/// its CPU ([`Bf16Hardware::of_host`]); a cross build (even for another x86-64 CPU)
/// assumes none ([`Bf16Hardware::default`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Bf16Hardware {
    /// AVX512-BF16's `vdpbf16ps` (AMX-BF16 implies it).
    pub instructions: bool,
    /// AMX-BF16's tiles: a bf16 build leaves no 3x3 layer to float32 Winograd.
    pub tiles: bool,
    /// bf16 products run faster than float32's: on the tiles, or with `vdpbf16ps` on
    /// AMD's cores (Zen 4 and 5 run it at twice the float32 FMA's flops; the Intel Xeon
    /// measured, at half: relax-kernels' README). Exact integer products of 8-bit values
    /// then run on relax-runtime's bf16 kernels.
    pub faster_than_float32: bool,
}

impl Bf16Hardware {
    /// This machine's CPU.
    pub fn of_host() -> Bf16Hardware {
        let tiles = host_has_amx_bf16();
        let instructions = tiles || host_has_avx512_bf16();
        Bf16Hardware {
            instructions,
            tiles,
            faster_than_float32: tiles || (instructions && host_is_amd()),
        }
    }
}

/// Whether this machine's CPU has AMX-BF16's tiles (`cpuid` leaf 7: AMX-TILE and
/// AMX-BF16; Rust's feature names for AMX are not stable yet).
fn host_has_amx_bf16() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::__cpuid_count;
        const AMX_BF16_AND_TILE: u32 = (1 << 22) | (1 << 24);
        __cpuid_count(0, 0).eax >= 7
            && __cpuid_count(7, 0).edx & AMX_BF16_AND_TILE == AMX_BF16_AND_TILE
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Whether this machine's CPU is AMD's (`cpuid` leaf 0's vendor string).
fn host_is_amd() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        let leaf = std::arch::x86_64::__cpuid(0);
        let vendor: Vec<u8> = [leaf.ebx, leaf.edx, leaf.ecx]
            .iter()
            .flat_map(|word| word.to_le_bytes())
            .collect();
        vendor == b"AuthenticAMD"
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Whether this machine's CPU (and OS) runs AVX512-BF16.
fn host_has_avx512_bf16() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx512f")
            && std::arch::is_x86_feature_detected!("avx512bf16")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOST: &str = "x86_64-unknown-linux-gnu";

    fn flags(text: &str) -> Vec<String> {
        text.split_whitespace().map(str::to_string).collect()
    }

    #[test]
    fn host_target_without_flags_is_the_baseline() {
        let target = tvm_target(HOST, HOST, &[]).unwrap();
        assert_eq!(
            target,
            json!({"kind": "llvm", "mtriple": "x86_64-unknown-linux-gnu"})
        );
    }

    #[test]
    fn aarch64_gets_neon() {
        let target = tvm_target("aarch64-unknown-linux-gnu", HOST, &[]).unwrap();
        assert_eq!(
            target,
            json!({"kind": "llvm", "mtriple": "aarch64-unknown-linux-gnu", "mattr": ["+neon"]})
        );
    }

    #[test]
    fn target_cpu_and_features_come_from_rustflags() {
        let target = tvm_target(
            HOST,
            HOST,
            &flags("-C target-cpu=skylake -Ctarget-feature=+avx2,+fma"),
        )
        .unwrap();
        assert_eq!(
            target,
            json!({"kind": "llvm", "mtriple": HOST, "mcpu": "skylake", "mattr": ["+avx2", "+fma"]})
        );
    }

    #[test]
    fn native_cpu_is_refused_for_a_cross_target() {
        let error = tvm_target(
            "aarch64-unknown-linux-gnu",
            HOST,
            &flags("-C target-cpu=native"),
        )
        .unwrap_err();
        assert!(
            error.to_string().contains("names the build machine"),
            "{error}"
        );
    }

    #[test]
    fn native_cpu_is_resolved_to_a_name() {
        let cpu = native_cpu(HOST, HOST).unwrap();
        assert!(
            !cpu.is_empty() && cpu != "native" && !cpu.contains(' '),
            "{cpu:?}"
        );
    }

    #[test]
    fn host_builds_use_no_cross_compiler() {
        assert_eq!(cross_compiler(Cargo::TOOL, HOST, HOST), None);
    }

    #[test]
    fn unknown_target_lists_the_supported_ones() {
        let error = tvm_target("riscv64gc-unknown-linux-gnu", HOST, &[]).unwrap_err();
        assert_eq!(
            error.to_string(),
            "Cargo target `riscv64gc-unknown-linux-gnu`: relax-build has no TVM target for it \
             (supported: x86_64-unknown-linux-gnu, aarch64-unknown-linux-gnu); give one by hand with \
             target = { kind = \"llvm\", mtriple = \"<llvm triple>\" } under [package.metadata.relax] \
             or a model, or in RELAX_<MODEL>_TARGET as JSON"
        );
    }
}
