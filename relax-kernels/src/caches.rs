//! The CPU's cache sizes, as Linux reports them, for the kernels' block sizes.

use std::sync::OnceLock;

/// Float32 values per cache line (64 bytes), the step of the kernels' prefetches.
pub(crate) const LINE_VALUES: usize = 64 / std::mem::size_of::<f32>();

/// The bytes of the level-2 cache of the first CPU (`/sys/devices/system/cpu/cpu0/cache`),
/// read once; None where it is not reported.
pub(crate) fn level2_bytes() -> Option<usize> {
    static LEVEL2: OnceLock<Option<usize>> = OnceLock::new();
    *LEVEL2.get_or_init(|| {
        let caches = std::fs::read_dir("/sys/devices/system/cpu/cpu0/cache").ok()?;
        caches.flatten().find_map(|index| {
            let read = |name: &str| std::fs::read_to_string(index.path().join(name)).ok();
            let data = matches!(read("type")?.trim(), "Unified" | "Data");
            (read("level")?.trim() == "2" && data).then(|| parse_size(&read("size")?))?
        })
    })
}

/// `1024K`, `2M` or a number of bytes, as sysfs writes cache sizes.
fn parse_size(text: &str) -> Option<usize> {
    let text = text.trim();
    let (number, unit) = match text.chars().last()? {
        'K' => (&text[..text.len() - 1], 1 << 10),
        'M' => (&text[..text.len() - 1], 1 << 20),
        _ => (text, 1),
    };
    number.parse::<usize>().ok()?.checked_mul(unit)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_read_as_sysfs_writes_them() {
        assert_eq!(parse_size("1024K\n"), Some(1 << 20));
        assert_eq!(parse_size("2M"), Some(2 << 20));
        assert_eq!(parse_size("512"), Some(512));
        assert_eq!(parse_size("K"), None);
        assert_eq!(parse_size("lots"), None);
        // Whatever this machine reports, it is a plausible level-2 size.
        if let Some(bytes) = level2_bytes() {
            assert!((64 << 10..=64 << 20).contains(&bytes), "{bytes}");
        }
    }
}
