//! Naming the functions of a library loaded from an in-memory file for `perf`.
//!
//! relax-runtime calls [`append`] for each model it loads when `RELAX_PERF_MAP=1`
//! ([`enabled`]).
//!
//! A library embedded by `include_model!` is loaded from an in-memory file, which perf
//! cannot open afterwards: its samples show as bare offsets in
//! `memfd:relax-model-<name> (deleted)`. For anonymous executable memory perf reads
//! `/tmp/perf-<pid>.map` instead (lines `START SIZE NAME`, hex), the file JIT compilers
//! write. So with `RELAX_PERF_MAP=1`, each embedded library, once loaded, has its code
//! mappings replaced by anonymous ones holding the same bytes at the same addresses
//! (copied, then moved over the originals by `mremap`, before any of its code runs;
//! then made executable there, which is what `perf record` sees),
//! and appends a line per function there: the function symbols of its bytes (`.symtab`
//! and `.dynsym`) at the address the dynamic loader mapped it to. Lines are appended in
//! one write, so other writers of the same process keep theirs. (A library loaded from
//! a file needs none: perf reads the file.)

use std::ffi::{c_int, c_void, CStr};
use std::fs::File;
use std::io::Write;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

mod elf;

/// The variable that makes relax-runtime write the perf map (`1`, `true` or `yes`).
pub const PERF_MAP_VARIABLE: &str = "RELAX_PERF_MAP";

/// Whether `RELAX_PERF_MAP` asks for the perf map (read once per process).
pub fn enabled() -> bool {
    static ENABLED: OnceLock<bool> = OnceLock::new();
    *ENABLED.get_or_init(|| {
        std::env::var(PERF_MAP_VARIABLE).is_ok_and(|value| {
            ["1", "true", "yes"]
                .iter()
                .any(|yes| value.trim().eq_ignore_ascii_case(yes))
        })
    })
}

/// The perf map of this process.
pub fn path() -> PathBuf {
    PathBuf::from(format!("/tmp/perf-{}.map", std::process::id()))
}

/// Makes the code of the library loaded from `file` (as `loaded_as`, the path given to
/// the dynamic loader, whose bytes are `bytes`) anonymous memory, and appends its
/// functions to the perf map.
///
/// # Safety
/// `file` must be an in-memory file (`memfd_create`) holding a library the dynamic
/// loader has just loaded, none of whose code runs and none of whose executable
/// mappings anyone writes or unmaps until this returns.
pub unsafe fn append(
    model: &str,
    file: &File,
    loaded_as: &Path,
    bytes: &[u8],
) -> Result<(), String> {
    // SAFETY: the caller's contract.
    unsafe { make_code_anonymous(file) }?;
    let base = load_base(loaded_as).ok_or_else(|| {
        format!(
            "the dynamic loader lists no library loaded as {}",
            loaded_as.display()
        )
    })?;
    let code =
        elf::read(bytes).ok_or_else(|| "its ELF section headers could not be read".to_string())?;
    let lines = lines(model, base, &code, bytes);
    let map = path();
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&map)
        .and_then(|mut file| file.write_all(lines.as_bytes()))
        .map_err(|error| format!("writing {}: {error}", map.display()))
}

/// Replaces each executable mapping of `file` by anonymous memory with the same bytes
/// and protection, so that perf looks its addresses up in the perf map.
///
/// # Safety
/// As [`append`]: nobody runs, writes or unmaps the file's executable mappings meanwhile.
unsafe fn make_code_anonymous(file: &File) -> Result<(), String> {
    let inode = file
        .metadata()
        .map_err(|error| format!("reading its in-memory file's inode: {error}"))?
        .ino()
        .to_string();
    let maps = std::fs::read_to_string("/proc/self/maps")
        .map_err(|error| format!("reading /proc/self/maps: {error}"))?;
    for line in maps.lines() {
        // start-end perms offset device inode path
        let fields: Vec<&str> = line.split_whitespace().collect();
        if fields.len() < 6 || fields[4] != inode || !fields[5].starts_with("/memfd:") {
            continue;
        }
        let perms = fields[1].as_bytes();
        if perms.get(2) != Some(&b'x') {
            continue;
        }
        let range = fields[0]
            .split_once('-')
            .and_then(|(start, end)| {
                Some((
                    usize::from_str_radix(start, 16).ok()?,
                    usize::from_str_radix(end, 16).ok()?,
                ))
            })
            .ok_or_else(|| format!("reading /proc/self/maps: unexpected line {line:?}"))?;
        let mut protection = libc::PROT_EXEC;
        if perms[0] == b'r' {
            protection |= libc::PROT_READ;
        }
        // SAFETY: the range is a whole readable mapping of the file, which nobody uses
        // meanwhile (the caller's contract); the bytes are copied before the move.
        unsafe { move_to_anonymous(range.0, range.1 - range.0, protection) }?;
    }
    Ok(())
}

