"""The throughput benchmarks' option checks and table arithmetic: a bad option is one line and exit 2
before the minutes of measuring, one value of a list option works, and no table shows a NaN. Nothing is timed."""
import argparse
import importlib.util
import json
import math
import os
import statistics
import sys

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def load(name):
    spec = importlib.util.spec_from_file_location(name, os.path.join(ROOT, "benchmark", f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def refused(check, opts, capsys) -> str:
    with pytest.raises(SystemExit) as exit_info:
        check(opts)
    err = capsys.readouterr().err.strip().splitlines()
    assert exit_info.value.code == 2 and len(err) == 1 and err[0].startswith("error: "), err
    return err[0]


# ---------------------------------------------------------------------------------------------------------
# ppo_ewma_jax2d_throughput.py
# ---------------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def jax2d():
    return load("ppo_ewma_jax2d_throughput")


def jax2d_opts(**kw):
    opts = dict(num_envs=[128, 512], num_steps=32, mem_envs=[2048, 8192], memory_gib=24.0, mem_steps=256,
                num_tasks=512, repeats=2)
    return argparse.Namespace(**{**opts, **kw})


def test_one_mem_envs_value_gives_a_sentence_not_a_traceback(jax2d):
    """A single --mem-envs value (2048) extrapolates without 'ValueError: not enough values to unpack'."""
    def never(n):
        raise AssertionError("nothing to measure without a slope")
    said = jax2d.largest_that_fits({2048: 3.0}, 24.0, never)
    assert isinstance(said, str) and "--mem-envs" in said
    said = jax2d.largest_that_fits({2048: 3.0, 4096: 3.0}, 24.0, never)  # no growth: no slope to follow
    assert isinstance(said, str) and "did not grow" in said
    jax2d.check_options(jax2d_opts(mem_envs=[2048]))  # accepted up front


def test_extrapolation_finds_the_largest_multiple_of_256_that_fits(jax2d):
    def line(n):  # 1 GiB + 2 MiB per env: the measured sizes lie on it
        return 1.0 + n / 512
    largest, gib, per_env = jax2d.largest_that_fits({1024: line(1024), 2048: line(2048)}, 24.0, line)
    assert (largest, gib, per_env) == (11520, line(11520), 1 / 512)  # 11776 would need 24.0 GiB
    def above(n):  # the real program needs 5% more than the line from the measured sizes: step down until it fits
        return line(n) * (1.05 if n > 2048 else 1.0)
    largest, gib, _ = jax2d.largest_that_fits({1024: line(1024), 2048: line(2048)}, 24.0, above)
    assert largest == max(n for n in range(256, 12000, 256) if above(n) < 24.0) and gib < 24.0
    def never(n):
        raise AssertionError("no size to confirm")
    assert "no multiple of 256" in jax2d.largest_that_fits({1024: 35.0, 2048: 45.0}, 24.0, never)  # 25 GiB at 0 envs


@pytest.mark.parametrize("kw, flag", [
    (dict(repeats=0), "--repeats"),  # was a ZeroDivisionError after the first row
    (dict(memory_gib=0.0), "--memory-gib"),
    (dict(num_envs=[128, 3], num_steps=5), "--num-envs 3 with --num-steps 5"),  # was a traceback after minutes
    (dict(mem_envs=[2048, 0]), "--mem-envs 0"),
])
def test_jax2d_benchmark_refuses_bad_options_before_measuring(jax2d, kw, flag, capsys):
    assert flag in refused(jax2d.check_options, jax2d_opts(**kw), capsys)


# ---------------------------------------------------------------------------------------------------------
# ppo_atari_throughput.py and ppo_continuous_mujoco_throughput.py
# ---------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("kw, flag", [
    (dict(iterations=1), "--iterations"),  # one iteration left no interval to time: ZeroDivisionError
    (dict(repeats=0), "--repeats"),  # was an IndexError on an empty list of bounds
    (dict(sweep="8,x"), "--sweep"),
    (dict(sweep="8,0"), "--sweep"),
    (dict(cleanrl="/nonexistent"), "--cleanrl"),  # was a FileNotFoundError after the first runs
])
def test_atari_benchmark_refuses_bad_options_before_measuring(kw, flag, capsys):
    atari = load("ppo_atari_throughput")
    opts = dict(iterations=21, repeats=3, sweep="8,32", cleanrl=None)
    assert atari.check_options(argparse.Namespace(**opts)) == [8, 32]
    assert flag in refused(atari.check_options, argparse.Namespace(**{**opts, **kw}), capsys)


@pytest.mark.parametrize("kw, flag", [
    (dict(num_envs="10,3"), "--num-envs 3"),  # 300 samples, 1000-sample minibatches: failed after minutes
    (dict(num_envs="x"), "--num-envs"),
    (dict(env_id="Pong-v5"), "--env-id"),
    (dict(timeout=0.0), "--timeout"),
    (dict(cleanrl="/nonexistent"), "--cleanrl"),
])
def test_mujoco_benchmark_refuses_bad_options_before_measuring(kw, flag, capsys):
    mujoco = load("ppo_continuous_mujoco_throughput")
    opts = dict(env_id="HalfCheetah-v4", cleanrl=None, cleanrl_python=sys.executable, num_envs="10,100", timeout=150.0)
    assert mujoco.check_options(argparse.Namespace(**opts)) == [10, 100]
    assert flag in refused(mujoco.check_options, argparse.Namespace(**{**opts, **kw}), capsys)


def test_mujoco_table_cells_never_show_nan():
    """Without --cleanrl the table prints no 'nan' for CleanRL's SPS and both ratios."""
    mujoco = load("ppo_continuous_mujoco_throughput")
    assert mujoco.cell(None) == "-" and mujoco.cell(math.nan) == "timeout" and mujoco.cell(1234.4) == "1234"
    assert mujoco.ratio(300.0, None) == "-" and mujoco.ratio(300.0, math.nan) == "-" and mujoco.ratio(300.0, 200.0) == "1.50"


