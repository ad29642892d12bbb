//! Intel AMX (Advanced Matrix Extensions): whether this process may use its tiles, and
//! their configuration. The tiles are 8 registers of up to 16 rows x 64 bytes; AMX-BF16's
//! `tdpbf16ps` adds to a 16 x 16 float32 tile the products of a 16 x 32 tile of bf16 by
//! a 32 x 16 one (laid out in pairs, as [`crate::bf16_panels`] packs them): 8192
//! multiply-adds an instruction, where AVX512-BF16's `vdpbf16ps` does 32.
//!
//! Rust's AMX intrinsics and its `is_x86_feature_detected!` names for AMX are not stable,
//! so this module asks the CPU (`cpuid`) and Linux (`arch_prctl`) itself, and the tile
//! code is inline assembly. Linux hands the tiles' 8 KiB of state only to a process that
//! asks for it (`ARCH_REQ_XCOMP_PERM`); until then their first use kills it.

/// Whether AMX-TILE and AMX-BF16 run here and Linux gave this process the tiles' state
/// (asked once, on the first call). Setting `RELAX_KERNELS_NO_AMX` (to anything) before
/// the first call says no: the bf16 kernels then run AVX512-BF16, to compare the two.
pub(crate) fn bf16_usable() -> bool {
    static USABLE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *USABLE.get_or_init(|| std::env::var_os("RELAX_KERNELS_NO_AMX").is_none() && ask())
}

#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
fn ask() -> bool {
    use std::arch::x86_64::__cpuid_count;
    /// `cpuid` leaf 7's EDX bits: AMX-BF16 and AMX-TILE.
    const AMX_BF16: u32 = 1 << 22;
    const AMX_TILE: u32 = 1 << 24;
    /// `arch_prctl`'s system call number and request, and the tiles' state component.
    const SYS_ARCH_PRCTL: usize = 158;
    const ARCH_REQ_XCOMP_PERM: usize = 0x1023;
    const XFEATURE_XTILEDATA: usize = 18;
    if __cpuid_count(0, 0).eax < 7 {
        return false;
    }
    let features = __cpuid_count(7, 0).edx;
    if features & (AMX_BF16 | AMX_TILE) != AMX_BF16 | AMX_TILE {
        return false;
    }
    let result: isize;
    // SAFETY: the `arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)` system call only
    // changes which state components the kernel will let this process use; `syscall`
    // clobbers rcx and r11 (declared), reads no memory and writes none of ours.
    unsafe {
        std::arch::asm!(
            "syscall",
            inlateout("rax") SYS_ARCH_PRCTL as isize => result,
            in("rdi") ARCH_REQ_XCOMP_PERM,
            in("rsi") XFEATURE_XTILEDATA,
            lateout("rcx") _,
            lateout("r11") _,
            options(nostack),
        );
    }
    result == 0
}

#[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
fn ask() -> bool {
    false
}

#[cfg(target_arch = "x86_64")]
/// A tile configuration (`ldtilecfg`'s 64 bytes, palette 1): rows and bytes per row of
/// each of the 8 tile registers.
#[derive(Clone, Copy, PartialEq, Eq)]
#[repr(C, align(64))]
pub(crate) struct TileConfig([u8; 64]);

#[cfg(target_arch = "x86_64")]
impl TileConfig {
    /// A configuration with every register unused (zero rows).
    pub(crate) const fn new() -> TileConfig {
        let mut bytes = [0; 64];
        bytes[0] = 1; // palette 1
        TileConfig(bytes)
    }

    /// Register `tile` (0-7) of `rows` (1-16) rows of `bytes` (4-64, a multiple of 4).
    pub(crate) fn with(mut self, tile: usize, rows: usize, bytes: usize) -> TileConfig {
        assert!(tile < 8 && (1..=16).contains(&rows) && (4..=64).contains(&bytes));
        assert_eq!(bytes % 4, 0, "a tile row holds whole 32-bit elements");
        self.0[16 + 2 * tile..18 + 2 * tile].copy_from_slice(&(bytes as u16).to_le_bytes());
        self.0[48 + tile] = rows as u8;
        self
    }

    /// Makes this the thread's tile configuration. Loaded on every call, not remembered:
    /// other code on the thread (a library using AMX itself) may have changed it.
    ///
    /// # Safety
    /// [`bf16_usable`] said yes.
    pub(crate) unsafe fn load(&self) {
        // SAFETY: AMX runs here and the process may use it (the contract); `ldtilecfg`
        // reads these 64 bytes (a valid palette-1 configuration: `with` checked each
        // register) and zeroes the tile registers, which no Rust code uses.
        unsafe {
            std::arch::asm!("ldtilecfg [{}]", in(reg) self.0.as_ptr(), options(nostack, readonly));
        }
    }
}