/// Replaces the mapping at `start..start + length` by anonymous memory holding the
/// same bytes, with `protection`.
///
/// # Safety
/// The range must be one readable mapping whose contents nobody uses meanwhile.
unsafe fn move_to_anonymous(start: usize, length: usize, protection: c_int) -> Result<(), String> {
    let failed = |what: &str| format!("{what} failed: {}", std::io::Error::last_os_error());
    // SAFETY: a new private anonymous mapping, placed by the kernel.
    let copy = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            length,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if copy == libc::MAP_FAILED {
        return Err(failed("mmap"));
    }
    // SAFETY: both ranges are `length` bytes, readable (the caller's contract) and
    // writable (just mapped), and distinct.
    unsafe { std::ptr::copy_nonoverlapping(start as *const u8, copy.cast::<u8>(), length) };
    // SAFETY: `copy` is our mapping of `length` bytes; on failure it is unmapped, and
    // the original stays; on success `mremap` moves it over the original atomically.
    unsafe {
        if libc::mprotect(copy, length, protection) != 0 {
            let error = failed("mprotect");
            libc::munmap(copy, length);
            return Err(error);
        }
        let moved = libc::mremap(
            copy,
            length,
            length,
            libc::MREMAP_MAYMOVE | libc::MREMAP_FIXED,
            start as *mut c_void,
        );
        if moved == libc::MAP_FAILED {
            let error = failed("mremap");
            libc::munmap(copy, length);
            return Err(error);
        }
        // A move tells perf nothing; a change of protection that makes the range
        // executable again records it (as anonymous memory) in `perf record`'s
        // stream. Both were allowed on the copy just above.
        if libc::mprotect(start as *mut c_void, length, libc::PROT_READ) != 0
            || libc::mprotect(start as *mut c_void, length, protection) != 0
        {
            return Err(failed("mprotect"));
        }
    }
    Ok(())
}

/// The map's lines for the code of a library loaded at `base` (whose file is `file`):
/// a line per function, and per stretch of code without a symbol. The bodies of the
/// parallel loops that TVM outlines have none; a stretch whose address a function
/// takes (a RIP-relative `lea` on x86-64, `adrp` + `add` or `adr` on AArch64) is named
/// after it, `<function>.outlined` (as GCC names OpenMP bodies `<function>._omp_fn.0`),
/// any other `<model>: code without a symbol at +OFFSET`.
fn lines(model: &str, base: usize, code: &elf::Code, file: &[u8]) -> String {
    let mut entries: Vec<(u64, u64, String)> = code
        .functions
        .iter()
        .map(|function| (function.address, function.size, function.name.clone()))
        .collect();
    let mut gaps = Vec::new();
    for section in &code.sections {
        let mut covered = section.addresses.start;
        for function in &code.functions {
            let end = function.address.saturating_add(function.size);
            if end <= covered || function.address >= section.addresses.end {
                continue;
            }
            gaps.push(covered..function.address.max(covered));
            covered = end;
        }
        gaps.push(covered..section.addresses.end.max(covered));
    }
    gaps.retain(|gap| gap.start < gap.end);
    // Where each function's code takes the address of code without a symbol.
    let mut outlined: Vec<(u64, &str)> = Vec::new();
    for function in &code.functions {
        let range = function.address..function.address.saturating_add(function.size);
        let Some(bytes) = code.bytes(file, range) else {
            continue;
        };
        for target in referenced_addresses(bytes, function.address) {
            if gaps.iter().any(|gap| gap.contains(&target)) {
                outlined.push((target, &function.name));
            }
        }
    }
    outlined.sort();
    outlined.dedup_by_key(|(target, _)| *target);
    for gap in gaps {
        let mut start = gap.start;
        let mut name = format!("{model}: code without a symbol at +{:#x}", gap.start);
        let targets = outlined.iter().filter(|(target, _)| gap.contains(target));
        for (target, function) in targets.chain([&(gap.end, "")]) {
            // Less than 16 bytes without a name before a body is alignment padding.
            if *target > start && (*target - start >= 16 || !name.contains(' ')) {
                entries.push((start, *target - start, name));
            }
            start = *target;
            name = format!("{function}.outlined");
        }
    }
    entries.sort();
    entries
        .iter()
        .map(|(address, size, name)| {
            format!(
                "{:x} {size:x} {name}\n",
                (base as u64).wrapping_add(*address)
            )
        })
        .collect()
}

