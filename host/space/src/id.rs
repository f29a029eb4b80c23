use crate::SpaceError;

/// Checks an item id: a relative `/`-separated path without extension.
///
/// Ids come from callers (agents, CLI users), so they are checked before
/// they touch the filesystem: no absolute paths, no `..`, no empty or
/// hidden segments, no backslashes or control characters.
pub fn validate_id(id: &str) -> Result<(), SpaceError> {
    validate_path_like("item id", id)
}

/// Checks a plugin name such as `python/ast` by the same rules as ids.
pub fn validate_plugin_name(name: &str) -> Result<(), SpaceError> {
    validate_path_like("plugin name", name)
}

/// How much of an invalid id an error message repeats.
const ECHOED_ID: usize = 200;

fn validate_path_like(what: &'static str, id: &str) -> Result<(), SpaceError> {
    let fail = |rule| {
        Err(SpaceError::InvalidId {
            what,
            id: crate::shorten(id, ECHOED_ID).into_owned(),
            rule,
        })
    };
    if id.is_empty() {
        return fail("it is empty");
    }
    if id.len() > 1024 {
        return fail("it is longer than 1024 bytes");
    }
    if id.starts_with('/') {
        return fail("it must be relative (no leading '/')");
    }
    if id.contains('\\') {
        return fail("segments are separated by '/', not '\\'");
    }
    if id.chars().any(char::is_control) {
        return fail("it contains a control character");
    }
    for segment in id.split('/') {
        if segment.is_empty() {
            return fail("it has an empty segment ('//' or a trailing '/')");
        }
        if segment == ".." || segment == "." {
            return fail("'.' and '..' segments are not allowed");
        }
        if segment.starts_with('.') {
            return fail("segments may not start with '.'");
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_huge_invalid_id_is_not_echoed_whole() {
        let id = "x/".repeat(50_000);
        let err = validate_id(&id).unwrap_err().to_string();
        assert!(err.len() < 400, "{} bytes", err.len());
        assert!(err.contains("more bytes cut"), "{err}");
    }

    #[test]
    fn accepts_ordinary_ids() {
        for id in ["rye/bash/bash", "x", "a-b/c_d", "foo.config-schema"] {
            validate_id(id).unwrap();
        }
    }

    #[test]
    fn rejects_escapes() {
        for id in [
            "",
            "/etc/passwd",
            "../x",
            "a/../b",
            "a//b",
            "a/",
            "a\\b",
            ".hidden",
            "a/./b",
            "a\0b",
        ] {
            assert!(validate_id(id).is_err(), "{id:?}");
        }
    }
}
