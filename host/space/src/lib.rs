//! Rye's item model, with no WebAssembly in sight: the three spaces, item
//! ids, resolution with shadowing, the extractor data that says which files
//! are items and which parser reads them, and the search query language.
//!
//! ```no_run
//! use rye_space::{ItemKind, Spaces};
//! # fn main() -> Result<(), rye_space::SpaceError> {
//! let spaces = Spaces::new(Some("/work/project".as_ref()), Some("/home/me".as_ref()), "/opt/rye".as_ref());
//! let resolved = spaces.resolve(ItemKind::Tool, "rye/bash/bash", &[".py".into(), ".yaml".into()], None)?;
//! println!("{} from {}", resolved.location.path.display(), resolved.location.space);
//! for hidden in &resolved.shadowed {
//!     println!("  shadows {}", hidden.path.display());
//! }
//! # Ok(()) }
//! ```

mod confine;
mod error;
mod extractor;
mod id;
mod kind;
mod listing;
mod pattern;
pub mod query;
mod resolve;
mod space;
mod stamp;
mod walk;
mod yaml;

pub use confine::{
    escape_error, escape_of, open_within, process_exists, read_within, write_within,
};
pub use error::{SpaceError, display_paths, shorten};
pub use extractor::{DeclaredFormat, EXTRACTORS_DIR, Extractor, Extractors};
pub use id::{validate_id, validate_plugin_name};
pub use kind::{ItemKind, UnknownKind};
pub use listing::{ListingCache, Quiet, RequestScope};
pub use pattern::shell_match;
pub use resolve::{Listed, Location, Resolved, extension_of};
pub use space::{Space, SpaceRoot, Spaces, UnknownSpace, same_dir};
pub use stamp::FileStamp;
pub use yaml::parse_yaml;