/// The code addresses that machine code at `address` computes (relative to the same
/// base): candidates only, checked against the stretches without a symbol.
fn referenced_addresses(code: &[u8], address: u64) -> Vec<u64> {
    if cfg!(target_arch = "x86_64") {
        // lea reg, [rip + disp32]: REX.W (0x48 or 0x4c), 0x8d, ModRM mod 00 rm 101.
        code.windows(7)
            .enumerate()
            .filter(|(_, bytes)| {
                bytes[0] & 0xfb == 0x48 && bytes[1] == 0x8d && bytes[2] & 0xc7 == 0x05
            })
            .map(|(at, bytes)| {
                let displacement = i32::from_le_bytes(bytes[3..7].try_into().expect("4 bytes"));
                (address + at as u64 + 7).wrapping_add_signed(i64::from(displacement))
            })
            .collect()
    } else if cfg!(target_arch = "aarch64") {
        let words: Vec<u32> = code
            .chunks_exact(4)
            .map(|word| u32::from_le_bytes(word.try_into().expect("4 bytes")))
            .collect();
        let immediate21 = |word: u32| {
            let value = ((word >> 5) & 0x7ffff) << 2 | (word >> 29) & 3;
            i64::from(((value << 11) as i32) >> 11)
        };
        let mut targets = Vec::new();
        for (index, &word) in words.iter().enumerate() {
            let pc = address + 4 * index as u64;
            if word & 0x9f00_0000 == 0x1000_0000 {
                // adr
                targets.push(pc.wrapping_add_signed(immediate21(word)));
            } else if word & 0x9f00_0000 == 0x9000_0000 {
                // adrp, then add (64-bit, immediate, unshifted) to the same register
                let page = (pc & !0xfff).wrapping_add_signed(immediate21(word) << 12);
                if let Some(&next) = words.get(index + 1) {
                    if next & 0xffc0_0000 == 0x9100_0000 && (next >> 5) & 31 == word & 31 {
                        targets.push(page + u64::from((next >> 10) & 0xfff));
                    }
                }
            }
        }
        targets
    } else {
        Vec::new()
    }
}