# ---------------------------------------------------------------------------------------------------------
# sfl_kinetix_throughput.py
# ---------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("kw, flag", [
    (dict(repeats=0), "--repeats"),
    (dict(env_size="xl"), "--env-size"),
    (dict(num_envs=[256, 0]), "--num-envs 0"),  # checked by the script's own validation, before anything is built
    (dict(num_steps=0), "--num-steps 0"),
])
def test_sfl_benchmark_refuses_bad_options_before_measuring(kw, flag, capsys):
    sfl = load("sfl_kinetix_throughput")
    opts = dict(num_envs=[256], num_steps=32, env_size="s", repeats=2)
    sfl.check_options(argparse.Namespace(**opts))
    assert flag in refused(sfl.check_options, argparse.Namespace(**{**opts, **kw}), capsys)


def test_sfl_filtering_share_by_hand():
    """At the 2048 preset: every T = 128 updates, 12288 levels generated and scored for 512 steps, against 128 updates
    of 2048 x 256 training steps and 1024 fresh levels each."""
    sfl = load("sfl_kinetix_throughput")
    filtering, training = 12288 * 512 * 1.0, 128 * 2048 * 256 * 1.0
    assert math.isclose(sfl.filter_share(0.0, 1.0, 1.0), filtering / (filtering + training))
    assert math.isclose(sfl.filter_share(1.0, 0.0, 0.0), 12288 / (12288 + 128 * 1024))  # generation only
    args = sfl.configure(256, 32, "s")  # the 2048 preset's SFL values at a benchmark-sized batch
    assert (args.sfl_num_levels, args.sfl_rollout_length, args.sfl_update_period, args.network) == (12288, 512, 128, "mlp")
    assert args.update_epochs == 8 and sfl.configure(256, 32, "s", update_epochs=1).update_epochs == 1


def test_sfl_best_case_ratio_by_hand():
    """Random 1000 SPS (1 ms a step); training 8 epochs 250 SPS (4 ms), 1 epoch 800 SPS (1.25 ms): U = 2.75/7 ms,
    R = 1.25 - U. With the update at 1 GFLOP per step and 4000 GFLOP/s, an epoch costs 0.25 ms a step."""
    sfl = load("sfl_kinetix_throughput")
    u = (4e-3 - 1.25e-3) / 7
    assert math.isclose(sfl.best_case_ratio(1000, 250, 800, 8, 1e9, 4000), 1e-3 / (1.25e-3 - u + 8 * 0.25e-3))
    # an update already at the matmul rate gives back the measured ratio
    assert math.isclose(sfl.best_case_ratio(1000, 250, 800, 8, u * 4000e9, 4000), 250 / 1000)


def test_xla_counts_a_matmul_as_2mnk_flops():
    """The bound above rests on XLA's FLOP count: a [64, 32] x [32, 16] product is 2 * 64 * 32 * 16 FLOPs."""
    sfl = load("sfl_kinetix_throughput")
    import jax
    import jax.numpy as jnp
    compiled = jax.jit(lambda a, b: a @ b).lower(jnp.ones((64, 32)), jnp.ones((32, 16))).compile()
    assert sfl.xla_flops(compiled) == 2 * 64 * 32 * 16


# ---------------------------------------------------------------------------------------------------------
# sfl_kinetix_paired_eval.py (the powered before/after evaluation of an SFL learning run)
# ---------------------------------------------------------------------------------------------------------
def test_sfl_paired_summary_by_hand():
    """Four levels: initial 0, 0.25, 1, 0; final 0, 0.75, 1, 0.5. Differences 0, 0.5, 0, 0.5: mean 0.25, sample sd
    sqrt(1/12), interval 1.96 sd / 2; one level never solved by either, one always."""
    pe = load("sfl_kinetix_paired_eval")
    s = pe.paired_summary(np.array([0, 0.25, 1, 0]), np.array([0, 0.75, 1, 0.5]))
    assert math.isclose(s["initial"], 1.25 / 4) and math.isclose(s["final"], 2.25 / 4)
    assert math.isclose(s["diff"], 0.25) and math.isclose(s["ci95"], 1.96 * math.sqrt(1 / 12) / 2)
    assert s["never"] == 0.25 and s["always"] == 0.25


def test_sfl_paired_eval_rebuilds_the_run_without_its_resume_and_refuses_bad_options(tmp_path, capsys):
    pe = load("sfl_kinetix_paired_eval")
    run = tmp_path / "Kinetix-s__sfl__1__1"
    (run / "checkpoints").mkdir(parents=True)
    (run / "config.json").write_text(json.dumps({"argv": ["--env-size", "s", "--resume", "x/latest.ckpt", "--seed", "1"]}))
    assert pe.run_argv(str(run)) == ["--env-size", "s", "--seed", "1"]
    opts = dict(run_dirs=[str(run)], levels=1000, attempts=4, pair=False)
    assert "latest.ckpt" in refused(pe.check_options, argparse.Namespace(**opts), capsys)  # no checkpoint yet
    (run / "checkpoints" / "latest.ckpt").write_bytes(b"")
    pe.check_options(argparse.Namespace(**opts))
    pe.check_options(argparse.Namespace(**{**opts, "run_dirs": [str(run)] * 2, "pair": True}))
    assert "--levels" in refused(pe.check_options, argparse.Namespace(**{**opts, "levels": 1}), capsys)
    assert "--levels" in refused(pe.check_options, argparse.Namespace(**{**opts, "attempts": 0}), capsys)
    for n in (1, 3):
        assert "--pair" in refused(pe.check_options, argparse.Namespace(**{**opts, "run_dirs": [str(run)] * n,
                                                                            "pair": True}), capsys)