#[cfg(target_arch = "x86_64")]
/// The bytes of a row of sums: 16 float32 values.
pub(crate) const SUMS_BYTES: usize = 64;

#[cfg(target_arch = "x86_64")]
/// The configuration of the bf16 tiles of `rows` rows summing `pairs` (1-16) pairs per
/// step: sums in registers 0-3 (`rows` x 16 float32), the input in 4 (`rows` x `pairs`
/// words), the weights in 5-7 (`pairs` x 16 words).
pub(crate) fn config(rows: usize, pairs: usize) -> TileConfig {
    let mut config = TileConfig::new();
    for sums in 0..4 {
        config = config.with(sums, rows, SUMS_BYTES);
    }
    config = config.with(4, rows, pairs * 4);
    for weights in 5..8 {
        config = config.with(weights, pairs, SUMS_BYTES);
    }
    config
}

/// What [`sums_register`] does.
#[cfg(target_arch = "x86_64")]
#[derive(Clone, Copy)]
pub(crate) enum Move {
    Zero,
    Load,
    Store,
}

#[cfg(target_arch = "x86_64")]
/// Zeroes, loads or stores sums register `vector` (0-3), rows `stride` bytes apart at
/// `at`.
///
/// # Safety
/// The tiles are configured by [`config`]; `at` holds the register's rows (loaded or
/// stored).
#[inline(always)]
pub(crate) unsafe fn sums_register(vector: usize, action: Move, at: *mut f32, stride: usize) {
    macro_rules! each {
        ($zero:literal, $load:literal, $store:literal) => {
            // SAFETY: the function's contract; the tile registers are no Rust value's.
            unsafe {
                match action {
                    Move::Zero => std::arch::asm!($zero, options(nostack, nomem)),
                    Move::Load => std::arch::asm!($load, at = in(reg) at, stride = in(reg) stride,
                        options(nostack, readonly)),
                    Move::Store => std::arch::asm!($store, at = in(reg) at, stride = in(reg) stride,
                        options(nostack)),
                }
            }
        };
    }
    match vector {
        0 => each!(
            "tilezero tmm0",
            "tileloadd tmm0, [{at} + {stride}*1]",
            "tilestored [{at} + {stride}*1], tmm0"
        ),
        1 => each!(
            "tilezero tmm1",
            "tileloadd tmm1, [{at} + {stride}*1]",
            "tilestored [{at} + {stride}*1], tmm1"
        ),
        2 => each!(
            "tilezero tmm2",
            "tileloadd tmm2, [{at} + {stride}*1]",
            "tilestored [{at} + {stride}*1], tmm2"
        ),
        _ => each!(
            "tilezero tmm3",
            "tileloadd tmm3, [{at} + {stride}*1]",
            "tilestored [{at} + {stride}*1], tmm3"
        ),
    }
}

#[cfg(target_arch = "x86_64")]
/// Loads the weights of sums register `vector` (rows of pairs for 16 columns, `stride`
/// bytes apart at `weights`) and adds their products with the input register to it.
///
/// # Safety
/// The tiles are configured by [`config`] and the input register loaded; `weights` holds
/// the rows.
#[inline(always)]
pub(crate) unsafe fn multiply(vector: usize, weights: *const u32, stride: usize) {
    macro_rules! step {
        ($template:literal) => {
            // SAFETY: the function's contract; the tile registers are no Rust value's.
            unsafe {
                std::arch::asm!($template, at = in(reg) weights, stride = in(reg) stride,
                    options(nostack, readonly))
            }
        };
    }
    match vector {
        0 => step!("tileloadd tmm5, [{at} + {stride}*1]\ntdpbf16ps tmm0, tmm4, tmm5"),
        1 => step!("tileloadd tmm6, [{at} + {stride}*1]\ntdpbf16ps tmm1, tmm4, tmm6"),
        2 => step!("tileloadd tmm7, [{at} + {stride}*1]\ntdpbf16ps tmm2, tmm4, tmm7"),
        _ => step!("tileloadd tmm5, [{at} + {stride}*1]\ntdpbf16ps tmm3, tmm4, tmm5"),
    }
}

#[cfg(target_arch = "x86_64")]
/// Loads the input register: its rows of pairs, `stride` bytes apart from `at`.
///
/// # Safety
/// The tiles are configured by [`config`]; `at` holds the rows.
#[inline(always)]
pub(crate) unsafe fn load_input(at: *const u32, stride: usize) {
    // SAFETY: the function's contract; the tile registers are no Rust value's.
    unsafe {
        std::arch::asm!("tileloadd tmm4, [{at} + {stride}*1]", at = in(reg) at, stride = in(reg) stride,
            options(nostack, readonly));
    }
}
