//! Loading compiled model libraries, without writing a file.
//!
//! A library embedded by `include_model!` is checked against the sha256 relax-build
//! recorded, and its ELF headers against its length and this machine, before anything
//! of it is mapped. Its bytes then go to an in-memory file (`memfd_create`) that TVM's
//! loader opens as `/proc/self/fd/<n>`; the file stays open, and the library loaded,
//! for the life of the process, so a descriptor number is never reused for another
//! library (the dynamic loader recognizes libraries by path). Each embedded library is
//! loaded once per process however many models are loaded from it. With
//! `RELAX_PERF_MAP=1` its functions are named for perf ([`relax_perf_map`]).

use std::ffi::CString;
use std::fs::File;
use std::io::Write;
use std::os::fd::{AsRawFd, FromRawFd};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use sha2::{Digest, Sha256};

use crate::error::{Error, Result};
use crate::object::{self, argument, Callee, Object, Value, LOAD_SHARED_LIBRARY};

/// A loaded model library (a TVM module holding the Relax VM executable).
pub(crate) struct Library {
    module: Object,
    /// Where it came from, for messages (`the library embedded for model `m``, a path).
    pub(crate) origin: String,
    /// The in-memory file it was loaded from, kept open (see the module docs).
    _memory_file: Option<File>,
    /// VMs are made from the library one at a time.
    creating: Mutex<()>,
}

// SAFETY: the library module is immutable once loaded; relax-runtime only looks up and
// calls `vm_load_executable` on it, under `creating`, so no two threads use it at once.
unsafe impl Send for Library {}
// SAFETY: as above: every use goes through `create_vm`, serialized by `creating`.
unsafe impl Sync for Library {}

impl Library {
    /// Makes a new VM module from the library's executable.
    pub(crate) fn create_vm(&self, model: &str) -> Result<Object> {
        let _guard = self
            .creating
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let load_executable = object::module_function(&self.module, "vm_load_executable")?
            .ok_or_else(|| Error::LibraryLoad {
                path: PathBuf::from(&self.origin),
                message: "it is not a Relax VM executable (it has no `vm_load_executable`)"
                    .to_string(),
            })?;
        match object::call(Callee::Object(&load_executable), &mut [], || {
            format!("creating a VM of model `{model}`")
        })? {
            Value::Object(vm) => Ok(vm),
            other => Err(Error::UnexpectedOutput {
                model: model.to_string(),
                function: "vm_load_executable".to_string(),
                expected: "a VM module".to_string(),
                found: other.describe(),
            }),
        }
    }
}

/// Libraries loaded from static bytes, by address and length.
static EMBEDDED: Mutex<Vec<(usize, usize, Arc<Library>)>> = Mutex::new(Vec::new());

/// Loads (once per process) a library embedded in the executable, after checking its
/// sha256 and ELF headers.
pub(crate) fn load_embedded(
    model: &str,
    bytes: &'static [u8],
    sha256: &str,
) -> Result<Arc<Library>> {
    let mut loaded = EMBEDDED
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let address = bytes.as_ptr() as usize;
    if let Some((_, _, library)) = loaded
        .iter()
        .find(|(start, length, _)| *start == address && *length == bytes.len())
    {
        return Ok(Arc::clone(library));
    }
    let origin = format!("the library embedded for model `{model}`");
    let found = hex(&Sha256::digest(bytes));
    if found != sha256 {
        return Err(Error::CorruptedLibrary {
            model: model.to_string(),
            message: format!(
                "{origin} has sha256 {found}, but relax-build recorded {sha256}: the executable is damaged; \
                 build it again"
            ),
        });
    }
    check_elf(bytes, bytes.len() as u64).map_err(|message| Error::CorruptedLibrary {
        model: model.to_string(),
        message: format!("{origin} {message}"),
    })?;
    let memory_file = memory_file(model, bytes)?;
    let path = format!("/proc/self/fd/{}", memory_file.as_raw_fd());
    let module = load_module(model, Path::new(&path), &origin)?;
    if relax_perf_map::enabled() {
        // A help for perf, not a reason to refuse the model: said, then carried on.
        // SAFETY: `memory_file` holds the library just loaded; none of its code runs
        // yet (the caller holds the loading lock, and only TVM's loader has seen it),
        // and nothing else maps it.
        let named = unsafe { relax_perf_map::append(model, &memory_file, Path::new(&path), bytes) };
        if let Err(message) = named {
            eprintln!(
                "relax-runtime: {}=1: no perf map for model `{model}`: {message}",
                relax_perf_map::PERF_MAP_VARIABLE
            );
        }
    }
    let library = Arc::new(Library {
        module,
        origin,
        _memory_file: Some(memory_file),
        creating: Mutex::new(()),
    });
    loaded.push((address, bytes.len(), Arc::clone(&library)));
    Ok(library)
}