def test_sfl_paired_eval_pairs_two_runs_finals_by_hand():
    """Two runs on the same three levels: each against its own initial policy, then B's final minus A's final
    (differences 0.5, 0, 0: mean 1/6; both finals never solve level 2, both always solve level 1)."""
    pe = load("sfl_kinetix_paired_eval")
    runs = [pe.Run(name, None, None, {"iteration": it, "global_step": it * 10}) for name, it in (("a", 4), ("b", 8))]
    rates = {("a", "initial"): np.array([0, 1, 0.0]), ("a", "final"): np.array([0.25, 1, 0.0]),
             ("b", "initial"): np.array([0, 0.5, 0.0]), ("b", "final"): np.array([0.75, 1, 0.0])}
    rows = pe.pair_rows(runs, rates)
    assert rows[0] == pe.table_row("a", 4, 40, pe.paired_summary(rates[("a", "initial")], rates[("a", "final")]))
    assert rows[1] == pe.table_row("b", 8, 80, pe.paired_summary(rates[("b", "initial")], rates[("b", "final")]))
    diff = np.array([0.5, 0, 0])
    half = 1.96 * diff.std(ddof=1) / math.sqrt(3)
    assert rows[2] == f"| b final − a final | 4 / 8 | 40 / 80 | 0.417 | 0.583 | +0.167 ± {half:.3f} | 33% | 33% |"


# ---------------------------------------------------------------------------------------------------------
# pqn_atari_learning.py (the Breakout learning comparison with CleanRL): options, logs and table arithmetic
# ---------------------------------------------------------------------------------------------------------
def pqn_learning_opts(tmp_path, **kw):
    checkout = tmp_path / "cleanrl"
    (checkout / "cleanrl").mkdir(parents=True, exist_ok=True)
    (checkout / "cleanrl" / "pqn_atari_envpool.py").write_text("")
    opts = dict(cleanrl=str(checkout), out=str(tmp_path / "out"), env_id="Breakout-v5", total=1_000_000,
                seeds=[1, 2], cleanrl_seeds=[1], summary_only=False)
    return argparse.Namespace(**{**opts, **kw})


@pytest.mark.parametrize("kw, flag", [
    (dict(total=1000), "--total 1000"),
    (dict(seeds=[1, 1]), "--seeds"),
    (dict(cleanrl="/nonexistent"), "--cleanrl /nonexistent"),
])
def test_pqn_learning_refuses_bad_options_before_running(kw, flag, tmp_path, capsys):
    learning = load("pqn_atari_learning")
    learning.check_options(pqn_learning_opts(tmp_path))
    learning.check_options(pqn_learning_opts(tmp_path, cleanrl=None, cleanrl_seeds=[]))  # ours alone needs no checkout
    learning.check_options(pqn_learning_opts(tmp_path, cleanrl=None, summary_only=True))
    assert flag in refused(learning.check_options, pqn_learning_opts(tmp_path, **kw), capsys)


def test_pqn_learning_reads_both_programs_logs(tmp_path):
    common, learning = load("_learning_comparison"), load("pqn_atari_learning")
    log = tmp_path / "cleanrl_s1.log"
    log.write_text("global_step=304, episodic_return=2.0\nSPS: 230\nglobal_step=1100, episodic_return=11.0\n"
                   "SPS: 231\nSPS: 229\n")
    assert common.cleanrl_episodes(str(log)) == [(304, 2.0), (1100, 11.0)]
    assert common.cleanrl_steps(learning.PQN, str(log)) == 3 * 1024
    assert common.cleanrl_steps(learning.PQN, str(tmp_path / "none")) == 0
    run = tmp_path / "ours" / "Breakout-v5__pqn_atari__1__1795499439"
    run.mkdir(parents=True)
    rows = [{"global_step": 1024, "charts/episodic_return": 3.0}, {"global_step": 2048, "charts/eval_return": 0.0},
            {"global_step": 3072, "charts/SPS": 250.0}]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert common.our_episodes(str(run)) == ([(1024, 3.0)], [(2048, 0.0)], 3072)
    opts = pqn_learning_opts(tmp_path, out=str(tmp_path))
    assert common.our_run_dir(learning.PQN, str(tmp_path), "Breakout-v5", 1) == str(run)
    fresh = common.our_command(learning.PQN, opts, 1)  # no checkpoint yet: a fresh run
    assert "--resume" not in fresh and fresh[fresh.index("--total-timesteps") + 1] == "1000000"
    (run / "checkpoints").mkdir()
    (run / "checkpoints" / "latest.ckpt").write_bytes(b"")
    # a resumed run keeps its own flags (budget, env): without them it would take the script's 10M-step default
    assert common.our_command(learning.PQN, opts, 1) == fresh + ["--resume", str(run / "checkpoints" / "latest.ckpt")]


def test_procgen_learning_counts_cleanrl_iterations_of_its_own_batch(tmp_path):
    common, learning = load("_learning_comparison"), load("ppo_procgen_learning")
    log = tmp_path / "cleanrl_s1.log"
    log.write_text("global_step=8000, episodic_return=[12.5]\nSPS: 80\nSPS: 81\n")  # procgen's returns print as arrays
    assert common.cleanrl_episodes(str(log)) == [(8000, 12.5)]
    assert common.cleanrl_steps(learning.PROCGEN, str(log)) == 2 * 64 * 256
    run = tmp_path / "ours" / "starpilot__ppo_procgen__2__1795499439"
    run.mkdir(parents=True)
    assert common.our_run_dir(learning.PROCGEN, str(tmp_path), "starpilot", 2) == str(run)
    assert common.our_run_dir(learning.PROCGEN, str(tmp_path), "starpilot", 1) is None


