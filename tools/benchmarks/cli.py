"""``python tools/bench.py``: measure, side by side in one run, every figure BENCHMARKS.md states.

Each section prints a Markdown block (the command, the machine, the date, a table of medians and ratios); with
``--write BENCHMARKS.md`` the block replaces the section of the same name in that file (between
``<!-- bench:NAME -->`` and ``<!-- /bench:NAME -->``), leaving the rest of the file as it was.
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
from collections.abc import Callable
from pathlib import Path

from benchmarks.timing import machine_description
from robo_safe_rl.config.schema import SEED_MAX
from robo_safe_rl.progress import progress_bar

ANT = "RoboSafe/Ant-v0"


def _table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def section_env(quick: bool) -> str:
    """Raw PyBullet stepping vs the env's step() vs the rsl-rl adapter (issue: adapter >= 0.85 of raw)."""
    from benchmarks.env_rate import bench_env_layers

    r = bench_env_layers(ANT, steps=400 if quick else 4000, repeats=3 if quick else 7, num_envs=16)
    rates, ratios = r["rates"], r["ratios"]
    rows = [
        ["raw stepping, one world", f"{rates['raw']:,.0f}", "1.00", ""],
        ["env.step(), one world", f"{rates['env_step']:,.0f}", f"{ratios['env_step']:.2f}", ""],
        [
            "raw stepping, 16 worlds round-robin",
            f"{rates['raw_round_robin']:,.0f}",
            f"{ratios['raw_round_robin']:.2f}",
            "1.00",
        ],
        [
            "GymVecEnv adapter, 16 envs",
            f"{rates['adapter']:,.0f}",
            f"{ratios['adapter']:.2f}",
            f"{r['adapter_vs_round_robin']:.2f}",
        ],
    ]
    header = ["layer", "env-steps/s (median)", "vs raw, one world", "vs raw, 16 worlds"]
    note = f"{r['steps']} env steps per measurement, {r['repeats']} interleaved rounds, one process."
    return _table(header, rows) + "\n\n" + note + "\n\n" + _task_steps(quick) + "\n\n" + _a1_terms(quick)


def _a1_terms(quick: bool) -> str:
    """The A1's reward terms: each one's cost as a share of its step (issue: report any above 5%)."""
    from benchmarks.env_rate import bench_a1_terms
    from robosafe_tasks.a1.config import RewardConfig

    r = bench_a1_terms(steps=300 if quick else 3000, repeats=3 if quick else 7, calls=2_000 if quick else 20_000)
    step_us, weights = r["step_us"], RewardConfig().weights()
    rows = [
        [f"`{name}`", f"{weights[name]:g}", f"{us:.2f}", f"{us / step_us:.1%}"] for name, us in r["per_term_us"].items()
    ]
    rows.append(["every term, in the step (all weights 0 vs the defaults)", "", f"{r['terms_us']:.1f}",
                 f"{r['terms_us'] / step_us:.1%}"])  # fmt: skip
    above = [name for name, us in r["per_term_us"].items() if us / step_us > 0.05]
    note = (
        f"`RoboSafe/A1Flat-v0`'s `step()`: {step_us:.0f} us ({r['rates']['all_terms']:,.0f} env-steps/s, median of "
        f"{r['repeats']} interleaved rounds of {r['steps']} steps, a reset at each episode end, against the same task "
        "with every weight 0: "
        f"{r['rates']['no_terms']:,.0f}). Each term alone: its function on one step's state, best of {r['repeats']} "
        "(a term of default weight 0 is not computed in the step). "
        + (f"Above 5% of the step: {', '.join(above)}." if above else "No term costs more than 5% of the step.")
    )
    header = ["A1 reward term", "default weight", "us per step", "share of step()"]
    return _table(header, rows) + "\n\n" + note


def _task_steps(quick: bool) -> str:
    """Per task: its step() against raw PyBullet stepping of the same robot and settings (issue: >= 0.85)."""
    import robosafe_tasks
    from benchmarks.env_rate import bench_task_step

    results = [
        bench_task_step(t, steps=300 if quick else 3000, repeats=3 if quick else 7) for t in robosafe_tasks.TASKS
    ]
    rows = [
        [
            f"`{r['env_id']}`",
            f"{r['rates']['raw']:,.0f}",
            f"{r['rates']['env_step']:,.0f}",
            f"{r['ratio']:.2f}",
            f"{len(r['episode_ends'])}",
            f"{r['rates']['raw_resets']:,.0f}",
            f"{r['rates']['env_step_resets']:,.0f}",
            f"{r['ratio_resets']:.2f}",
        ]
        for r in results
    ]
    header = ["task", "raw stepping", "step()", "vs raw", "episode ends", "raw, with those resets"]
    header += ["step(), with them", "vs raw"]
    note = (
        f"Env-steps/s (medians), {results[0]['steps']} steps per measurement, {results[0]['repeats']} interleaved "
        "rounds, one process. Raw stepping: the task's `raw_step` (torques and `stepSimulation`, the task's settings; "
        "for the A1 its PD loop: at each of the 4 substeps the joint states, the PD torques and one `stepSimulation`). "
        "Raw and `step()` run the same actions from the same reset without resetting, so they step the same "
        "trajectory; the last columns reset at each episode end, as a training does: `step()` where its episodes end "
        "(a termination or the task's time limit; their number in the measurement: episode ends), raw stepping at the "
        "same steps into the same states (every reset seeded; resets timed in both)."
    )
    return _table(header, rows) + "\n\n" + note


