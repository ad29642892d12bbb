//! Small text helpers for messages.

/// The last `count` lines of `text`.
pub fn last_lines(text: &str, count: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(count)..].join("\n")
}

/// The first few names, then a count of the rest: `a, b, c, and 4 more`.
pub fn preview<'a>(names: impl Iterator<Item = &'a str>) -> String {
    let names: Vec<&str> = names.collect();
    let shown = names.iter().take(6).copied().collect::<Vec<_>>().join(", ");
    match names.len() {
        count if count > 6 => format!("{shown}, and {} more", count - 6),
        _ => shown,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn previews_count_what_they_leave_out() {
        let names = ["a", "b", "c", "d", "e", "f", "g", "h"];
        assert_eq!(preview(names.into_iter()), "a, b, c, d, e, f, and 2 more");
        assert_eq!(preview(["a"].into_iter()), "a");
        assert_eq!(last_lines("1\n2\n3", 2), "2\n3");
    }
}