def test_pqn_learning_window_and_tenths_by_hand():
    learning = load("_learning_comparison")
    episodes = [(50, 1.0), (100, 3.0), (101, 5.0), (900, 2.0), (950, 4.0), (1000, 9.0)]
    # after step 900: 4 and 9, mean 6.5, sample sd sqrt(12.5), SE sqrt(12.5 / 2) = 2.5
    assert learning.window_stats(episodes, 900).split() == ["6.50", "±", "2.50", "(n=", "2)"]
    assert "fewer than 2" in learning.window_stats(episodes, 950)
    # tenths of 1000 steps are (0, 100], (100, 200], ...: 1 and 3 | 5 | nothing ... | 2 | 4 and 9
    assert learning.tenths(episodes, 1000).split() == ["2.0", "5.0"] + ["-"] * 6 + ["2.0", "6.5"]


# ---------------------------------------------------------------------------------------------------------
# _throughput_common.py: what the benchmark scripts share, kept in one place
# ---------------------------------------------------------------------------------------------------------
def test_the_benchmark_scripts_keep_one_copy_of_their_shared_helpers():
    """The refusal, the SPS and RSS readers and CleanRL's envpool patch live in _throughput_common.py only."""
    bench = os.path.join(ROOT, "benchmark")
    shared = ("def refuse(", "def marginal_sps(", "def patched_cleanrl(", "Maximum resident set size", r"^SPS: (\d+)")
    for name in sorted(os.listdir(bench)):
        if name.endswith(".py") and name != "_throughput_common.py":
            text = open(os.path.join(bench, name)).read()
            assert not [s for s in shared if s in text], name


def test_cleanrl_patch_adapts_envpool_1x_and_refuses_a_script_that_changed(tmp_path):
    common = load("_throughput_common")
    (tmp_path / "cleanrl").mkdir()
    original = ("import numpy as np\n\n\nclass Wrapper:\n    def reset(self, **kwargs):\n"
                "        observations = super().reset(**kwargs)\n\n    def step(self, action):\n"
                "        observations, rewards, dones, infos = super().step(action)\n")
    (tmp_path / "cleanrl" / "pqn_atari_envpool.py").write_text(original)
    path = common.patched_cleanrl(str(tmp_path), "pqn_atari_envpool.py", str(tmp_path))
    patched = open(path).read()
    compile(patched, path, "exec")  # the inserted line keeps the method's indentation
    assert "observations, _ = super().reset(**kwargs)" in patched
    assert "term, trunc, infos = super().step(action)\n        dones = np.logical_or(term, trunc)" in patched
    (tmp_path / "cleanrl" / "ppo_atari_envpool.py").write_text(original.replace("observations = super()", "obs = super()"))
    with pytest.raises(RuntimeError, match="ppo_atari_envpool.py changed"):  # not a silently unpatched copy
        common.patched_cleanrl(str(tmp_path), "ppo_atari_envpool.py", str(tmp_path))


def test_marginal_sps_from_cleanrls_cumulative_lines_by_hand():
    """Cumulative SPS 100, 150, 180 after iterations of 1000 steps: iteration 1 ends at 10 s, iteration 3 at 3000/180
    s; the 2000 steps in between took 3000/180 - 10 s."""
    common = load("_throughput_common")
    points = common.cleanrl_points("global_step=8, episodic_return=1.0\nSPS: 100\nSPS: 150\nSPS: 180\n", 1000)
    assert points[0] == (10.0, 1000) and points[-1][1] == 3000
    assert math.isclose(common.marginal_sps(points), 2000 / (3000 / 180 - 10))


def test_loop_time_medians_leave_out_the_first_iteration_by_hand():
    """Medians of the time/* tags over iterations 2-4 (the first compiles); rows without them (episodes) ignored."""
    common = load("_throughput_common")
    times = {1: (9.0, 1.0, 30.0), 2: (2.0, 1.0, 0.5), 3: (4.0, 3.0, 0.7), 4: (3.0, 2.0, 0.6)}
    rows = [{"iteration": i, "time/rollout_seconds": r, "time/env_wait_seconds": e, "time/update_seconds": u}
            for i, (r, e, u) in times.items()] + [{"iteration": 3, "charts/episodic_return": 5.0}]
    assert common.loop_time_medians(rows) == {"rollout": 3.0, "env_wait": 2.0, "update": 0.6}
    assert common.loop_time_medians(rows[:1]) == {}  # one iteration: nothing after the compile


def test_peak_rss_is_read_from_gnu_time():
    common = load("_throughput_common")
    out = common.run_checked(common.TIME_V + [sys.executable, "-c", "x = bytearray(300 * 2**20)"])
    assert common.peak_rss_mib(out.stderr) >= 300
    assert common.peak_rss_kib("no time -v here") is None
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):  # a failed run: the end of its stderr
        common.run_checked([sys.executable, "-c", "1 / 0"])


# ---------------------------------------------------------------------------------------------------------
# beukman2026_fig13_jax2d_gpu.py and beukman2026_fig16a_gpu.py: their pre-set rules on made-up measurements
# ---------------------------------------------------------------------------------------------------------
def fig13_results(groups):
    """groups: {N: (env SPS, {arm: rounds})}; 2048 is the base."""
    return {"base_num_envs": 2048, "groups": [
        {"num_envs": n, "env_sps": [env], "arms": {name: {"sps": rounds} for name, rounds in arms.items()}}
        for n, (env, arms) in groups.items()]}


BASE_2048 = {2048: (300.0, {"base": [100.0, 100.0, 100.0]})}