def section_safestep(quick: bool) -> str:
    """SafeStep's clean-path cost (issue: wrapped/unwrapped >= 0.97)."""
    from benchmarks.safe_step import bench_safe_step

    r = bench_safe_step(ANT, steps=500 if quick else 4000, repeats=3 if quick else 9)
    rows = [
        ["unwrapped", f"{r['unwrapped_steps_per_s']:,.0f}", "1.00"],
        ["SafeStep (defaults)", f"{r['wrapped_steps_per_s']:,.0f}", f"{r['ratio']:.3f}"],
    ]
    note = f"{r['steps']} env steps per block, {r['repeats']} alternating blocks each, one process."
    return _table(["Ant env", "env-steps/s (median)", "ratio"], rows) + "\n\n" + note


def section_guard(quick: bool) -> str:
    """The gradient guard's cost: per PPO update, and per whole training iteration (issue: <= 1.03)."""
    from benchmarks.guard import bench_guard
    from benchmarks.iteration import bench_guard_iterations

    u = bench_guard(repeats=5 if quick else 15)
    it = bench_guard_iterations(ANT, iterations=2 if quick else 5, repeats=3 if quick else 7)
    s = it["seconds_per_iteration"]
    rows = [
        [
            "PPO update (5 epochs x 4 mini-batches, 384 transitions)",
            f"{u['plain_s_per_update'] * 1e3:.2f} ms",
            f"{u['guarded_s_per_update'] * 1e3:.2f} ms",
            f"{u['ratio']:.3f}",
            f"{u['ratio_cpu']:.3f}",
        ],
        [
            "training iteration (16 Ant envs x 24 steps + update)",
            f"{s['wall_off'] * 1e3:.1f} ms",
            f"{s['wall_skip'] * 1e3:.1f} ms",
            f"{it['ratio_wall']:.3f}",
            f"{it['ratio_cpu']:.3f}",
        ],
    ]
    header = ["what", "guard off (median)", "guard skip (median)", "ratio, wall", "ratio, CPU time"]
    note = (
        f"Update: {u['repeats']} alternating blocks of {u['updates_per_block']} updates, {u['torch_threads']} torch "
        f"thread(s). Iteration: {it['repeats']} alternating blocks of {it['iterations_per_block']} iterations."
    )
    return _table(header, rows) + "\n\n" + note


def section_checkpoint(quick: bool) -> str:
    """Inspecting a 1 GiB checkpoint against torch.load of the same file."""
    from benchmarks.checkpoint import bench_inspect

    r = bench_inspect(size_mib=64 if quick else 1024, repeats=2 if quick else 5)
    rows = []
    cases = (
        ("read", "plain read of the file"),
        ("inspect", "inspect_checkpoint"),
        ("torch_load", "torch.load(weights_only=True)"),
    )
    for case, label in cases:
        c = r[case]
        rows.append([label, f"{c['seconds']:.3f}", f"{c['mb_per_s']:,.0f}", f"{c['peak_mib']:,.0f}"])
    ratios = r["ratios"]
    note = (
        f"File: {r['file_mib']:,.0f} MiB, {r['repeats']} interleaved rounds, each case in a fresh process. "
        f"Peak memory / file size: inspect {ratios['inspect_peak_over_file']:.3f}, torch.load "
        f"{ratios['torch_load_peak_over_file']:.3f}; inspect speed / torch.load speed "
        f"{ratios['inspect_speed_over_torch_load']:.1f}."
    )
    return _table(["case", "wall s (median)", "MB/s", "peak MiB above imports"], rows) + "\n\n" + note


