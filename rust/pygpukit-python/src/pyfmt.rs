//! Python spellings for `__repr__`s: `None`/`True`/`False`, not Rust's `Some(..)`/`true`.

use std::fmt::Display;

/// `None`, or the value as Python prints it.
pub fn opt<T: Display>(value: Option<T>) -> String {
    value.map_or_else(|| "None".to_owned(), |v| v.to_string())
}

/// `True` or `False`.
pub fn flag(value: bool) -> &'static str {
    if value {
        "True"
    } else {
        "False"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spells_like_python() {
        assert_eq!(opt(Some(5u64)), "5");
        assert_eq!(opt(None::<u64>), "None");
        assert_eq!(flag(true), "True");
        assert_eq!(flag(false), "False");
    }
}