@pytest.mark.parametrize("arms, env, said", [
    # spread 110 / 100 = 1.10 <= 1.25, env share 100 / 150 = 0.67 >= 0.5: marginal, in scope
    ({"more-minibatches": [100, 98, 102], "larger-minibatches": [110, 111, 109], "sqrt-lr": [108, 110, 107]}, 150.0, "yes"),
    # spread 140 / 100 = 1.40, rounds apart (139 > 102): contradicts inside the scope
    ({"more-minibatches": [100, 98, 102], "larger-minibatches": [140, 139, 141]}, 150.0, "no"),
    # spread 1.30 but the rounds overlap (95..160 against 98..102)
    ({"more-minibatches": [100, 98, 102], "larger-minibatches": [130, 95, 160]}, 150.0, "not separated"),
    # env share 100 / 250 = 0.40 < 0.5: not sample-bound, the claim's scope is not reached
    ({"more-minibatches": [100, 98, 102], "larger-minibatches": [140, 139, 141]}, 250.0, "not testable at this setting"),
    # spread exactly 1.25 is still marginal (<=)
    ({"more-minibatches": [100, 100, 100], "larger-minibatches": [125, 125, 125]}, 150.0, "yes"),
])
def test_fig13_gpu_rule_by_hand(arms, env, said):
    fig13 = load("beukman2026_fig13_jax2d_gpu")
    verdict, rows = fig13.verdict(fig13_results({**BASE_2048, 8192: (env, arms)}))
    assert verdict == said
    row = rows[1]
    assert row["deciding"] and math.isclose(row["env_share"], statistics.median(arms["more-minibatches"]) / env)


def test_fig13_gpu_rule_lets_only_n_of_4x_the_base_decide():
    """4096 (2x the base) with a 2x spread does not decide; 8192 (4x) with 1.1 does: yes."""
    fig13 = load("beukman2026_fig13_jax2d_gpu")
    far = {"more-minibatches": [100, 100, 100], "larger-minibatches": [200, 200, 200]}
    near = {"more-minibatches": [100, 100, 100], "larger-minibatches": [110, 110, 110]}
    verdict, rows = fig13.verdict(fig13_results({**BASE_2048, 4096: (150.0, far), 8192: (150.0, near)}))
    assert verdict == "yes" and [r["deciding"] for r in rows] == [False, False, True]
    verdict, _ = fig13.verdict(fig13_results({**BASE_2048, 4096: (150.0, far)}))
    assert verdict == "not testable at this setting"  # nothing decides
    # an arm that never ran (the deadline) is left out of the spread, not read as 0 SPS
    skipped = {"more-minibatches": [100, 100, 100], "larger-minibatches": [110, 110, 110], "sqrt-lr": []}
    assert fig13.verdict(fig13_results({**BASE_2048, 8192: (150.0, skipped)}))[0] == "yes"


def test_fig13_gpu_rule_prints_a_table_and_the_out_of_scope_ratio(tmp_path, capsys):
    fig13 = load("beukman2026_fig13_jax2d_gpu")
    results = fig13_results({**BASE_2048, 8192: (400.0, {"more-minibatches": [100, 100, 100],
                                                          "larger-minibatches": [180, 181, 179]})})
    path = tmp_path / "fig13.json"
    path.write_text(json.dumps({**results, "machine": {"gpu": "H200"}, "date_utc": "2026-11-29 06:00"}))
    fig13.print_rule(str(path))
    out = capsys.readouterr().out
    assert "verdict: not testable at this setting" in out
    assert "larger-minibatches / more-minibatches = 1.80" in out and "| 8192 | larger-minibatches | 180 |" in out
    fig13.draw(str(path), str(tmp_path / "fig13.png"))
    assert (tmp_path / "fig13.png").stat().st_size > 10_000


def test_fig16a_gpu_rule_prints_every_run_and_draws_a_run_without_sps(tmp_path, capsys):
    fig16a = load("beukman2026_fig16a_gpu")
    runs = {1024: {"steady_SPS": 3000, "SPS": 3100, "chunk_sps": [2950, 3050], "minibatch_size": 2048, "filter_share": 0.4,
                   "status": "finished"},
            8192: {"steady_SPS": 1000, "SPS": 1000, "chunk_sps": [990, 1010], "minibatch_size": 256, "status": "finished"},
            32: {"SPS": None, "status": "out of memory"}}
    path = tmp_path / "fig16a.json"
    path.write_text(json.dumps({**fig16a_results(runs), "machine": {"gpu": "H200"}, "date_utc": "2026-11-29 06:00",
                                "setting": "--num-envs 8192"}))
    fig16a.print_rule(str(path))
    out = capsys.readouterr().out
    assert "r = steady SPS(1024) / steady SPS(8192) = 3.00 (chunks: 2.92 to 3.08); verdict: yes" in out
    assert "| 1024 | 2,048 | 3,000 | 2,950, 3,050 | 3,100 | - | 0.40 |" in out
    assert "| 32 | - | - | - | - | - | - | - | - | - | out of memory |" in out
    fig16a.draw(str(path), str(tmp_path / "fig16a.png"))
    assert (tmp_path / "fig16a.png").stat().st_size > 10_000


def fig16a_results(runs):
    return {"runs": {str(k): v for k, v in runs.items()}}


@pytest.mark.parametrize("fast, slow, said", [
    (3000, 1500, "yes"),  # r = 2.0
    (1500, 1000, "yes"),  # r = 1.5 exactly is substantial
    (1300, 1000, "partly"),
    (1100, 1000, "no"),
])
def test_fig16a_gpu_rule_thresholds(fast, slow, said):
    fig16a = load("beukman2026_fig16a_gpu")
    out = fig16a.verdict(fig16a_results({1024: {"steady_SPS": fast}, 8192: {"steady_SPS": slow}, 32: {"SPS": None}}))
    assert out["verdict"] == said and math.isclose(out["r"], fast / slow)


