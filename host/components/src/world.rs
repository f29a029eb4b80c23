/// The package of the plugin contract.
pub const CONTRACT_PACKAGE: &str = "rye:plugin";
/// The contract version this host implements.
pub const CONTRACT_VERSION: &str = "0.1.0";

/// The worlds of the `rye:plugin` contract; what each may do is the
/// gate's to say.
pub use rye_gate::World;

/// The interface a component of `world` exports.
pub fn export_interface(world: World) -> &'static str {
    match world {
        World::Parser => "parsing",
        World::RuntimeAdapter => "planning",
        World::Validator => "validation",
        World::GraphWalker => "walking",
    }
}

fn world_of_interface(interface: &str) -> Option<World> {
    World::ALL
        .into_iter()
        .find(|w| export_interface(*w) == interface)
}

/// What a component's exports say about it: for each export of the form
/// `rye:plugin/<interface>@<version>`, the world and version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ContractExport {
    pub world: Option<World>,
    pub interface: String,
    pub version: String,
}

pub(crate) fn contract_exports<'a>(names: impl Iterator<Item = &'a str>) -> Vec<ContractExport> {
    names
        .filter_map(|name| {
            let rest = name.strip_prefix(CONTRACT_PACKAGE)?.strip_prefix('/')?;
            let (interface, version) = rest.split_once('@')?;
            Some(ContractExport {
                world: world_of_interface(interface),
                interface: interface.to_owned(),
                version: version.to_owned(),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_contract_exports() {
        let names = [
            "wasi:cli/run@0.2.0",
            "rye:plugin/parsing@0.1.0",
            "rye:plugin/other@0.3.0",
        ];
        let found = contract_exports(names.into_iter());
        assert_eq!(found.len(), 2);
        assert_eq!(found[0].world, Some(World::Parser));
        assert_eq!(found[1].world, None);
    }
}