def section_presets(
    quick: bool, tasks: tuple[str, ...] | None = None, seeds: tuple[int, ...] | None = None, reuse: bool = False
) -> dict[str, str]:
    """The three presets on each task of ``tasks`` (the learning section's): ``seeds`` (by default 1, 2, 3; quick: 1,
    2) each on the learning budget; with the Ant, each preset under the gauntlet drill too (hours).

    One block per task (``presets:<task>``) and one for the drill (``presets:drill``): a run of some tasks replaces
    their blocks and leaves the other tasks' as they were measured.
    """
    from benchmarks.learning import LEARNING_OVERRIDES, task_iterations
    from benchmarks.presets import (
        INTERVAL_LEVEL,
        INTERVAL_RESAMPLES,
        bench_presets,
        paired_returns,
        plot_curves,
        ratio_interval,
    )

    repo = Path(__file__).resolve().parents[2]
    tasks = tasks or (LEARNING_TASKS[:1] if quick else LEARNING_TASKS)
    if quick:
        small = ["task.num_envs=4", "runner.num_steps_per_env=8", "+task.env_kwargs.max_episode_steps=50"]
        budget = {task: [*small, "runner.max_iterations=3"] for task in tasks}
        drill = ["task=ant", "torch_threads=1", *small, "runner.max_iterations=8"]
        seeds = seeds or QUICK_SEEDS
    else:
        budget = {task: [f"runner.max_iterations={task_iterations(task, LEARNING_STEPS)}"] for task in tasks}
        drill = ["task=ant", "torch_threads=1", f"runner.max_iterations={PRESET_DRILL_ITERATIONS}"]
        seeds = seeds or SEEDS
    # The runs stay in logs/bench_presets/ (ignored by git) for TensorBoard and tools/play.py.
    out = repo / "logs" / ("bench_presets_quick" if quick else "bench_presets")
    drill_overrides = drill if "ant" in tasks else None
    r = bench_presets(repo, out, budget, drill_overrides, seeds=seeds, eval_episodes=2 if quick else 16, reuse=reuse)
    header = [
        "preset",
        "return over seeds, mean +- std [min, max]",
        "seeds' returns",
        "vs ppo",
        f"vs ppo, {INTERVAL_LEVEL:.0%} bootstrap interval",
        "env steps",
        "wall s (median)",
        "lr (median)",
        "iterations at lr floor",
    ]
    blocks = {}
    for task, by_preset in r["compare"].items():
        base = by_preset["ppo"]["final_return"]
        rows = []
        for name, p in by_preset.items():
            f = p["final_return"]
            runs = p["runs"]
            # ppo is the reference; the others' interval pairs each seed's two returns.
            interval = None if name == "ppo" else ratio_interval(*paired_returns(runs, by_preset["ppo"]["runs"]))
            rows.append(
                [
                    f"`{name}`",
                    _spread(f),
                    " / ".join(f"{v:,.0f}" for v in f["values"]) or "n/a",
                    "n/a" if f["mean"] is None or not base["mean"] else f"{f['mean'] / base['mean']:.2f}",
                    "n/a" if interval is None else f"[{interval[0]:.2f}, {interval[1]:.2f}]",
                    f"{runs[0].env_steps:,}",
                    f"{statistics.median(run.wall_s for run in runs):,.0f}",
                    f"{p['lr_median']:.2g}",
                    f"{p['lr_at_floor']:.0%}",
                ]
            )
        figure = (out if quick else repo / "docs") / f"presets_{task}.png"  # a quick run's figures stay with its runs
        runs_by_preset = {name: p["runs"] for name, p in by_preset.items()}
        plot_curves(runs_by_preset, figure, f"task={task}: the presets on the learning budget, {len(seeds)} seeds")
        note = (
            f"Seeds {r['seeds']}. Every run: `python tools/train.py task={task} algo=P {' '.join(LEARNING_OVERRIDES)} "
            f"{' '.join(budget[task])} seed=S`, two at a time, one core each: the learning section's command plus "
            "`algo=P`, so on the CPU model that section ran on, `ppo`'s runs are its runs of the same seeds (a seeded "
            "run repeats bit for bit on one CPU model, not across models). Returns: the final checkpoint by "
            f"`python tools/evaluate.py RUN` (deterministic, {r['eval_episodes']} full episodes, test seeds), a seed's "
            "mean; over seeds, mean +- std of those. `vs ppo`: the ratio of the means over seeds; its interval: the "
            "seeds resampled, each drawn seed bringing its returns under both presets (paired percentile bootstrap, "
            f"{INTERVAL_RESAMPLES:,} resamples), the ratios the seeds' spread allows; `n/a` for `ppo` itself, for "
            "fewer than two seeds and where a `ppo` return is not positive. Learning curves: the training episodes' "
            "returns (stochastic policy)."
        )
        blocks[f"presets:{task}"] = "\n\n".join(
            [_table(header, rows), note, f"![{task}: presets' learning curves]({figure.relative_to(repo)})"]
        )
    if r["drills"]:
        drill_header = ["preset", "status", "env steps", "faults injected", "rollbacks", "skipped steps"]
        drill_header += ["physics errors", "final policy's return (no faults)"]
        drill_rows = []
        for name, d in r["drills"].items():
            drill_rows.append(
                [
                    f"`{name}`",
                    d.status,
                    f"{d.env_steps:,}",
                    f"{sum(d.faults_injected.values()):,}",
                    str(d.safety.get("rollbacks", 0)),
                    str(d.safety.get("grad_steps_skipped", 0)),
                    str(d.safety.get("physics_errors", 0)),
                    "n/a" if d.final_return is None else f"{d.final_return:,.0f}",
                ]
            )
        drill_note = (
            f"Every run: `python tools/train.py algo=P seed=1 {' '.join(drill)} +drill=gauntlet` (the Ant's default "
            "env workers), beside the comparison runs; the final policy evaluated as above, without faults."
        )
        blocks["presets:drill"] = _table(drill_header, drill_rows) + "\n\n" + drill_note
    return blocks