def test_fig16a_gpu_rule_noise_and_missing_runs():
    fig16a = load("beukman2026_fig16a_gpu")
    # r = 1.6, but the chunks span 1500/1100 = 1.36 to 1700/900 = 1.89: partly to yes
    crossing = fig16a.verdict(fig16a_results({1024: {"steady_SPS": 1600, "chunk_sps": [1500, 1700]},
                                              8192: {"steady_SPS": 1000, "chunk_sps": [900, 1100]}}))
    assert crossing["verdict"] == "not separated (partly to yes)"
    assert np.allclose(crossing["r_range"], (1500 / 1100, 1700 / 900))
    tight = fig16a.verdict(fig16a_results({1024: {"steady_SPS": 2000, "chunk_sps": [1990, 2010]},
                                           8192: {"steady_SPS": 1000, "chunk_sps": [995, 1005]}}))
    assert tight["verdict"] == "yes"
    oom = fig16a.verdict(fig16a_results({1024: {"SPS": 2000}, 8192: {"SPS": None, "status": "out of memory"}}))
    assert oom["verdict"] == "no verdict: no SPS at 8192 minibatches" and oom["r"] is None
    # 8192 timed no whole scoring period in its limit: its first chunk's own rate stands in, and is named
    slow = fig16a.verdict(fig16a_results({1024: {"steady_SPS": 2000}, 8192: {"SPS": None, "first_chunk_sps": 500}}))
    assert slow["verdict"] == "yes" and slow["r"] == 4.0 and slow["stand_in"] == [8192]
    # the steady rate wins over the summary SPS, which holds the shorter chunk without a scoring round
    both = fig16a.verdict(fig16a_results({1024: {"steady_SPS": 1300, "SPS": 2600}, 8192: {"steady_SPS": 1000, "SPS": 1000}}))
    assert both["verdict"] == "partly" and both["stand_in"] == []


def test_fig16a_steady_rate_from_the_scripts_cumulative_sps_rows():
    """The script's chunks at T = 2, updates of 1000 steps: [1] untimed (its own 50 SPS), [2] alone (no scoring
    round: 1000 steps in 2 s, cumulative 500), [3, 4] after a round (2000 steps in 20 s: cumulative 3000/22), [5, 6]
    (2000 steps in 30 s: cumulative 5000/52). The steady rate is over the two whole periods: 4000 / 50 = 80."""
    fig16a = load("beukman2026_fig16a_gpu")
    rows = [{"global_step": 1000, "charts/SPS": 50.0},
            {"global_step": 1000, "charts/episodic_return": 1.0},  # an episode row: no SPS
            {"global_step": 2000, "charts/SPS": 500.0},
            {"global_step": 2000, "sfl/filter_seconds": 9.0},
            {"global_step": 3000, "charts/SPS": 3000 / 22}, {"global_step": 4000, "charts/SPS": 3000 / 22},
            {"global_step": 5000, "charts/SPS": 5000 / 52}, {"global_step": 6000, "charts/SPS": 5000 / 52}]
    chunks = fig16a.timed_chunks(rows)
    assert np.allclose(chunks, [(1000, 2), (2000, 20), (2000, 30)])
    steady, per_chunk = fig16a.steady_rate(chunks, 2000)
    assert math.isclose(steady, 80.0) and np.allclose(per_chunk, [100.0, 2000 / 30])
    assert fig16a.timed_chunks(rows[:2]) == []  # the first chunk alone: nothing timed
    assert fig16a.steady_rate(chunks[:1], 2000) == (None, [])  # no whole period


def test_fig16a_extend_keeps_an_earlier_calls_runs_and_refuses_another_setting(tmp_path):
    """--extend: the runs of an earlier call's JSON at the same setting are kept with their own dates (a K with an
    SPS is not run again, so here nothing runs) and judged together; a JSON at another setting is refused in one
    line, before anything runs."""
    import subprocess
    fig16a = load("beukman2026_fig16a_gpu")
    setting = " ".join(fig16a.bash_string("SFL_1M_PER_GPU") + ["--diagnostics-every", "0"])
    earlier = {"figure": "x", "date_utc": "2026-11-29 23:03", "machine": {"gpu": "NVIDIA H200"}, "dry_run": False,
               "setting": setting, "updates": 6,
               "runs": {"1024": {"steady_SPS": 3000, "chunk_sps": [2900, 3100], "status": "interrupted"},
                        "8192": {"steady_SPS": 1000, "chunk_sps": [990, 1010], "status": "interrupted",
                                 "date_utc": "2026-12-01 10:00"}}}
    json.dump(earlier, open(tmp_path / "earlier.json", "w"))
    cmd = [sys.executable, os.path.join(ROOT, "benchmark", "beukman2026_fig16a_gpu.py"), "--minibatches", "1024",
           "8192", "--extend", str(tmp_path / "earlier.json"), "--out", str(tmp_path / "out")]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "1024 minibatches: kept from" in proc.stdout and "8192 minibatches: kept from" in proc.stdout
    runs = json.load(open(tmp_path / "out" / "fig16a.json"))["runs"]
    assert runs["1024"]["date_utc"] == "2026-11-29 23:03" and runs["8192"]["date_utc"] == "2026-12-01 10:00"
    assert fig16a.verdict({"runs": runs})["verdict"] == "yes" and "verdict: yes" in proc.stdout
    earlier["setting"] = setting.replace("--num-envs 8192", "--num-envs 4096")
    json.dump(earlier, open(tmp_path / "other.json", "w"))
    proc = subprocess.run(cmd[:-3] + [str(tmp_path / "other.json"), "--out", str(tmp_path / "out2")],
                          capture_output=True, text=True, cwd=tmp_path)
    err = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(err) == 1 and "measured at another setting" in err[0], proc.stderr
    assert not (tmp_path / "out2").exists()


def test_fig16a_reads_the_per_gpu_shapes_from_their_one_copy():
    """SFL_1M_PER_GPU and SFL_TINY come from gpu_jax_check.sh (the 1m preset per device: 8,192 envs, 1,024
    minibatches), so the figure and the GPU check cannot drift apart."""
    fig16a = load("beukman2026_fig16a_gpu")
    per_gpu = fig16a.bash_string("SFL_1M_PER_GPU")
    assert per_gpu[per_gpu.index("--num-envs") + 1] == "8192"
    assert per_gpu[per_gpu.index("--num-minibatches") + 1] == "1024"
    assert "--network" in fig16a.bash_string("SFL_TINY")


