//! The ELF machine of a shared library: which CPU its code is for.

/// The ELF machine number and name a Cargo target's libraries must have.
pub fn target_machine(cargo_target: &str) -> Option<(u16, &'static str)> {
    match cargo_target.split('-').next()? {
        "x86_64" => Some((62, "x86-64")),
        "aarch64" => Some((183, "AArch64")),
        _ => None,
    }
}

/// The ELF machine of a shared library's bytes (the `e_machine` field), or None if not ELF.
pub fn machine_of(bytes: &[u8]) -> Option<u16> {
    if bytes.len() < 20 || &bytes[..4] != b"\x7fELF" {
        return None;
    }
    let little_endian = bytes[5] == 1;
    let field = [bytes[18], bytes[19]];
    Some(if little_endian {
        u16::from_le_bytes(field)
    } else {
        u16::from_be_bytes(field)
    })
}

/// A readable name for an ELF machine number.
pub fn machine_name(machine: u16) -> String {
    match machine {
        62 => "x86-64".to_string(),
        183 => "AArch64".to_string(),
        40 => "ARM".to_string(),
        243 => "RISC-V".to_string(),
        3 => "x86".to_string(),
        other => format!("ELF machine {other}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn elf_machines_are_read_from_the_header() {
        let mut header = vec![0u8; 64];
        header[..4].copy_from_slice(b"\x7fELF");
        header[5] = 1;
        header[18..20].copy_from_slice(&183u16.to_le_bytes());
        assert_eq!(machine_of(&header), Some(183));
        assert_eq!(
            target_machine("aarch64-unknown-linux-gnu"),
            Some((183, "AArch64"))
        );
        assert_eq!(machine_of(b"not an elf file at all"), None);
        assert_eq!(machine_name(62), "x86-64");
    }
}