/// Loads a library from a file.
///
/// # Safety
/// Loading a library runs its code: `path` must be a model library compiled by
/// relax-build, for this machine, and not be modified while the process runs.
pub(crate) unsafe fn load_file(model: &str, path: &Path) -> Result<Arc<Library>> {
    // A bare name ("model.so") would be searched in the loader's folders, not here.
    let path = std::path::absolute(path).map_err(|source| Error::Io {
        context: format!("resolving {}", path.display()),
        source,
    })?;
    let bytes = std::fs::read(&path).map_err(|source| Error::Io {
        context: format!(
            "reading the library of model `{model}` at {}",
            path.display()
        ),
        source,
    })?;
    check_elf(&bytes, bytes.len() as u64).map_err(|message| Error::LibraryLoad {
        path: path.clone(),
        message,
    })?;
    let origin = path.display().to_string();
    let module = load_module(model, &path, &origin)?;
    Ok(Arc::new(Library {
        module,
        origin,
        _memory_file: None,
        creating: Mutex::new(()),
    }))
}

pub(crate) fn load_module(model: &str, path: &Path, origin: &str) -> Result<Object> {
    let path_c =
        CString::new(path.as_os_str().as_encoded_bytes()).map_err(|_| Error::LibraryLoad {
            path: path.to_path_buf(),
            message: "the path contains a NUL byte".to_string(),
        })?;
    let mut arguments = [argument::str(&path_c), argument::str(c"so")];
    let loaded = object::call(Callee::Global(LOAD_SHARED_LIBRARY), &mut arguments, || {
        format!("loading {origin}")
    });
    match loaded {
        Ok(Value::Object(module)) => Ok(module),
        Ok(other) => Err(Error::LibraryLoad {
            path: PathBuf::from(origin),
            message: format!("TVM returned {} instead of a module", other.describe()),
        }),
        Err(Error::Tvm { message, .. }) if message.contains("failed to map segment") => {
            Err(Error::LibraryLoad {
                path: PathBuf::from(origin),
                message: format!(
                    "the system refused to map its code ({message}); model `{model}` is loaded from an \
                     in-memory file, which the kernel setting vm.memfd_noexec=2 forbids"
                ),
            })
        }
        Err(error) => Err(error),
    }
}

/// The seals of an embedded library's in-memory file: no write, no resize, no change
/// of the seals.
const SEALS: libc::c_int =
    libc::F_SEAL_WRITE | libc::F_SEAL_GROW | libc::F_SEAL_SHRINK | libc::F_SEAL_SEAL;

/// A sealed in-memory file holding `bytes`.
fn memory_file(model: &str, bytes: &[u8]) -> Result<File> {
    let name = CString::new(format!("relax-model-{model}")).expect("model names have no NUL byte");
    // SAFETY: memfd_create takes a C string and flags; it returns a new descriptor or -1.
    let fd =
        unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING) };
    if fd < 0 {
        return Err(Error::Io {
            context: format!("creating an in-memory file for the library of model `{model}`"),
            source: std::io::Error::last_os_error(),
        });
    }
    // SAFETY: `fd` is a new descriptor that nothing else owns.
    let mut file = unsafe { File::from_raw_fd(fd) };
    file.write_all(bytes).map_err(|source| Error::Io {
        context: format!("writing the library of model `{model}` to an in-memory file"),
        source,
    })?;
    // Sealed before it is loaded: the checked bytes are the bytes mapped, and nobody
    // holding the descriptor (or /proc/<pid>/fd/<n>) can change or resize them after.
    // SAFETY: fcntl on a descriptor `file` owns, with an integer argument.
    let sealed = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_ADD_SEALS, SEALS) };
    if sealed < 0 {
        return Err(Error::Io {
            context: format!("sealing the in-memory file of the library of model `{model}`"),
            source: std::io::Error::last_os_error(),
        });
    }
    if !Path::new(&format!("/proc/self/fd/{fd}")).exists() {
        return Err(Error::LibraryLoad {
            path: PathBuf::from("/proc/self/fd"),
            message: format!(
                "model `{model}` is loaded from an in-memory file through /proc/self/fd, which is not \
                 available (is /proc mounted?)"
            ),
        });
    }
    Ok(file)
}

/// The ELF machine this process runs on.
const MACHINE: u16 = if cfg!(target_arch = "x86_64") {
    62
} else if cfg!(target_arch = "aarch64") {
    183
} else {
    0
};

fn machine_name(machine: u16) -> String {
    match machine {
        62 => "x86-64".to_string(),
        183 => "AArch64".to_string(),
        other => format!("ELF machine {other}"),
    }
}