@pytest.mark.parametrize("script, flags, words", [
    ("beukman2026_fig16a_gpu", ["--out", "x", "--updates", "5"], "--updates must be even"),
    ("beukman2026_fig16a_gpu", ["--rule", "no_such.json"], "no such file"),
    ("beukman2026_fig16a_gpu", [], "pass --out"),
    ("beukman2026_fig16a_gpu", ["--out", "x", "--extend", "no_such.json"], "--extend no_such.json: no such file"),
    ("beukman2026_fig13_jax2d_gpu", ["--rule", "no_such.json"], "no such file"),
    ("beukman2026_fig13_jax2d_gpu", ["--out", "x", "--rounds", "0"], "--rounds must be >= 1"),
    ("beukman2026_fig13_jax2d_gpu", ["--out", "x", "--num-envs", "4096"], "must include the base 2048"),
])
def test_gpu_figure_benchmarks_refuse_bad_options_in_one_line(script, flags, words, tmp_path):
    import subprocess
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "benchmark", f"{script}.py"), *flags],
                          capture_output=True, text=True, cwd=tmp_path)
    err = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(err) == 1 and words in err[0], proc.stderr


# ---------------------------------------------------------------------------------------------------------
# ppo_atari_env_limit.py: the thread layouts it compares
# ---------------------------------------------------------------------------------------------------------
def worker_cores() -> dict:
    """thread id -> the cores it may run on, for every thread of this process."""
    out = {}
    for tid in os.listdir("/proc/self/task"):
        with open(f"/proc/self/task/{tid}/status") as f:
            out[tid] = next(line.split()[1] for line in f if line.startswith("Cpus_allowed_list"))
    return out


def test_env_limit_pins_each_halfs_threads_to_its_own_cores():
    """'halves_pinned_apart' means what it says: envpool pins thread i of a pool made with first_core c to core c + i,
    so half 1's threads sit on cores 0.. and half 2's on the next ones; an unpinned pool's threads may run anywhere."""
    bench = load("ppo_atari_env_limit")
    if bench.pinnable_cores() < 2:
        pytest.skip("this process may not use every core of the machine: the benchmark pins nothing here")
    everywhere = worker_cores()[str(os.getpid())]  # the main thread: every core
    before = set(worker_cores())
    pools = [bench.make_pool(2, 1, threads=1, first_core=0), bench.make_pool(2, 3, threads=1, first_core=1)]
    pinned = sorted(v for k, v in worker_cores().items() if k not in before and v != everywhere)
    before = set(worker_cores())
    loose = bench.make_pool(2, 5, threads=2)
    added = [v for k, v in worker_cores().items() if k not in before]
    for envs in pools + [loose]:
        envs.close()
    assert pinned == ["0", "1"]
    assert added and all(v == everywhere for v in added)


