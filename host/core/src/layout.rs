//! Where things live under a space's `.ai/` folder.

use rye_components::World;

/// Folders of `.ai/` that hold components, signed by detached files.
pub const COMPONENT_FOLDERS: [&str; 3] = [
    component_folder(World::Parser),
    component_folder(World::RuntimeAdapter),
    component_folder(World::Validator),
];

/// The folder under `.ai/` that holds the components of `world`.
pub const fn component_folder(world: World) -> &'static str {
    world.folder()
}

/// Whether config id `id` lies in the key store (`.ai/config/keys/`: the
/// signing keypair and the trusted-key files), which holds no config items.
pub(crate) fn is_key_store(id: &str) -> bool {
    id == "keys" || id.starts_with("keys/")
}
