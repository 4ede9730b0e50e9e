//! Gateway API durations (`1h`, `10s`, `1h30m`, `500ms`; GEP-2257).

/// Milliseconds of a Gateway API duration, or `None` if it does not parse.
pub fn parse_ms(text: &str) -> Option<u64> {
    let mut rest = text;
    let mut total: u64 = 0;
    if rest.is_empty() {
        return None;
    }
    while !rest.is_empty() {
        let digits = rest.find(|c: char| !c.is_ascii_digit())?;
        if digits == 0 || digits > 5 {
            return None;
        }
        let value: u64 = rest[..digits].parse().ok()?;
        rest = &rest[digits..];
        let (unit, len) = if rest.starts_with("ms") {
            (1, 2)
        } else if rest.starts_with('h') {
            (3_600_000, 1)
        } else if rest.starts_with('m') {
            (60_000, 1)
        } else if rest.starts_with('s') {
            (1_000, 1)
        } else {
            return None;
        };
        total = total.checked_add(value.checked_mul(unit)?)?;
        rest = &rest[len..];
    }
    Some(total)
}

#[cfg(test)]
mod tests {
    use super::parse_ms;

    #[test]
    fn durations() {
        assert_eq!(parse_ms("10s"), Some(10_000));
        assert_eq!(parse_ms("1h30m"), Some(5_400_000));
        assert_eq!(parse_ms("500ms"), Some(500));
        assert_eq!(parse_ms("0s"), Some(0));
        assert_eq!(parse_ms("1.5s"), None);
        assert_eq!(parse_ms(""), None);
        assert_eq!(parse_ms("10"), None);
    }
}
