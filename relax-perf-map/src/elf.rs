//! Reading the function symbols of a 64-bit little-endian ELF library from its bytes
//! (`.symtab` and `.dynsym`), for the perf map of a library loaded from memory.

/// A function defined in a library.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FunctionSymbol {
    pub(crate) name: String,
    /// Its address relative to the library's load base (`st_value`).
    pub(crate) address: u64,
    pub(crate) size: u64,
}

const SYMTAB: u32 = 2;
const DYNSYM: u32 = 11;
const FUNCTION: u8 = 2;
/// `SHF_EXECINSTR`.
const EXECUTABLE: u64 = 4;
const SECTION_HEADER_SIZE: usize = 64;
const SYMBOL_SIZE: usize = 24;

struct Bytes<'a>(&'a [u8]);

impl Bytes<'_> {
    fn u16(&self, at: usize) -> Option<u16> {
        Some(u16::from_le_bytes(self.0.get(at..at + 2)?.try_into().ok()?))
    }
    fn u32(&self, at: usize) -> Option<u32> {
        Some(u32::from_le_bytes(self.0.get(at..at + 4)?.try_into().ok()?))
    }
    fn u64(&self, at: usize) -> Option<u64> {
        Some(u64::from_le_bytes(self.0.get(at..at + 8)?.try_into().ok()?))
    }
    fn usize(&self, at: usize) -> Option<usize> {
        usize::try_from(self.u64(at)?).ok()
    }
    /// The NUL-terminated string at `at`.
    fn c_str(&self, at: usize) -> Option<&str> {
        let rest = self.0.get(at..)?;
        let end = rest.iter().position(|&byte| byte == 0)?;
        std::str::from_utf8(&rest[..end]).ok()
    }
}

struct Section {
    kind: u32,
    flags: u64,
    address: u64,
    offset: usize,
    size: usize,
    link: usize,
}

/// What [`read`] finds in a library.
pub(crate) struct Code {
    /// The defined functions with a size, sorted by address, each once.
    pub(crate) functions: Vec<FunctionSymbol>,
    /// Its executable sections (`.text`, `.plt`, ...).
    pub(crate) sections: Vec<CodeSection>,
}

/// An executable section: where it is loaded (relative to the load base), and where
/// its bytes are in the file.
pub(crate) struct CodeSection {
    pub(crate) addresses: std::ops::Range<u64>,
    pub(crate) offset: usize,
}

impl Code {
    /// The file's bytes of the code at `addresses`, if one section holds them all.
    pub(crate) fn bytes<'a>(
        &self,
        file: &'a [u8],
        addresses: std::ops::Range<u64>,
    ) -> Option<&'a [u8]> {
        let section = self.sections.iter().find(|section| {
            section.addresses.contains(&addresses.start) && addresses.end <= section.addresses.end
        })?;
        let start =
            section.offset + usize::try_from(addresses.start - section.addresses.start).ok()?;
        file.get(start..start + usize::try_from(addresses.end - addresses.start).ok()?)
    }
}

/// The defined functions (with a size) of an ELF library, sorted by address, each
/// once; `None` when `bytes` are not a 64-bit little-endian ELF file or are damaged.
#[cfg(test)]
pub(crate) fn function_symbols(bytes: &[u8]) -> Option<Vec<FunctionSymbol>> {
    Some(read(bytes)?.functions)
}