/// Checks that `bytes` (the first bytes of a file of `length` bytes, at least its
/// headers) are a 64-bit little-endian ELF library for this machine whose segments
/// all lie within the file, so that mapping it cannot fault on a truncated file.
pub(crate) fn check_elf(bytes: &[u8], length: u64) -> std::result::Result<(), String> {
    let u16_at = |at: usize| {
        bytes
            .get(at..at + 2)
            .map(|b| u16::from_le_bytes([b[0], b[1]]))
    };
    let u64_at = |at: usize| {
        bytes
            .get(at..at + 8)
            .map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes")))
    };
    if bytes.len() < 64 || &bytes[..4] != b"\x7fELF" {
        return Err("is not an ELF library".to_string());
    }
    if bytes[4] != 2 || bytes[5] != 1 {
        return Err("is not a 64-bit little-endian ELF library".to_string());
    }
    let machine = u16_at(18).unwrap_or(0);
    if MACHINE != 0 && machine != MACHINE {
        return Err(format!(
            "is {} code, but this process runs on {}; load the library compiled for this machine's target",
            machine_name(machine),
            machine_name(MACHINE)
        ));
    }
    let truncated =
        || format!("is truncated or damaged: its headers describe more than its {length} bytes");
    let header_offset = u64_at(32).ok_or_else(truncated)?;
    let header_size = u64::from(u16_at(54).ok_or_else(truncated)?);
    let header_count = u64::from(u16_at(56).ok_or_else(truncated)?);
    for index in 0..header_count {
        let at = header_offset
            .checked_add(index.checked_mul(header_size).ok_or_else(truncated)?)
            .ok_or_else(truncated)?;
        let at = usize::try_from(at).map_err(|_| truncated())?;
        let offset = u64_at(at + 8).ok_or_else(truncated)?;
        let size = u64_at(at + 32).ok_or_else(truncated)?;
        if offset.checked_add(size).is_none_or(|end| end > length) {
            return Err(truncated());
        }
    }
    Ok(())
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A minimal ELF header with one program header for a segment at `offset..offset+size`.
    fn elf(machine: u16, offset: u64, size: u64) -> Vec<u8> {
        let mut bytes = vec![0u8; 64 + 56];
        bytes[..4].copy_from_slice(b"\x7fELF");
        bytes[4] = 2;
        bytes[5] = 1;
        bytes[18..20].copy_from_slice(&machine.to_le_bytes());
        bytes[32..40].copy_from_slice(&64u64.to_le_bytes());
        bytes[54..56].copy_from_slice(&56u16.to_le_bytes());
        bytes[56..58].copy_from_slice(&1u16.to_le_bytes());
        bytes[64 + 8..64 + 16].copy_from_slice(&offset.to_le_bytes());
        bytes[64 + 32..64 + 40].copy_from_slice(&size.to_le_bytes());
        bytes
    }

    #[test]
    fn the_in_memory_library_is_sealed_before_it_is_loaded() {
        let mut file = memory_file("sealed", b"library bytes").unwrap();
        // SAFETY: fcntl on a descriptor `file` owns; F_GET_SEALS takes no argument.
        let seals = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_GET_SEALS) };
        assert_eq!(seals, SEALS, "the file carries every seal");
        let write = file.write_all(b"patched");
        assert_eq!(
            write.unwrap_err().raw_os_error(),
            Some(libc::EPERM),
            "writing a sealed file fails"
        );
        assert!(file.set_len(4).is_err(), "shrinking a sealed file fails");
        assert!(file.set_len(4096).is_err(), "growing a sealed file fails");
        // Reopening through /proc for writing gives no way around the seals.
        let path = format!("/proc/self/fd/{}", file.as_raw_fd());
        let reopened = std::fs::OpenOptions::new().write(true).open(&path);
        if let Ok(mut reopened) = reopened {
            assert!(reopened.write_all(b"patched").is_err());
        }
        assert_eq!(std::fs::read(&path).unwrap(), b"library bytes");
    }

    #[test]
    fn a_library_whose_segments_fit_passes() {
        let bytes = elf(MACHINE, 0, 120);
        check_elf(&bytes, bytes.len() as u64).unwrap();
    }

    #[test]
    fn a_truncated_library_is_refused_before_it_is_mapped() {
        let bytes = elf(MACHINE, 100, 4096);
        let error = check_elf(&bytes, bytes.len() as u64).unwrap_err();
        assert!(error.contains("is truncated or damaged"), "{error}");
        assert!(check_elf(&bytes[..40], 40).is_err());
    }

    #[test]
    fn a_library_for_another_machine_names_both() {
        let other = if MACHINE == 62 { 183 } else { 62 };
        let error = check_elf(&elf(other, 0, 10), 120).unwrap_err();
        assert!(error.contains("code, but this process runs on"), "{error}");
        assert_eq!(
            check_elf(b"not a library", 13).unwrap_err(),
            "is not an ELF library"
        );
    }
}