/// The load base (`l_addr`: what symbol values are relative to) of the library that
/// the dynamic loader loaded under the name `loaded_as`.
pub fn load_base(loaded_as: &Path) -> Option<usize> {
    struct Search<'a> {
        name: &'a [u8],
        base: Option<usize>,
    }
    unsafe extern "C" fn visit(
        info: *mut libc::dl_phdr_info,
        _size: libc::size_t,
        data: *mut c_void,
    ) -> c_int {
        // SAFETY: `data` is the `Search` passed below, alive during the iteration;
        // `info` describes a loaded object, its name a C string or null.
        unsafe {
            let search = &mut *data.cast::<Search<'_>>();
            let info = &*info;
            if !info.dlpi_name.is_null() && CStr::from_ptr(info.dlpi_name).to_bytes() == search.name
            {
                search.base = Some(info.dlpi_addr as usize);
                return 1;
            }
        }
        0
    }
    let mut search = Search {
        name: loaded_as.as_os_str().as_encoded_bytes(),
        base: None,
    };
    // SAFETY: `visit` only reads what the loader passes and writes `search`.
    unsafe { libc::dl_iterate_phdr(Some(visit), (&mut search as *mut Search<'_>).cast()) };
    search.base
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::elf::tests::{build_library, stripped_copy, PROBE};

    #[test]
    fn each_line_names_a_function_where_the_loader_put_it() {
        let dir = tempfile::tempdir().unwrap();
        let library = build_library(dir.path(), PROBE);
        // SAFETY: the probe library has no initializers; its functions are only
        // looked up, not called.
        let loaded = unsafe { libloading::Library::new(&library) }.unwrap();
        let base = load_base(&library).expect("the probe library is loaded");
        let bytes = std::fs::read(&library).unwrap();
        let code = elf::read(&bytes).unwrap();
        let text = lines("probe", base, &code, &bytes);
        let mut checked = 0;
        for line in text.lines() {
            let fields: Vec<&str> = line.splitn(3, ' ').collect();
            let start = usize::from_str_radix(fields[0], 16).unwrap();
            assert!(u64::from_str_radix(fields[1], 16).unwrap() > 0, "{line}");
            if fields[2].starts_with("relax_probe_") {
                let name = format!("{}\0", fields[2]);
                // SAFETY: only the address is read.
                let symbol = unsafe { loaded.get::<*const c_void>(name.as_bytes()) }.unwrap();
                assert_eq!(*symbol as usize, start, "{line}");
                checked += 1;
            }
        }
        assert_eq!(checked, 4, "{text}");
        assert!(
            text.contains(" probe: code without a symbol at +0x"),
            "{text}"
        );
        assert_eq!(load_base(Path::new("/no/such/library.so")), None);
    }

    /// In a stripped library, the static function whose address `relax_probe_launch`
    /// passes on is named after it.
    #[test]
    fn code_without_a_symbol_is_named_after_the_function_that_takes_its_address() {
        let dir = tempfile::tempdir().unwrap();
        let library = build_library(dir.path(), PROBE);
        let stripped = stripped_copy(dir.path(), &library, "libstripped.so");
        // SAFETY: the probe library has no initializers; `relax_probe_launch` takes and
        // returns an int, as declared here.
        let loaded = unsafe { libloading::Library::new(&stripped) }.unwrap();
        // SAFETY: as above; `relax_probe_last` is a pointer the call just set.
        let body = unsafe {
            let launch = loaded
                .get::<extern "C" fn(i32) -> i32>(b"relax_probe_launch\0")
                .unwrap();
            assert_eq!(launch(3), 16);
            **loaded
                .get::<*const *const c_void>(b"relax_probe_last\0")
                .unwrap() as usize
        };
        let base = load_base(&stripped).unwrap();
        let bytes = std::fs::read(&stripped).unwrap();
        let text = lines("probe", base, &elf::read(&bytes).unwrap(), &bytes);
        let line = text
            .lines()
            .find(|line| line.ends_with(" relax_probe_launch.outlined"))
            .unwrap_or_else(|| panic!("no relax_probe_launch.outlined in\n{text}"));
        let fields: Vec<&str> = line.split(' ').collect();
        let start = usize::from_str_radix(fields[0], 16).unwrap();
        let size = usize::from_str_radix(fields[1], 16).unwrap();
        assert!(
            start <= body && body < start + size,
            "body at {body:x}: {line}"
        );
    }

    #[test]
    fn code_mapped_from_an_in_memory_file_becomes_anonymous_with_the_same_bytes() {
        let bytes: Vec<u8> = (0..8192u32).map(|index| (index * 7 % 251) as u8).collect();
        // SAFETY: memfd_create takes a C string and flags.
        let fd = unsafe { libc::memfd_create(c"relax-perf-map-test".as_ptr(), libc::MFD_CLOEXEC) };
        assert!(fd >= 0);
        // SAFETY: `fd` is a new descriptor nothing else owns.
        let mut file = unsafe { <File as std::os::fd::FromRawFd>::from_raw_fd(fd) };
        file.write_all(&bytes).unwrap();
        // SAFETY: maps the file's 8192 bytes, shared, readable and executable.
        let address = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                bytes.len(),
                libc::PROT_READ | libc::PROT_EXEC,
                libc::MAP_PRIVATE,
                fd,
                0,
            )
        };
        assert_ne!(address, libc::MAP_FAILED);
        let inode = file.metadata().unwrap().ino().to_string();
        let listed = || {
            std::fs::read_to_string("/proc/self/maps")
                .unwrap()
                .lines()
                .any(|line| line.split_whitespace().nth(4) == Some(inode.as_str()))
        };
        assert!(listed());
        // SAFETY: the mapping above is this test's alone, and nothing runs it.
        unsafe { make_code_anonymous(&file) }.unwrap();
        assert!(!listed(), "the in-memory file is still mapped");
        // SAFETY: the range is still mapped (now anonymous), readable, 8192 bytes.
        let now = unsafe { std::slice::from_raw_parts(address.cast::<u8>(), bytes.len()) };
        assert_eq!(now, &bytes[..]);
        // SAFETY: our mapping, unmapped once.
        unsafe { libc::munmap(address, bytes.len()) };
    }
}
