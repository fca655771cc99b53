//! Post and user ids: 1–128 characters of `A-Za-z0-9_-.`, checked where a like enters (the
//! API) and where it is counted (the mapper), so a record the API would refuse is never counted.

/// Longest post or user id accepted.
pub const MAX_ID_LEN: usize = 128;

/// Checks a `kind` id (`post`, `user`); `Err` says what is wrong, in one line.
pub fn check(kind: &str, id: &str) -> Result<(), String> {
    if id.is_empty() || id.len() > MAX_ID_LEN {
        return Err(format!("{kind} id must be 1 to {MAX_ID_LEN} characters"));
    }
    if !id
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
    {
        return Err(format!(
            "{kind} id may only contain letters, digits, '_', '-' and '.'"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_bounded_and_limited_to_a_safe_charset() {
        assert!(check("post", "p9").is_ok());
        assert!(check("post", &"a".repeat(MAX_ID_LEN)).is_ok());
        assert!(check("post", &"a".repeat(MAX_ID_LEN + 1)).is_err());
        assert!(check("post", "").is_err());
        assert!(check("user", "a b").is_err());
        assert!(check("user", "a#b").is_err());
    }
}