def section_workers(quick: bool) -> str:
    """Env workers: Ant env-steps/s in the trainer, in 1, 2 (and every core's) workers, in AsyncVectorEnv, and the
    free-stepping limits at equal process counts; then whole training iterations."""
    from benchmarks.workers import bench_env_rates, bench_iterations

    cores = int(machine_description()["cores"])
    counts = (1, 2, cores) if cores > 2 else (1, 2)
    block = cores - 1  # workers beside the trainer's block: every core steps envs
    r = bench_env_rates(ANT, steps=10 if quick else 150, repeats=2 if quick else 7, workers=counts, trainer_block=block)
    rates, vs = r["rates"], r["vs_in_process"]

    def row(label: str, case: str, processes: int | None) -> list[str]:
        free = (
            [f"{rates[case] / rates[f'free_{kind}_{processes}']:.2f}" for kind in ("env", "raw")] if processes else []
        )
        return [label, f"{rates[case]:,.0f}", f"{vs[case]:.2f}", *(free or ["", ""])]

    rows = [row("envs in the trainer (`task.num_workers=0`)", "in_process", 1)]
    rows += [row(f"`task.num_workers={w}`", f"workers_{w}", w) for w in counts]
    rows.append(row("`task.num_workers=2`, every process blocking at once", "workers_2_blocking", 2))
    rows.append(row("`task.num_workers=2 task.pin_workers=false`", "workers_2_unpinned", 2))
    rows.append(row(f"`task.num_workers={block} task.trainer_block=true`", f"trainer_block_{block}", block + 1))
    rows.append(row("the same, every process blocking at once", f"trainer_block_{block}_blocking", block + 1))
    rows.append(row(f"gymnasium AsyncVectorEnv ({r['num_envs']} processes)", "async_vector_env", None))
    for w in counts:
        rows.append(row(f"free `env.step()` (SafeStep), {w} process(es), no sync", f"free_env_{w}", None))
        rows.append(row(f"free raw PyBullet stepping, {w} process(es)", f"free_raw_{w}", None))
    header = ["16 Ant envs", "env-steps/s (median)", "vs in the trainer", "vs free env.step, same processes",
              "vs raw stepping, same processes"]  # fmt: skip
    quick_it = ("runner.num_steps_per_env=8",) if quick else ()
    it = bench_iterations("ant", iterations=1 if quick else 3, repeats=2 if quick else 5, workers=2, overrides=quick_it)
    secs, speedup = it["seconds_per_iteration"], it["speedup"]
    labels = {"in_process": "envs in the trainer, 1 torch thread", "workers_2": "2 workers, 1 torch thread",
              "workers_2_2_threads": "2 workers, 2 torch threads",
              "trainer_block_1": "1 worker beside the trainer's block, 1 torch thread"}  # fmt: skip
    it_rows = [[labels[name], f"{secs[name] * 1e3:.0f} ms", f"{speedup[name]:.2f}"] for name in secs]
    note = (
        f"{r['steps']} vector steps ({r['steps'] * r['num_envs']:,} env steps) per measurement, {r['repeats']} "
        "interleaved rounds, every env in SafeStep with the defaults. Blocking at once: `WorkerEnvBatch(spin=False)` "
        "instead of polling for 2 ms where a process has a core to itself. Free stepping: each process steps its "
        "share of the envs round-robin with no synchronisation at all (`env.step()`, or the task's `raw_step`: "
        f"torques and `stepSimulation` only). Training iterations: `task={it['task']}` with its tuned values, "
        f"{it['num_envs']} envs x {it['steps_per_env']} steps and the PPO update, {it['repeats']} alternating "
        f"blocks of {it['iterations_per_block']} iterations."
    )
    return (
        _table(header, rows)
        + "\n\n"
        + _table(["training iteration", "wall per iteration (median)", "speed-up vs the trainer"], it_rows)
        + "\n\n"
        + note
    )


def section_wake(quick: bool) -> str:
    """One worker hand-over alone: a byte to a process waiting on its pipe and a byte back, to another core, on the
    same core, and to another core whose process polls instead of blocking."""
    from benchmarks.wake import bench_wake

    r = bench_wake(round_trips=50 if quick else 1000, rounds=1 if quick else 3)
    if "skipped" in r:
        return f"Not measured: {r['skipped']}."
    labels = {
        "other_core": "to another core, waiting in `poll` (a worker between steps)",
        "same_core": "on the trainer's own core",
        "other_core_polling": "to another core, polling without blocking (no idle core to wake)",
    }
    rows = [[labels[c], f"{v['median_us']:,.0f}", f"{v['p90_us']:,.0f}"] for c, v in r["cases"].items()]
    note = (
        f"{r['rounds']} interleaved rounds of {r['round_trips']} round trips per case; the trainer's side pinned to "
        f"core {r['cores'][0]}, another core: {r['cores'][1]}; {r['gap_s'] * 1e3:g} ms of work between two round "
        "trips. Each is one byte each way over a socket pair (`multiprocessing.connection.Connection`, one "
        "`select.poll`), as one env worker's step is."
    )
    return _table(["one hand-over", "round trip, us (median)", "90th percentile, us"], rows) + "\n\n" + note


#: The schedule probe's cases: (label, overrides, iterations); equal env steps each (30 x 1,024 = 80 x 384 = 30,720).
SCHEDULE_CASES: tuple[tuple[str, list[str], int], ...] = (
    ("generic defaults: 16 x 24 steps, 4 mini-batches of 96, raw inputs", ["~agent"], 80),
    ("generic, 16 x 64 steps: 4 mini-batches of 256", ["~agent", "runner.num_steps_per_env=64"], 30),
    ("Ant's tuned values: 64 steps, normalised inputs, 5 epochs x 4 mini-batches of 256", [], 30),
    ("Ant, 2 mini-batches of 512", ["algorithm.num_mini_batches=2"], 30),
    ("Ant, 2 epochs", ["algorithm.num_learning_epochs=2"], 30),
    ("Ant, desired_kl 0.02", ["algorithm.desired_kl=0.02"], 30),
)


