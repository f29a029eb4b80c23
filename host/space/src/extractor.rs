//! Extractors: the data that says, per item kind, which file extensions are
//! items, which parser component reads each, and how search weighs fields.
//!
//! Each kind's extractor is a YAML file at
//! `.ai/tools/rye/core/extractors/<kind>/<kind>_extractor.yaml`; the first
//! space that has one wins, so a project can redefine a kind wholesale.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::{ItemKind, SpaceError, Spaces};

/// Where extractors live under `.ai/`.
pub const EXTRACTORS_DIR: &str = "tools/rye/core/extractors";

/// One kind's extractor.
#[derive(Debug, Clone, PartialEq)]
pub struct Extractor {
    pub kind: ItemKind,
    /// Extensions (with the dot) in lookup order. Two files of one id with
    /// different listed extensions in one space are an error.
    pub extensions: Vec<String>,
    /// Parser component per extension, falling back to `parser`.
    pub parsers: Vec<(String, String)>,
    pub parser: Option<String>,
    /// Search weight per field name.
    pub search_fields: Vec<(String, f64)>,
    /// Signature line formats declared per extension (`signature_format`
    /// for every extension, `signature_formats` per extension); extensions
    /// not listed use the host's built-in formats.
    pub signature_formats: Vec<(String, DeclaredFormat)>,
    /// The file this came from.
    pub source: PathBuf,
}

/// How an extractor says signature lines are written in its files.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeclaredFormat {
    pub prefix: String,
    #[serde(default)]
    pub suffix: String,
    #[serde(default)]
    pub after_shebang: bool,
}

#[derive(Deserialize)]
struct ExtractorFile {
    #[serde(default)]
    signature_format: Option<DeclaredFormat>,
    #[serde(default)]
    signature_formats: std::collections::BTreeMap<String, DeclaredFormat>,
    extensions: Vec<String>,
    #[serde(default)]
    parser: Option<String>,
    #[serde(default)]
    parsers: serde_json::Map<String, serde_json::Value>,
    #[serde(default)]
    search_fields: serde_json::Map<String, serde_json::Value>,
}

impl Extractor {
    /// The parser component for a file with this extension (with the dot).
    pub fn parser_for(&self, extension: &str) -> Option<&str> {
        self.parsers
            .iter()
            .find(|(ext, _)| ext == extension)
            .map(|(_, name)| name.as_str())
            .or(self.parser.as_deref())
    }

    /// Whether files with this extension are items of this kind.
    pub fn handles(&self, extension: &str) -> bool {
        self.extensions.iter().any(|e| e == extension)
    }

    /// Reads one extractor file.
    pub fn from_yaml(kind: ItemKind, path: &Path, text: &str) -> Result<Self, SpaceError> {
        let file: ExtractorFile = crate::parse_yaml(path, text)?;
        let bad = |message: String| SpaceError::Data {
            path: path.to_owned(),
            message,
        };
        for ext in &file.extensions {
            if !ext.starts_with('.') || ext.len() < 2 || ext[1..].contains(['.', '/']) {
                return Err(bad(format!("extension {ext:?} must look like \".py\"")));
            }
        }
        let parsers = file
            .parsers
            .into_iter()
            .map(|(ext, name)| match name {
                serde_json::Value::String(name) => {
                    crate::validate_plugin_name(&name).map_err(|e| bad(e.to_string()))?;
                    Ok((ext, name))
                }
                other => Err(bad(format!(
                    "parser for {ext:?} must be a name, found {other}"
                ))),
            })
            .collect::<Result<_, _>>()?;
        if let Some(name) = &file.parser {
            crate::validate_plugin_name(name).map_err(|e| bad(e.to_string()))?;
        }
        let search_fields = file
            .search_fields
            .into_iter()
            .map(|(field, weight)| match weight.as_f64() {
                Some(w) if w >= 0.0 => Ok((field, w)),
                _ => Err(bad(format!(
                    "search weight of {field:?} must be a non-negative number"
                ))),
            })
            .collect::<Result<_, _>>()?;
        for (ext, format) in &file.signature_formats {
            if !file.extensions.contains(ext) {
                return Err(bad(format!(
                    "signature_formats names {ext:?}, which is not among the extensions"
                )));
            }
            check_format(format)
                .map_err(|why| bad(format!("signature format of {ext:?}: {why}")))?;
        }
        if let Some(format) = &file.signature_format {
            check_format(format).map_err(|why| bad(format!("signature_format: {why}")))?;
        }
        let signature_formats = file
            .extensions
            .iter()
            .filter_map(|ext| {
                file.signature_formats
                    .get(ext)
                    .or(file.signature_format.as_ref())
                    .map(|f| (ext.clone(), f.clone()))
            })
            .collect();
        Ok(Self {
            kind,
            signature_formats,
            extensions: file.extensions,
            parsers,
            parser: file.parser,
            search_fields,
            source: path.to_owned(),
        })
    }
}

fn check_format(format: &DeclaredFormat) -> Result<(), &'static str> {
    if format.prefix.trim().is_empty()
        || format.prefix.contains('\n')
        || format.suffix.contains('\n')
    {
        return Err("needs a non-empty prefix and a suffix on one line");
    }
    Ok(())
}

