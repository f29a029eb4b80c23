//! The schema of a config item.
//!
//! A config file `.ai/config/<id>.yaml` is checked against the tool item
//! named `<name>.config-schema` (a file under `.ai/tools/`, in any space),
//! `<name>` being the config's file stem; when several spaces or folders
//! hold one, the nearest space wins, and within a space the one whose id
//! ends with the config's whole id. The schema is that item's `schema`
//! key (or `config_schema`). The host finds and verifies it; validators
//! receive it with the config and check the content against it.

use rye_space::{ItemKind, Space};
use serde_json::Value;

use crate::parse::ParserLookup;
use crate::session::Session;
use crate::{HostError, Rye};

/// The schema a config item is checked against.
pub(crate) struct ConfigSchema {
    pub(crate) id: String,
    /// The schema, as JSON text.
    pub(crate) schema: String,
    /// SHA-256 of the schema file's bytes.
    pub(crate) content_hash: [u8; 32],
}

impl Rye {
    /// The schema for config `id`, if a space holds one. A schema file
    /// that cannot be read, parsed or verified is an error: a config is
    /// never silently left unchecked because its schema was broken.
    pub(crate) fn config_schema(
        &self,
        session: &Session,
        id: &str,
    ) -> Result<Option<ConfigSchema>, HostError> {
        let stem = id.rsplit('/').next().unwrap_or(id);
        let wanted = format!("{stem}.config-schema");
        let whole = format!("{id}.config-schema");
        let spaces = &session.spaces;
        let extractors = session.extractors(self)?;
        let tools = extractors.require(ItemKind::Tool)?;
        for root in spaces.roots() {
            let listed = spaces.list_cached(
                &self.listings,
                ItemKind::Tool,
                root.space,
                &tools.extensions,
            )?;
            let mut candidates: Vec<_> = listed
                .iter()
                .filter(|item| item.id == wanted || item.id.ends_with(&format!("/{wanted}")))
                .collect();
            if candidates.is_empty() {
                continue;
            }
            // The one whose id ends with the whole config id, else the
            // shortest id, so the choice does not depend on listing order.
            candidates.sort_by_key(|item| {
                (
                    !(item.id == whole || item.id.ends_with(&format!("/{whole}"))),
                    item.id.len(),
                    item.id.clone(),
                )
            });
            let item = candidates[0];
            // A schema that is a link out of its space is refused, not
            // passed over: the config would go unchecked.
            if let Some(escape) = item.escape_error(&root.ai_dir) {
                return Err(escape.into());
            }
            return self
                .read_schema(session, (&item.id, root.space, &item.path))
                .map(Some);
        }
        Ok(None)
    }

    fn read_schema(
        &self,
        session: &Session,
        (id, space, path): (&str, Space, &std::path::Path),
    ) -> Result<ConfigSchema, HostError> {
        let mut parsers = ParserLookup::default();
        let parsed = self.parse_file(session, &mut parsers, (ItemKind::Tool, id, space, path))?;
        let document = match parsed.outcome.as_ref() {
            Ok(document) => &document.document,
            Err(failure) => {
                return Err(HostError::ConfigSchema {
                    path: path.to_owned(),
                    reason: format!("its parser {} finds it invalid: {failure}", parsed.parser),
                });
            }
        };
        let trust = session.trust(self);
        let extractors = session.extractors(self)?;
        self.verify_item(
            &trust,
            Some(&extractors),
            (ItemKind::Tool, space, path),
            parsed.content_hash,
            Some(parsed.content.as_bytes()),
        )?;
        let schema = ["schema", "config_schema"]
            .iter()
            .find_map(|k| document.get(*k))
            .map(Value::to_string)
            .ok_or_else(|| HostError::ConfigSchema {
                path: path.to_owned(),
                reason: "it has no `schema` key".into(),
            })?;
        Ok(ConfigSchema {
            id: id.to_owned(),
            schema,
            content_hash: parsed.content_hash,
        })
    }
}