def section_schedule(quick: bool) -> str:
    """What the adaptive schedule does within an update, per configuration (short in-process trainings)."""
    from benchmarks.schedule import probe

    rows = []
    for label, overrides, iterations in SCHEDULE_CASES:
        extra = ["task.num_envs=4"] if quick else []
        r = probe([*overrides, *extra], 3 if quick else iterations)
        one = r["kl_one_step_first_update"]
        rows.append(
            [
                label,
                f"`{' '.join(overrides)}`" if overrides else "",
                f"{r['updates']} x {r['steps_per_update']}",
                f"{r['at_floor']:.0%}",
                f"{r['lr_end_median']:.2g}",
                f"{r['lr_ran_median']:.2g}",
                f"{r['kl_first_max']:.1g}",
                "n/a" if one is None else f"{one:.3f}",
                f"{r['kl_end_median']:.3f}",
                f"{r['steps_over_twice_target_median']:.0f}",
            ]
        )
    header = [
        "configuration (task=ant)",
        "overrides",
        "updates x steps",
        "updates ending at the 1e-5 floor",
        "rate at the end (median)",
        "rate the steps ran at (median of update means)",
        "KL at the first mini-batch (max)",
        "KL after the first step of training",
        "KL at the end of an update (median)",
        "steps above 2 x desired_kl per update (median)",
    ]
    budget = "quick: 4 envs, 3 updates per case" if quick else "equal env steps per case (30,720)"
    note = (
        f"Seed 1, one torch thread, envs in the process; desired_kl 0.01 unless set; {budget}. The rates are "
        "rsl-rl's rule replayed on the recorded KLs (`tools/benchmarks/schedule.py`)."
    )
    return _table(header, rows) + "\n\n" + note


#: Training budget of the presets' drill runs: 488 x 16 envs x 64 steps (Ant's tuned rollout) = 499,712 env steps.
PRESET_DRILL_ITERATIONS = 488
#: Training budget of the learning curves, in env steps per run: each task runs the iterations of its own rollout that
#: reach it (:func:`benchmarks.learning.task_iterations`; the Ant: 977 x 16 envs x 64 steps = 1,000,448).
LEARNING_STEPS = 1_000_000
#: Training seeds of the sections that train (presets, learning, a1) unless --seeds says others; a quick run's.
SEEDS = (1, 2, 3)
QUICK_SEEDS = (1, 2)


def _spread(stats: dict | None) -> str:
    """``mean +- std [min, max]`` of a statistics dict, or ``n/a``."""
    if stats is None or stats["mean"] is None:
        return "n/a"
    return f"{stats['mean']:,.0f} +- {stats['std']:,.0f} [{stats['min']:,.0f}, {stats['max']:,.0f}]"


#: The tasks of the learning section, each with its own tuned values (configs/agent/<task>.yaml).
LEARNING_TASKS = ("ant", "half_cheetah", "hopper", "walker2d")


def section_learning(
    quick: bool, tasks: tuple[str, ...] | None = None, seeds: tuple[int, ...] | None = None, reuse: bool = False
) -> dict[str, str]:
    """Each task of ``tasks`` (:data:`LEARNING_TASKS`) with its tuned values: ``seeds`` (by default 1, 2, 3; quick: 1,
    2) of 1M env steps, two trainings at a time (one core each), learning curves against env steps and wall time, the
    final policies by the evaluation protocol; then, with the Ant, its first seed once more with the env workers, alone
    on the machine: its wall time, and the same return.

    One block per task (``learning:<task>``), as the presets section writes them: a run of some tasks (a recipe changed
    for one task) replaces their blocks and leaves the other tasks' as they were measured.
    """
    from concurrent.futures import ThreadPoolExecutor

    from benchmarks.learning import LEARNING_OVERRIDES, ZOO_PPO, bench_learning, plot_learning, task_iterations

    repo = Path(__file__).resolve().parents[2]
    if quick:
        small = ["task.num_envs=4", "runner.num_steps_per_env=8", "runner.max_iterations=3"]
        small += ["+task.env_kwargs.max_episode_steps=50"]
        seeds = seeds or QUICK_SEEDS
        tasks = tasks or LEARNING_TASKS[:2]
        budget = {task: small for task in tasks}
    else:
        seeds, tasks = seeds or SEEDS, tasks or LEARNING_TASKS
        budget = {task: [f"runner.max_iterations={task_iterations(task, LEARNING_STEPS)}"] for task in tasks}
    out = repo / "logs" / ("bench_learning_quick" if quick else "bench_learning")
    episodes = 2 if quick else 16

    # Two lanes: each a task's seeds one after another (both cores busy while two tasks remain), or a lone task's seeds
    # two at a time.
    jobs = 2 if len(tasks) == 1 else 1

    def one_task(task: str) -> dict:
        overrides = [f"task={task}", *budget[task]]
        return bench_learning(repo, out / task, overrides, seeds=seeds, eval_episodes=episodes, jobs=jobs, reuse=reuse)

    with ThreadPoolExecutor(max_workers=2) as pool:
        results = dict(zip(tasks, pool.map(one_task, tasks), strict=True))
    # The workers' wall-clock figure: the Ant's first seed again with the envs in two worker processes and nothing else
    # running. Its return must be the one-core run's (the workers change no trajectory).
    if "ant" in budget:
        ant_workers = ["task=ant", *budget["ant"], "task.num_workers=2"]  # after LEARNING_OVERRIDES' 0: the later wins
        workers = bench_learning(
            repo, out / "ant_workers", ant_workers, seeds=seeds[:1], eval_episodes=episodes, reuse=reuse
        )

    header = ["task", "seed", "env steps", "wall s", "return, mean +- std [min, max] of episodes", "length", "status"]
    blocks: dict[str, str] = {}
    for task, r in results.items():
        figure = (out if quick else repo / "docs") / f"learning_{task}.png"  # a quick run's figures stay with its runs
        plot_learning(r, figure, f"task={task} (tuned values), 16 envs, {len(seeds)} seeds", ZOO_PPO[task])
        runs = [(task, run) for run in r["runs"]]
        if task == "ant":
            runs += [("ant, 2 env workers, alone", run) for run in workers["runs"]]
        rows = []
        for name, run in runs:
            ret, length = run.final.get("return"), run.final.get("length")
            rows.append(
                [
                    name,
                    str(run.seed),
                    f"{run.env_steps:,}",
                    f"{run.wall_s:,.0f}",
                    _spread(ret),
                    "n/a" if length is None else f"{length['mean']:,.0f}",
                    run.status,
                ]
            )
        note = (
            "Over seeds (mean +- std of the seeds' mean returns [min, max]):\n"
            f"- {task}: {_spread(r['final_return'])} over seeds; rl-zoo's PPO at 2M steps: {ZOO_PPO[task]:,.0f}\n\n"
            f"Every run: `python tools/train.py task={task} {' '.join(LEARNING_OVERRIDES)} {' '.join(budget[task])} "
            "seed=S`, two at a time, one core each"
            + ("; the workers row: the same with `task.num_workers=2`, alone" if task == "ant" else "")
            + f". Final checkpoint by `python tools/evaluate.py RUN` ({episodes} full episodes, deterministic, test "
            "seeds). Curves: training episodes' returns (stochastic policy) against env steps and wall time."
        )
        blocks[f"learning:{task}"] = "\n\n".join(
            [_table(header, rows), note, f"![{task} learning curves]({figure.relative_to(repo)})"]
        )
    return blocks


