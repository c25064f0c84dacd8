use clap::CommandFactory;

use crate::command::Cli;

/// The shared groups and their flags' ids. Each group is a clap `ArgGroup` named after its struct
/// (clap derive's own group per `Args` struct), so membership says where a flag is declared.
const GROUPS: &[(&str, &[&str])] = &[
    ("TargetArgs", &["model", "api", "preset"]),
    ("SizeArgs", &["contexts", "output_tokens"]),
    (
        "WorkloadArgs",
        &[
            "seed",
            "dataset",
            "dataset_limit",
            "dataset_strict",
            "dataset_output_tokens",
            "turns",
            "think_time",
        ],
    ),
    ("OutputArgs", &["out", "run_id", "quiet"]),
];

/// Which verbs take each group: a verb that takes one of a group's flags takes the whole group.
const TAKERS: &[(&str, &[&str])] = &[
    ("TargetArgs", &["sweep", "plan", "load", "soak"]),
    ("SizeArgs", &["sweep", "plan", "load", "soak"]),
    ("WorkloadArgs", &["sweep", "plan", "load"]),
    ("OutputArgs", &["sweep", "load", "soak"]),
];

/// Flags whose help is the group's own in every verb (the others carry a verb's narrower meaning,
/// set with `mut_arg`, e.g. load's single context).
const SAME_HELP: &[&str] = &["model", "api", "preset", "output_tokens", "dataset_limit", "out", "quiet"];

#[test]
fn each_shared_flag_is_declared_once_in_its_group() {
    let mut cli = Cli::command();
    cli.build();
    for (group, ids) in GROUPS {
        let takers = TAKERS.iter().find(|(g, _)| g == group).unwrap().1;
        let mut helps: Vec<(String, String)> = Vec::new();
        for verb in ["sweep", "plan", "load", "soak"] {
            let cmd = cli.find_subcommand(verb).unwrap();
            let members: Vec<String> = cmd
                .get_groups()
                .find(|g| g.get_id() == *group)
                .map(|g| g.get_args().map(|a| a.to_string()).collect())
                .unwrap_or_default();
            for id in *ids {
                let declared = cmd.get_arguments().any(|a| a.get_id() == *id);
                assert_eq!(
                    declared,
                    takers.contains(&verb),
                    "bench {verb} --{}: taken exactly where {group} is flattened",
                    id.replace('_', "-")
                );
                if declared {
                    assert!(
                        members.iter().any(|m| m == id),
                        "bench {verb} --{} is declared outside {group} (its members: {members:?})",
                        id.replace('_', "-")
                    );
                }
                if declared && SAME_HELP.contains(id) {
                    let arg = cmd.get_arguments().find(|a| a.get_id() == *id).unwrap();
                    helps.push((id.to_string(), arg.get_help().map(|h| h.to_string()).unwrap_or_default()));
                }
            }
        }
        for (id, help) in &helps {
            let first = &helps.iter().find(|(i, _)| i == id).unwrap().1;
            assert_eq!(help, first, "--{id}: one help text in every verb");
        }
    }
}

#[test]
fn load_and_soak_keep_their_own_meaning_of_a_shared_flag() {
    let cli = Cli::command();
    let help = |verb: &str, id: &str| {
        let cmd = cli.find_subcommand(verb).unwrap();
        cmd.get_arguments().find(|a| a.get_id() == id).unwrap().get_help().unwrap().to_string()
    };
    assert!(help("load", "contexts").contains("one context"), "{}", help("load", "contexts"));
    assert!(help("soak", "contexts").contains("(i mod n)"), "{}", help("soak", "contexts"));
    assert!(help("sweep", "contexts").contains("[default: 1024..4096]"));
    assert!(help("load", "run_id").contains("\"load\"") && help("soak", "run_id").contains("\"soak\""));
}