/// The functions and executable sections of an ELF library; `None` when `bytes` are
/// not a 64-bit little-endian ELF file or are damaged.
pub(crate) fn read(bytes: &[u8]) -> Option<Code> {
    let elf = Bytes(bytes);
    if bytes.get(..4)? != b"\x7fELF" || bytes[4] != 2 || bytes[5] != 1 {
        return None;
    }
    let header_offset = elf.usize(40)?;
    let count = usize::from(elf.u16(60)?);
    let sections: Vec<Section> = (0..count)
        .map(|index| {
            let at = header_offset.checked_add(index.checked_mul(SECTION_HEADER_SIZE)?)?;
            Some(Section {
                kind: elf.u32(at + 4)?,
                flags: elf.u64(at + 8)?,
                address: elf.u64(at + 16)?,
                offset: elf.usize(at + 24)?,
                size: elf.usize(at + 32)?,
                link: usize::try_from(elf.u32(at + 40)?).ok()?,
            })
        })
        .collect::<Option<_>>()?;
    let mut symbols = Vec::new();
    for table in sections
        .iter()
        .filter(|section| section.kind == SYMTAB || section.kind == DYNSYM)
    {
        let strings = sections.get(table.link)?;
        let names = Bytes(bytes.get(strings.offset..strings.offset.checked_add(strings.size)?)?);
        for index in 0..table.size / SYMBOL_SIZE {
            let at = table.offset.checked_add(index * SYMBOL_SIZE)?;
            let info = *bytes.get(at + 4)?;
            let section_index = elf.u16(at + 6)?;
            let (address, size) = (elf.u64(at + 8)?, elf.u64(at + 16)?);
            if info & 0xf != FUNCTION || section_index == 0 || size == 0 {
                continue;
            }
            let name = names.c_str(usize::try_from(elf.u32(at)?).ok()?)?;
            if !name.is_empty() {
                symbols.push(FunctionSymbol {
                    name: name.to_string(),
                    address,
                    size,
                });
            }
        }
    }
    symbols.sort_by(|a, b| (a.address, &a.name).cmp(&(b.address, &b.name)));
    symbols.dedup();
    let executable = sections
        .iter()
        .filter(|section| section.flags & EXECUTABLE != 0 && section.size > 0)
        .map(|section| CodeSection {
            addresses: section.address..section.address + section.size as u64,
            offset: section.offset,
        })
        .collect();
    Some(Code {
        functions: symbols,
        sections: executable,
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::path::{Path, PathBuf};

    /// A shared library built by the system's `cc` from `source`, in `dir`.
    pub(crate) fn build_library(dir: &Path, source: &str) -> PathBuf {
        let c_file = dir.join("probe.c");
        let library = dir.join("libprobe.so");
        std::fs::write(&c_file, source).unwrap();
        let output = std::process::Command::new("cc")
            .args(["-shared", "-fPIC", "-O1", "-o"])
            .arg(&library)
            .arg(&c_file)
            .output()
            .expect("running the system C compiler `cc`");
        assert!(
            output.status.success(),
            "cc failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        library
    }

    /// A copy of `library` stripped by binutils' `strip` (only `.dynsym` left), as
    /// `dir/name`.
    pub(crate) fn stripped_copy(dir: &Path, library: &Path, name: &str) -> PathBuf {
        let stripped = dir.join(name);
        let status = std::process::Command::new("strip")
            .arg("-o")
            .arg(&stripped)
            .arg(library)
            .status()
            .expect("running binutils' `strip`");
        assert!(status.success());
        stripped
    }

    /// Exported functions, a static one reached through a data pointer, and one
    /// (`body`) whose address `relax_probe_launch` passes on, as TVM's functions pass
    /// the parallel loop bodies they outline to TVMBackendParallelLaunch.
    pub(crate) const PROBE: &str = "int relax_probe_add(int x) { return x + 1; }\n\
        static int hidden(int x) { return x * 3; }\n\
        int (*volatile relax_probe_pointer)(int) = hidden;\n\
        int relax_probe_twice(int x) { return relax_probe_pointer(x) + relax_probe_add(x); }\n\
        void *volatile relax_probe_last;\n\
        __attribute__((noinline)) int relax_probe_call(int (*f)(int), int x) { relax_probe_last = (void *)f; return f(x); }\n\
        __attribute__((noinline)) static int body(int x) { return x * x + 7; }\n\
        int relax_probe_launch(int x) { return relax_probe_call(body, x); }\n";

    #[test]
    fn reads_the_functions_of_a_library_built_by_cc() {
        let dir = tempfile::tempdir().unwrap();
        let library = build_library(dir.path(), PROBE);
        let symbols = function_symbols(&std::fs::read(&library).unwrap()).unwrap();
        let names: Vec<&str> = symbols.iter().map(|symbol| symbol.name.as_str()).collect();
        for name in ["relax_probe_add", "relax_probe_twice", "hidden", "body"] {
            assert!(names.contains(&name), "{name} not in {names:?}");
        }
        // Each once, although both .symtab and .dynsym list the exported ones.
        assert_eq!(
            names
                .iter()
                .filter(|&&name| name == "relax_probe_add")
                .count(),
            1
        );
        assert!(symbols
            .windows(2)
            .all(|pair| pair[0].address <= pair[1].address));
        assert!(symbols.iter().all(|symbol| symbol.size > 0));
        let code = read(&std::fs::read(&library).unwrap()).unwrap();
        assert!(code.functions.iter().all(|function| code
            .sections
            .iter()
            .any(|section| section.addresses.contains(&function.address))));
    }

    #[test]
    fn a_stripped_library_keeps_its_exported_functions() {
        // A stripped library keeps .dynsym only; its exports are still found.
        let dir = tempfile::tempdir().unwrap();
        let library = build_library(dir.path(), PROBE);
        let stripped = stripped_copy(dir.path(), &library, "stripped.so");
        let symbols = function_symbols(&std::fs::read(&stripped).unwrap()).unwrap();
        let names: Vec<&str> = symbols.iter().map(|symbol| symbol.name.as_str()).collect();
        assert!(names.contains(&"relax_probe_add"), "{names:?}");
        assert!(!names.contains(&"hidden"), "{names:?}");
    }

    #[test]
    fn damaged_or_foreign_bytes_give_none() {
        assert_eq!(function_symbols(b"not an ELF file at all"), None);
        let dir = tempfile::tempdir().unwrap();
        let bytes = std::fs::read(build_library(dir.path(), PROBE)).unwrap();
        // Cut before the section headers (at the end of the file).
        assert_eq!(function_symbols(&bytes[..bytes.len() / 2]), None);
    }
}