# ppo_atari_update_speed.py: the update alone, per setting
def test_update_speed_dry_run_times_every_eager_variant_and_the_fraction_of_the_limit(tmp_path):
    """Tiny sizes on CPU: each eager variant's median over its timed iterations, with the 16 optimizer steps of the
    script's 4 epochs x 4 minibatches, and the fraction of an env limit of 4,000 steps/s a synchronous loop would
    reach, rollout / (rollout + update), recomputed here by hand."""
    import subprocess
    out = tmp_path / "u.json"
    done = subprocess.run([sys.executable, os.path.join(ROOT, "benchmark", "ppo_atari_update_speed.py"), "--cpu-dry-run",
                           "--iterations", "2", "--env-rate", "4000", "--out", str(out)],
                          capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.load(open(out))
    assert list(result["variants"]) == ["eager_chunked", "eager_whole", "eager_whole_no_tf32", "eager_whole_bf16",
                                        "eager_chunked_bf16"]
    rollout = 8 * 16 / 4000
    for name, row in result["variants"].items():
        assert len(row["seconds"]) == 2 and row["seconds_median"] == statistics.median(row["seconds"]) > 0
        assert row["optimizer_steps"] == 16 and row["minibatch_size"] == 32
        assert row["of_sync_limit"] == pytest.approx(rollout / (rollout + row["seconds_median"]))
        assert f"{name:<22} {row['seconds_median']:.4f} s per iteration" in done.stdout


@pytest.mark.parametrize("flags, words", [
    (["--variants", "eager_chunked,fast"], "--variants fast: unknown"),
    (["--iterations", "0"], "must be >= 1"),
    (["--env-rate", "-5"], "--env-rate must be >= 0"),
])
def test_update_speed_refuses_bad_options_in_one_line(flags, words):
    import subprocess
    done = subprocess.run([sys.executable, os.path.join(ROOT, "benchmark", "ppo_atari_update_speed.py")] + flags,
                          capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 2 and done.stdout == "" and len(done.stderr.strip().splitlines()) == 1
    assert words in done.stderr


# ppo_atari_rollout_step.py: the synchronous rollout step apart
ROLLOUT_PIECES = ["forward", "sample", "actions_to_host", "frames_pageable", "frames_pinned", "newest_frame_pageable",
                  "newest_frame_pinned", "flags_to_device", "episode_stats"]


def test_rollout_step_dry_run_times_the_scripts_loop_and_every_piece(tmp_path):
    """Tiny sizes on CPU: the script's own loop's three parts (positive), its own work and share of the rollout
    recomputed here by hand, and every piece's median (the compiled forwards left out of a dry run)."""
    import subprocess
    out = tmp_path / "r.json"
    done = subprocess.run([sys.executable, os.path.join(ROOT, "benchmark", "ppo_atari_rollout_step.py"), "--cpu-dry-run",
                           "--out", str(out)], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.load(open(out))
    assert (result["num_envs"], result["steps"], result["machine"]["device"]) == (8, 20, "cpu")
    loop = result["as_script_ms"]
    assert set(loop) == {"act", "env_step", "observe"} and all(v > 0 for v in loop.values())
    assert result["own_ms_per_step"] == pytest.approx(loop["act"] + loop["observe"])
    assert result["own_share_of_rollout"] == pytest.approx(result["own_ms_per_step"] / sum(loop.values()))
    assert list(result["pieces_ms"]) == ROLLOUT_PIECES
    assert all(isinstance(v, float) and v > 0 for v in result["pieces_ms"].values()), result["pieces_ms"]
    assert f"{result['own_share_of_rollout']:.1%} of the rollout" in done.stdout


def test_rollout_step_refuses_bad_options_in_one_line():
    import subprocess
    done = subprocess.run([sys.executable, os.path.join(ROOT, "benchmark", "ppo_atari_rollout_step.py"), "--steps", "0"],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 2 and done.stdout == "" and len(done.stderr.strip().splitlines()) == 1
    assert "must be >= 1" in done.stderr


@pytest.mark.parametrize("script", ["ppo_atari_update_speed", "ppo_atari_rollout_step", "ppo_atari_env_limit"])
def test_torch_benchmarks_refuse_an_out_file_in_a_missing_folder(script, tmp_path):
    """--out in a folder that does not exist: one line, exit 2, before the minutes of measuring (check_out_folder,
    shared by the three)."""
    import subprocess
    out = tmp_path / "missing" / "r.json"
    done = subprocess.run([sys.executable, os.path.join(ROOT, "benchmark", f"{script}.py"), "--out", str(out)],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 2 and done.stdout == "" and len(done.stderr.strip().splitlines()) == 1
    assert f"--out {out}: its folder does not exist or is not writable" in done.stderr
    assert not (tmp_path / "missing").exists()


def test_env_limit_saves_each_n_as_it_goes(monkeypatch):
    """A call cut short by its time limit keeps what it measured: measure() hands save() the envpool rows first, then
    the row again after each timed run (here the second program dies in its timed run)."""
    bench = load("ppo_atari_env_limit")
    for rate in ("sync_rate", "async_rate", "halves_rate"):
        monkeypatch.setattr(bench, rate, lambda *a, **k: 1000.0)
    monkeypatch.setattr(bench, "thread_layouts", lambda *a: {"halves_half_threads": 1100.0})

    def dies(k, times=None):
        if k > 2:  # after its warm-up
            raise TimeoutError("the call's time limit")
        return 1.0
    monkeypatch.setattr(bench, "programs", lambda *a: {"ours": lambda k, times=None: 500.0, "ours --async-envs": dies})
    saved = []
    opts = argparse.Namespace(cpu_dry_run=True, seconds=1.0, repeats=1, iterations=3, rates=list(bench.RATES))
    with pytest.raises(TimeoutError):
        bench.measure(8, opts, lambda row: saved.append(json.loads(json.dumps(row))))
    assert saved[0]["partial"] and saved[0]["envpool_steps_per_s"]["halves_half_threads"] == 1100.0
    assert "sps_runs" not in saved[0] and saved[-1]["sps_runs"] == {"ours": [500.0], "ours --async-envs": []}


def test_env_limit_runs_only_the_rates_and_programs_named(monkeypatch):
    """--rates and --programs: the sync rate always (every fraction's denominator), the other rates and ours' runs
    only where named, each run with its own flags; CleanRL's where --cleanrl is given."""
    bench = load("ppo_atari_env_limit")
    called = []
    for rate in ("sync_rate", "async_rate", "halves_rate"):
        monkeypatch.setattr(bench, rate, lambda *a, rate=rate, **k: called.append(rate) or 1000.0)
    monkeypatch.setattr(bench, "thread_layouts", lambda *a: called.append("layouts") or {"halves_half_threads": 1.0})
    opts = argparse.Namespace(seconds=1.0, rates=["async"])
    assert set(bench.envpool_rates(8, opts)) == {"sync", "async"} and called == ["sync_rate", "async_rate"]
    opts.rates = list(bench.RATES)
    assert set(bench.envpool_rates(8, opts)) == {"sync", "async", "halves", "halves_half_threads"}

    runs = []
    monkeypatch.setattr(bench, "ours", lambda flags, k, batch, log, times: runs.append((flags, k, batch)) or 1.0)
    monkeypatch.setattr(bench, "run_cleanrl_atari", lambda *a, **k: (2.0, None))
    opts = argparse.Namespace(programs=["envpool-async", "sync"], cpu_dry_run=False, ours_flags="--no-compile",
                              out=None, cleanrl="/some/checkout")
    found = bench.programs(256, 64, opts)
    assert list(found) == ["ours", "ours --envpool-async", "CleanRL"]  # the benchmark's order, not the flag's
    assert [found[name](3) for name in found] == [1.0, 1.0, 2.0]
    size = ["--num-envs", "256", "--num-steps", "64", "--no-compile"]
    assert runs == [(size, 3, 256 * 64), (size + ["--envpool-async"], 3, 256 * 64)]
    opts.programs, opts.cleanrl = ["async-envs-half-threads"], None
    (name,) = bench.programs(256, 64, opts)
    assert name == f"ours --async-envs --env-threads {bench.half_the_cores()}"


def test_fig13_makes_the_tasks_once_per_seed_and_count():
    """Every arm's make_train asks for the same tasks: the generator runs once per (seed, count) and hands back the
    same object; another seed or count is generated anew."""
    bench = load("beukman2026_fig13_jax2d_gpu")
    calls = []

    class Script:
        @staticmethod
        def generate_tasks(env, env_params, static_params, task_seed, num_tasks):
            calls.append((task_seed, num_tasks))
            return object()
    bench.tasks_made_once(Script)
    a, b = Script.generate_tasks("env", "p", "s", 0, 512), Script.generate_tasks("env2", "p2", "s2", 0, 512)
    c = Script.generate_tasks("env", "p", "s", 1, 512)
    assert a is b and c is not a and calls == [(0, 512), (1, 512)]