#: Issue 14's A1 target: the commanded planar velocity tracked to this mean error (m/s) over the command range.
A1_TARGET_ERROR = 0.2
#: Envs of the A1 tracking figure's runs (Isaac Lab: 4096); with 24 steps each (configs/agent/a1_flat.yaml), 3,072
#: transitions per update.
A1_ENVS = 128
#: Training budget of the A1 tracking figure: 2,000 x 128 envs x 24 steps = 6,144,000 env steps per run, a checkpoint
#: every 250 iterations (the curve's points). Three such runs at once ran 17-23 iterations a minute each on a 2-core
#: Intel Xeon (2026-12-07, stopped part way), so about 1 h 45 min: not yet run to the end. The section takes no
#: ``--reuse``: a bench stopped part way trains its runs again from their start.
A1_ITERATIONS = 2000
A1_SAVE_INTERVAL = 250
#: The A1 recipe's rewards (BENCHMARKS.md, "The five smoothing penalties"): the five penalties on how the robot moves
#: at 0 (with Isaac Lab's weights it learns to stand at 128 envs) and a termination penalty of -200 (Isaac Lab's
#: humanoids'). The task, its terminations and the tracking errors it reports are the task's own.
A1_REWARDS = (
    "task.env_kwargs.rewards.termination_penalty=-200",
    *(
        f"task.env_kwargs.rewards.{term}=0"
        for term in ("lin_vel_z_l2", "ang_vel_xy_l2", "dof_torques_l2", "dof_acc_l2", "action_rate_l2")
    ),
)


def _errors(stats: dict | None) -> str:
    """``mean +- std [min, max]`` of an error's statistics over episodes, in m/s or rad/s."""
    if stats is None:
        return "n/a"
    return f"{stats['mean']:.3f} +- {stats['std']:.3f} [{stats['min']:.3f}, {stats['max']:.3f}]"


