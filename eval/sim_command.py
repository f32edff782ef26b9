"""`oxygen-gym eval aloha` and `oxygen-gym eval droid`: the LIBERO evaluation's loop, records, resume, shards, summary,
plots and videos on the ALOHA and DROID-style sims (their plug-ins: eval/sims.py). One parser and one run function per
subcommand (`add_aloha_arguments` / `run_aloha`, `add_droid_arguments` / `run_droid`: oxygen_gym/cli.py's
"oxygen_gym.eval.sim_command:aloha" form); the flags they share with `eval libero` come from eval/libero/eval_command.py.
"""
from __future__ import annotations

import argparse

EXAMPLES = {
    "aloha": """Examples:
  oxygen-gym eval aloha --episodes 10 --out runs/aloha                      # both tasks, 10 placements each
  oxygen-gym eval aloha --tasks transfer_cube --episodes 2 --max-steps 20 --video all --out runs/aloha-smoke
  oxygen-gym eval aloha --checkpoint PATH --device cuda --out runs/aloha    # a pi0.5 ALOHA checkpoint
""",
    "droid": """Examples:
  oxygen-gym eval droid --episodes 10 --out runs/droid                      # lift, stack, pick_place_can
  oxygen-gym eval droid --tasks lift --episodes 2 --max-steps 20 --video all --out runs/droid-smoke
""",
}


def _add_sim_arguments(parser: argparse.ArgumentParser, sim_name: str) -> None:
    from oxygen_gym.policies.checkpoints.overrides import ConventionOverrides

    from .libero.eval_command import add_output_arguments, add_policy_arguments, add_scale_out_arguments

    title, tasks, steps, replan = {
        "aloha": ("ALOHA (gym-aloha's bimanual ViperX)", "transfer_cube, insertion", 300, 10),
        "droid": ("DROID-style Panda (robosuite 1.4, joint velocities at 15 Hz)", "lift, stack, pick_place_can", 300,
                  8),
    }[sim_name]
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.description = (f"Closed-loop evaluation on {title}: the same records (episodes.jsonl), resume, shards, "
                          f"summary, plots and videos as `oxygen-gym eval libero`. Protocol: openpi's client, "
                          f"replan every {replan} actions, {steps} steps at most (envs/protocols.py).")
    parser.epilog = EXAMPLES[sim_name]
    g = parser.add_argument_group("what to evaluate")
    g.add_argument("--tasks", default=None, help=f"task names or indices, e.g. 0 or {tasks.split(',')[0]} "
                                                 f"(default: all of {tasks})")
    g.add_argument("--episodes", type=int, default=None,
                   help="episodes per task; episode i starts from the env's placement i (default 50)")
    g.add_argument("--seeds", default=None,
                   help="one or more seeds, e.g. 0,1,2; several give a 95%% Student-t CI (default: the protocol's, 0)")
    add_policy_arguments(parser)
    add_output_arguments(parser.add_argument_group("outputs"))
    ConventionOverrides.add_arguments(parser, vlm_config=False)
    add_scale_out_arguments(parser)


def add_aloha_arguments(parser: argparse.ArgumentParser) -> None:
    """`oxygen-gym eval aloha`'s flags."""
    _add_sim_arguments(parser, "aloha")


def add_droid_arguments(parser: argparse.ArgumentParser) -> None:
    """`oxygen-gym eval droid`'s flags."""
    _add_sim_arguments(parser, "droid")


def config_from_args(args: argparse.Namespace, sim_name: str):
    """An EvalConfig for sim `sim_name` from its flags; ValueError naming the flag for anything unusable."""
    from .libero.episode_set import parse_seeds
    from .libero.eval_command import common_fields
    from .libero.eval_config import EvalConfig
    from .sims import get_sim

    sim = get_sim(sim_name)
    protocol = sim.protocols[0]
    episodes = args.episodes if args.episodes is not None else sim.default_episodes(protocol)
    if episodes < 1:
        raise ValueError(f"--episodes: {episodes}; expected a positive number of episodes per task")
    seeds = parse_seeds(args.seeds) if args.seeds is not None else [sim.default_seed(protocol)]
    if getattr(args, "save_rollouts", "none") != "none":
        raise ValueError(f"--save-rollouts: LIBERO only for now (its HDF5 layout); not with eval {sim_name}")
    config = EvalConfig(**common_fields(args), env=sim_name, robot=sim.robot, protocol=protocol, suites=[sim_name],
                        tasks=sim.parse_tasks(args.tasks), episodes=episodes, seeds=seeds)
    sim.check_selection(config)
    return config


def run_sim(args: argparse.Namespace, sim_name: str) -> int:
    from .libero.eval_command import execute

    return execute(lambda: config_from_args(args, sim_name), args)


def run_aloha(args: argparse.Namespace) -> int:
    return run_sim(args, "aloha")


def run_droid(args: argparse.Namespace) -> int:
    return run_sim(args, "droid")
