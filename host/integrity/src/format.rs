use std::path::{Path, PathBuf};

use rye_space::ItemKind;

use crate::IntegrityError;

/// How a signature line is written in one kind of file: `prefix`, a space,
/// the fields, `suffix`, a newline.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SignatureFormat {
    pub prefix: String,
    pub suffix: String,
    /// The line goes second when the file starts with a `#!/` shebang.
    pub after_shebang: bool,
}

fn html() -> SignatureFormat {
    SignatureFormat::new("<!--", " -->", false)
}
fn hash_after_shebang() -> SignatureFormat {
    SignatureFormat::new("#", "", true)
}
fn hash() -> SignatureFormat {
    SignatureFormat::new("#", "", false)
}
fn slashes() -> SignatureFormat {
    SignatureFormat::new("//", "", false)
}

impl SignatureFormat {
    pub fn new(prefix: &str, suffix: &str, after_shebang: bool) -> Self {
        Self {
            prefix: prefix.to_owned(),
            suffix: suffix.to_owned(),
            after_shebang,
        }
    }
}

/// The extension of a detached signature, appended to the signed file's
/// name (`ast.wasm` → `ast.wasm.sig`).
pub const DETACHED_EXTENSION: &str = "sig";

/// Where the detached signature of `file` lives.
pub fn detached_path(file: &Path) -> PathBuf {
    let mut name = file.as_os_str().to_owned();
    name.push(".");
    name.push(DETACHED_EXTENSION);
    PathBuf::from(name)
}

/// The signature format of a file of `kind` named `file_name`. `declared`
/// holds formats an extractor declares per extension (with the dot), which
/// win; otherwise: HTML comments for directives and knowledge (whatever the
/// extension), `#` for script and data tools (after a shebang), `//` for
/// JavaScript and TypeScript tools, `#` on the first line for config files.
pub fn format_for(
    kind: ItemKind,
    file_name: &str,
    declared: &[(String, SignatureFormat)],
) -> Result<SignatureFormat, IntegrityError> {
    let extension = file_name
        .rfind('.')
        .map(|dot| &file_name[dot..])
        .unwrap_or_default();
    if let Some((_, format)) = declared.iter().find(|(ext, _)| ext == extension) {
        return Ok(format.clone());
    }
    let format = match (kind, extension) {
        (ItemKind::Directive, ".md") => html(),
        (ItemKind::Knowledge, ".md" | ".yaml" | ".yml") => html(),
        (ItemKind::Tool, ".py" | ".yaml" | ".yml" | ".json" | ".sh" | ".rb" | ".toml") => {
            hash_after_shebang()
        }
        (ItemKind::Tool, ".js" | ".ts" | ".mjs" | ".cjs") => slashes(),
        (ItemKind::Config, ".yaml" | ".yml" | ".toml") => hash(),
        _ => {
            return Err(IntegrityError::NoFormat {
                kind: kind.to_string(),
                extension: extension.to_owned(),
            });
        }
    };
    Ok(format)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_follow_kind_then_extension() {
        assert_eq!(
            format_for(ItemKind::Knowledge, "a.yaml", &[]).unwrap(),
            html()
        );
        assert_eq!(
            format_for(ItemKind::Tool, "a.py", &[]).unwrap(),
            hash_after_shebang()
        );
        assert_eq!(format_for(ItemKind::Tool, "a.mjs", &[]).unwrap(), slashes());
        assert_eq!(format_for(ItemKind::Config, "k.toml", &[]).unwrap(), hash());
        assert_eq!(
            format_for(ItemKind::Tool, "a.rb", &[]).unwrap(),
            hash_after_shebang()
        );
        assert!(matches!(
            format_for(ItemKind::Tool, "a.kts", &[]),
            Err(IntegrityError::NoFormat { .. })
        ));
        let kotlin = [(".kts".to_owned(), slashes())];
        assert_eq!(
            format_for(ItemKind::Tool, "a.kts", &kotlin).unwrap(),
            slashes()
        );
        assert_eq!(
            detached_path(Path::new("/s/.ai/parsers/x.wasm")),
            Path::new("/s/.ai/parsers/x.wasm.sig")
        );
    }
}