def section_a1(quick: bool) -> str:
    """The A1's velocity tracking (task=a1_flat with its agent values and :data:`A1_REWARDS`): 3 seeds, all at once
    (an A1 training's rate is its envs' physics; three on two cores finish together), every saved checkpoint by the
    evaluation protocol; the tracking error's curve against env steps, the final policies' errors."""
    from concurrent.futures import ThreadPoolExecutor

    from benchmarks.learning import LEARNING_OVERRIDES, bench_learning, plot_tracking, tracking_curve

    repo = Path(__file__).resolve().parents[2]
    iterations = 3 if quick else A1_ITERATIONS
    overrides = ["task=a1_flat", f"task.num_envs={A1_ENVS}", f"runner.max_iterations={iterations}"]
    overrides += [f"runner.save_interval={1 if quick else A1_SAVE_INTERVAL}", *A1_REWARDS]
    if quick:
        overrides += ["task.num_envs=4", "runner.num_steps_per_env=8", "+task.env_kwargs.max_episode_steps=50"]
    seeds = QUICK_SEEDS if quick else SEEDS
    episodes = 2 if quick else 16
    out = repo / "logs" / ("bench_a1_quick" if quick else "bench_a1")
    r = bench_learning(repo, out, overrides, seeds=seeds, eval_episodes=episodes, jobs=len(seeds))
    with ThreadPoolExecutor(max_workers=2) as pool:
        curves = list(pool.map(lambda run: tracking_curve(repo, run, episodes), r["runs"]))
    figure = (out if quick else repo / "docs") / "tracking_a1_flat.png"
    plot_tracking(curves, figure, f"task=a1_flat, {len(seeds)} seeds, test seeds", A1_TARGET_ERROR)
    header = ["seed", "env steps", "wall s", "error_vel_xy (m/s)", "error_vel_yaw (rad/s)", "return", "length",
              "status"]  # fmt: skip
    rows = []
    for run in r["runs"]:
        metric, length = run.final.get("metric", {}), run.final.get("length")
        rows.append(
            [
                str(run.seed),
                f"{run.env_steps:,}",
                f"{run.wall_s:,.0f}",
                _errors(metric.get("error_vel_xy")),
                _errors(metric.get("error_vel_yaw")),
                _spread(run.final.get("return")),
                "n/a" if length is None else f"{length['mean']:,.0f}",
                run.status,
            ]
        )
    finals = [run.final["metric"]["error_vel_xy"]["mean"] for run in r["runs"] if run.final.get("metric")]
    over = (
        {"mean": statistics.fmean(finals), "std": statistics.pstdev(finals), "min": min(finals), "max": max(finals)}
        if finals
        else None
    )
    # One row per saved iteration, one column per seed (a seed that did not save that iteration leaves its cell empty).
    by_seed = [{p.iteration: p for p in points} for points in curves]
    curve_rows = []
    for it in sorted({it for seen in by_seed for it in seen}):
        steps = next(seen[it].env_steps for seen in by_seed if it in seen)
        curve_rows.append(
            [f"{steps:,}", *[f"{seen[it].error_vel_xy['mean']:.3f}" if it in seen else "" for seen in by_seed]]
        )
    note = (
        f"Final error_vel_xy over seeds: {_errors(over)} m/s (target <= {A1_TARGET_ERROR:g}). Every run: `python "
        f"tools/train.py {' '.join([*LEARNING_OVERRIDES, *overrides])} seed=S`, all seeds at once; every "
        f"saved checkpoint by `python tools/evaluate.py CHECKPOINT` ({episodes} full episodes, up to 20 s each, "
        "deterministic, test seeds, commands drawn over the task's whole range, randomisation and pushes on as in "
        "training). Errors: per episode the mean over its steps of Isaac Lab's error terms, then mean +- std "
        "[min, max] over episodes."
    )
    curve_table = _table(["env steps", *[f"seed {s}" for s in seeds]], curve_rows)
    return (
        _table(header, rows)
        + "\n\nerror_vel_xy of each saved checkpoint (m/s, mean over episodes):\n\n"
        + curve_table
        + "\n\n"
        + note
        + f"\n\n![A1 tracking error]({figure.relative_to(repo)})"
    )


def section_a1_rewards(quick: bool) -> str:
    """What Isaac Lab's weights pay the A1 per step for standing, random joint targets and an open-loop trot."""
    from benchmarks.a1_rewards import COMMAND, bench_a1_rewards

    seeds = (0, 1) if quick else (0, 1, 2, 3)
    steps = 100 if quick else 500
    r = bench_a1_rewards(seeds, steps)
    names = r["terms"]
    track = [names.index("track_lin_vel_xy_exp"), names.index("track_ang_vel_z_exp")]
    acc = names.index("dof_acc_l2")
    rows = []
    for behaviour, row in r["rows"].items():
        terms = row["terms"]
        rest = terms.sum() - terms[track].sum() - terms[acc]
        rows.append(
            [behaviour, f"{terms.sum():+.4f}", f"{terms[track[0]]:+.4f}", f"{terms[track[1]]:+.4f}",
             f"{terms[acc]:+.4f}", f"{rest:+.4f}", f"{row['steps']:.0f}", f"{row['speed']:.2f}"]
        )  # fmt: skip
    header = ["behaviour", "reward per step", "track_lin_vel_xy_exp", "track_ang_vel_z_exp", "dof_acc_l2",
              "other terms", "steps survived", "planar speed (m/s)"]  # fmt: skip
    note = (
        f"`RoboSafe/A1Flat-v0` with its default weights, randomisation and observation noise off, commanded "
        f"{-COMMAND['lin_vel_x'][0]:g} m/s backwards (the trot's direction), no turning; per behaviour the mean over "
        f"{len(seeds)} episodes (seeds {', '.join(map(str, seeds))}) of each weighted term per step (weight x term x "
        f"0.02 s), each episode {steps} policy steps from the task's reset or until it terminates. The most a step can "
        "earn is 0.045 (both tracking terms at 1)."
    )
    return _table(header, rows) + "\n\n" + note


SECTIONS: dict[str, Callable[..., str | dict[str, str]]] = {
    "env": section_env,
    "safestep": section_safestep,
    "guard": section_guard,
    "checkpoint": section_checkpoint,
    "presets": section_presets,
    "workers": section_workers,
    "wake": section_wake,
    "learning": section_learning,
    "schedule": section_schedule,
    "a1": section_a1,
    "a1_rewards": section_a1_rewards,
}
#: Sections run when --only is not given (presets and learning take hours: ask for them by name).
DEFAULT_SECTIONS = ("env", "safestep", "guard", "checkpoint")
#: Sections that train on a choice of tasks (``--tasks``; by default all of :data:`LEARNING_TASKS`) and seeds
#: (``--seeds``; by default 1, 2, 3). A section may return its blocks by name (``presets:<task>``, ``learning:<task>``)
#: instead of one body.
TASK_SECTIONS = ("presets", "learning")