/// The extractors in effect for one set of spaces.
#[derive(Debug, Clone, PartialEq)]
pub struct Extractors {
    by_kind: Vec<Extractor>,
}

impl Extractors {
    /// The file that would define `kind`'s extractor in the space whose
    /// `.ai/` is `ai_dir`.
    pub fn path_in(ai_dir: &Path, kind: ItemKind) -> PathBuf {
        ai_dir
            .join(EXTRACTORS_DIR)
            .join(kind.as_str())
            .join(format!("{}_extractor.yaml", kind.as_str()))
    }

    /// Reads each primary kind's extractor, and the config kind's if any
    /// space defines it, from the first space that has one.
    pub fn load(spaces: &Spaces) -> Result<Self, SpaceError> {
        Self::load_with(spaces, |path| match std::fs::read_to_string(path) {
            Ok(text) => Ok(Some(text)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(SpaceError::io(path, e)),
        })
    }

    /// Like [`Extractors::load`], reading files through `read` (which
    /// returns `None` for a missing file), so callers can cache.
    pub fn load_with(
        spaces: &Spaces,
        mut read: impl FnMut(&Path) -> Result<Option<String>, SpaceError>,
    ) -> Result<Self, SpaceError> {
        let mut by_kind = Vec::new();
        for kind in ItemKind::PRIMARY {
            let mut found = None;
            for root in spaces.roots() {
                let path = Self::path_in(&root.ai_dir, kind);
                if let Some(text) = read(&path)? {
                    found = Some(Extractor::from_yaml(kind, &path, &text)?);
                    break;
                }
            }
            let extractor = found.ok_or_else(|| SpaceError::NoExtractor {
                kind,
                expected: format!(".ai/{EXTRACTORS_DIR}/{0}/{0}_extractor.yaml", kind.as_str()),
            })?;
            by_kind.push(extractor);
        }
        // Config items are optional: without an extractor they can only
        // stay unsigned.
        for root in spaces.roots() {
            let path = Self::path_in(&root.ai_dir, ItemKind::Config);
            if let Some(text) = read(&path)? {
                by_kind.push(Extractor::from_yaml(ItemKind::Config, &path, &text)?);
                break;
            }
        }
        Ok(Self { by_kind })
    }

    pub fn get(&self, kind: ItemKind) -> Option<&Extractor> {
        self.by_kind.iter().find(|e| e.kind == kind)
    }

    /// The extractor of `kind`, or the error saying none exists.
    pub fn require(&self, kind: ItemKind) -> Result<&Extractor, SpaceError> {
        self.get(kind).ok_or_else(|| SpaceError::NoExtractor {
            kind,
            expected: format!(".ai/{EXTRACTORS_DIR}/{0}/{0}_extractor.yaml", kind.as_str()),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_fields_in_order() {
        let text = "extensions: ['.py', '.yaml']\nparser: python/ast\nparsers:\n  .yaml: yaml/yaml\nsearch_fields:\n  name: 3\n";
        let e = Extractor::from_yaml(ItemKind::Tool, Path::new("x.yaml"), text).unwrap();
        assert_eq!(e.extensions, [".py", ".yaml"]);
        assert_eq!(e.parser_for(".yaml"), Some("yaml/yaml"));
        assert_eq!(e.parser_for(".py"), Some("python/ast"));
        assert_eq!(e.search_fields, [("name".to_owned(), 3.0)]);
        assert!(e.signature_formats.is_empty());
    }

    #[test]
    fn signature_formats_apply_per_extension() {
        let text = "extensions: ['.rb', '.lua']\nparser: x/y\nsignature_formats:\n  .rb: {prefix: '#', after_shebang: true}\n  .lua: {prefix: '--'}\n";
        let e = Extractor::from_yaml(ItemKind::Tool, Path::new("x.yaml"), text).unwrap();
        assert_eq!(e.signature_formats.len(), 2);
        assert_eq!(e.signature_formats[1].1.prefix, "--");
        assert!(e.signature_formats[0].1.after_shebang);
        let text = "extensions: ['.rb']\nsignature_formats:\n  .py: {prefix: '#'}\n";
        let err = Extractor::from_yaml(ItemKind::Tool, Path::new("x.yaml"), text).unwrap_err();
        assert!(
            err.to_string().contains("not among the extensions"),
            "{err}"
        );
    }

    #[test]
    fn rejects_bad_data_naming_the_file() {
        let err = Extractor::from_yaml(ItemKind::Tool, Path::new("t.yaml"), "extensions: ['py']\n")
            .unwrap_err();
        assert!(
            err.to_string().starts_with("t.yaml: extension \"py\""),
            "{err}"
        );
        let err = Extractor::from_yaml(ItemKind::Tool, Path::new("t.yaml"), "extensions: [\n")
            .unwrap_err();
        assert!(err.to_string().contains("invalid YAML at line"), "{err}");
        let err = Extractor::from_yaml(
            ItemKind::Tool,
            Path::new("t.yaml"),
            "extensions: ['.py']\nparser: ../x\n",
        )
        .unwrap_err();
        assert!(err.to_string().contains("'..'"), "{err}");
    }
}