def _seeds(text: str) -> tuple[int, ...] | None:
    """``--seeds``' value as seeds, or ``None`` unless it is distinct integers in ``[0, SEED_MAX]`` (the schema's)."""
    parts = [s.strip() for s in text.split(",")]
    # An empty item, a sign, "1_000" or "2.5" is no seed; nor are 20 digits or more (past SEED_MAX, and int() of
    # thousands of digits raises instead of parsing).
    if not all(p.isascii() and p.isdigit() and len(p) < 20 for p in parts):
        return None
    seeds = tuple(int(p) for p in parts)
    return seeds if max(seeds) <= SEED_MAX and len(set(seeds)) == len(seeds) else None


def render(name: str, body: str, argv: list[str], machine: dict[str, str]) -> str:
    """One BENCHMARKS.md section: markers, command, machine, date, body."""
    where = (
        f"{machine['cpu']}, {machine['cores']} cores, {machine['os']}, Python {machine['python']}, "
        f"torch {machine['torch']}, PyBullet API {machine['pybullet_api']}, GPU: {machine['cuda']}"
    )
    command = "python tools/bench.py " + " ".join(argv) if argv else "python tools/bench.py"
    return (
        f"<!-- bench:{name} -->\n"
        f"Command: `{command}` · machine: {where} · date: {machine['date']}\n\n"
        f"{body}\n"
        f"<!-- /bench:{name} -->"
    )


def write_section(path: Path, name: str, block: str) -> None:
    """Replace the ``name`` section of ``path`` with ``block``. A new one goes after the last block of its family
    (``presets:hopper`` after the other ``presets:`` blocks, in their section's prose), else at the end."""
    text = path.read_text(encoding="utf-8") if path.exists() else "# Benchmarks\n"
    pattern = re.compile(rf"<!-- bench:{re.escape(name)} -->.*?<!-- /bench:{re.escape(name)} -->", re.DOTALL)
    if pattern.search(text):
        text = pattern.sub(lambda _: block, text)
    else:
        family = re.escape(name.partition(":")[0])
        ends = [m.end() for m in re.finditer(rf"<!-- /bench:{family}:[^>]*-->", text)] if ":" in name else []
        at = ends[-1] if ends else None
        text = text.rstrip("\n") + "\n\n" + block + "\n" if at is None else f"{text[:at]}\n\n{block}{text[at:]}"
    path.write_text(text, encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark sections and print (and optionally write) their Markdown."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(prog="tools/bench.py", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--only", default=",".join(DEFAULT_SECTIONS), help=f"comma-separated sections of {list(SECTIONS)}"
    )
    parser.add_argument("--quick", action="store_true", help="small sizes: checks the script, not the figures")
    parser.add_argument("--write", type=Path, help="replace the measured sections in this Markdown file")
    parser.add_argument("--tasks", help=f"comma-separated tasks of {list(LEARNING_TASKS)} for {list(TASK_SECTIONS)}")
    parser.add_argument("--seeds", help=f"comma-separated distinct training seeds for {list(TASK_SECTIONS)}")
    parser.add_argument(
        "--reuse",
        action="store_true",
        help=f"{list(TASK_SECTIONS)}: take each run that a previous bench completed with the same command and "
        "configuration on this machine (in logs/) instead of training it again, so that a bench stopped part way goes "
        "on where it stopped",
    )
    args = parser.parse_args(argv)
    names = [n.strip() for n in args.only.split(",") if n.strip()]
    unknown = [n for n in names if n not in SECTIONS]
    if unknown:
        print(f"bench: unknown section(s) {unknown}; expected some of {list(SECTIONS)}", file=sys.stderr)
        return 2
    tasks = tuple(t.strip() for t in args.tasks.split(",") if t.strip()) if args.tasks is not None else None
    if tasks is not None:
        wrong = [t for t in tasks if t not in LEARNING_TASKS]
        if wrong or not tasks:
            print(f"bench: --tasks {args.tasks!r}: expected some of {list(LEARNING_TASKS)}", file=sys.stderr)
            return 2
    seeds = _seeds(args.seeds) if args.seeds is not None else None
    if args.seeds is not None and seeds is None:
        expected = f"expected distinct integers in [0, {SEED_MAX}], such as 1,2,3"
        print(f"bench: --seeds {args.seeds!r}: {expected}", file=sys.stderr)
        return 2
    for option, value in (("--tasks", tasks), ("--seeds", seeds), ("--reuse", args.reuse or None)):
        if value is not None and not set(names) <= set(TASK_SECTIONS):
            others = [n for n in names if n not in TASK_SECTIONS]
            print(f"bench: {option} applies to {list(TASK_SECTIONS)} only, not to {others}", file=sys.stderr)
            return 2
    machine = machine_description()
    shown_argv = [a for i, a in enumerate(argv) if not a.startswith("--write") and argv[i - 1 : i] != ["--write"]]
    # A section takes seconds to half an hour and prints its block only at its end: a bar on a terminal says which
    # one runs and for how long it has.
    with progress_bar("bench", len(names)) as bar:
        for number, name in enumerate(names, start=1):
            bar.describe(f"bench: {name} ({number}/{len(names)})")
            if name in TASK_SECTIONS:
                body = SECTIONS[name](args.quick, tasks, seeds, args.reuse)
            else:
                body = SECTIONS[name](args.quick)
            for block_name, block_body in (body if isinstance(body, dict) else {name: body}).items():
                block = render(block_name, block_body, shown_argv, machine)
                print(block, flush=True)
                if args.write is not None:
                    write_section(args.write, block_name, block)
            bar.advance()
    return 0
