"""benchmark/_learning_comparison.py and the comparisons on it: the final statistic, the bootstrap rule, the arms of
ours and their commands, the verdict printed from run directories (benchmark/ppo_atari_learning.py)."""
import gzip
import json
import os
import subprocess
import sys
from types import SimpleNamespace

import numpy as np
import pytest
import tyro

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "benchmark"))
import _learning_comparison as lc  # noqa: E402
import ppo_atari_learning as pal  # noqa: E402
import pqn_atari_learning as pql  # noqa: E402


def test_final_return_is_the_mean_of_episodes_ending_after_the_window_start():
    episodes = [(100, 1.0), (900, 5.0), (901, 2.0), (1000, 4.0)]
    assert lc.final_return(episodes, 900) == pytest.approx(3.0)  # (2 + 4) / 2: an episode ending at 900 is outside
    assert lc.final_return(episodes, 1000) is None


def test_bootstrap_difference_by_hand():
    assert lc.bootstrap_difference([1.0, 1.0, 1.0], [3.0, 3.0, 3.0]) == pytest.approx((-2.0, -2.0))
    lo, hi = lc.bootstrap_difference([1.0, 2.0, 3.0], [1.0, 2.0, 3.0])
    assert lo < 0 < hi and lo == pytest.approx(-hi, abs=0.15)  # symmetric up to resampling noise
    # an independent route: the interval's ends are differences of means of 3 draws each, so multiples of 1/3
    assert all(abs(v * 3 - round(v * 3)) < 1e-9 for v in (lo, hi))
    lo, hi = lc.bootstrap_difference([10.0, 11.0, 12.0], [1.0, 2.0, 3.0])
    assert lo > 0  # the worst resample (10,10,10) vs (3,3,3) is still +7


def make_args(out, **kw):
    base = dict(out=str(out), env_id="Breakout-v5", total=10_240, seeds=[1, 2, 3], cleanrl_seeds=[1, 2, 3],
                arms=None, cleanrl=None, summary_only=True)
    base.update(kw)
    return SimpleNamespace(**base)


def test_each_arm_gets_its_exp_name_and_flags_and_every_command_parses():
    from cleanrl_scaling.ppo_atari_envpool import Args
    args = make_args("/tmp/x")
    commands = {v.stem: lc.our_command(pal.PPO, args, 1, v) for v in pal.PPO.arms()}
    assert set(commands) == {"ppo_atari_envpool", "ppo_atari_envpool_compat", "ppo_atari_envpool_nocompile",
                             "ppo_atari_envpool_nochannelslast", "ppo_atari_envpool_nodiag",
                             "ppo_atari_envpool_compat_nodiag", "ppo_atari_envpool_async",
                             "ppo_atari_envpool_envpool_async"}
    for stem, cmd in commands.items():
        parsed = tyro.cli(Args, args=cmd[2:])  # the script's own parser accepts every arm's flags
        assert parsed.exp_name == stem and parsed.total_timesteps == 10_240
    parsed = {stem: tyro.cli(Args, args=cmd[2:]) for stem, cmd in commands.items()}
    assert parsed["ppo_atari_envpool_compat"].cleanrl_compat and not parsed["ppo_atari_envpool"].cleanrl_compat
    assert not parsed["ppo_atari_envpool_nocompile"].compile
    assert not parsed["ppo_atari_envpool_nochannelslast"].channels_last
    nodiag = parsed["ppo_atari_envpool_nodiag"]
    assert nodiag.diagnostics_every == 0 and not nodiag.cleanrl_compat
    assert parsed["ppo_atari_envpool_compat_nodiag"].diagnostics_every == 0
    assert parsed["ppo_atari_envpool_compat_nodiag"].cleanrl_compat
    assert parsed["ppo_atari_envpool_async"].async_envs and not parsed["ppo_atari_envpool"].async_envs
    assert parsed["ppo_atari_envpool_envpool_async"].envpool_async and not parsed["ppo_atari_envpool"].envpool_async
    assert all(not p.cuda for p in parsed.values())  # both programs on the CPU unless --cuda
    # a one-arm comparison keeps its commands as before: no --exp-name
    assert "--exp-name" not in lc.our_command(pql.PQN, args, 1)


def write_ours(out, stem, seed, returns, total):
    run = out / "ours" / f"Breakout-v5__{stem}__{seed}__1"
    run.mkdir(parents=True)
    steps = np.linspace(total / len(returns), total, len(returns)).astype(int)
    with open(run / "metrics.jsonl", "w") as f:
        for s, r in zip(steps, returns):
            f.write(json.dumps({"global_step": int(s), "iteration": 1, "charts/episodic_return": r}) + "\n")


def write_cleanrl(out, seed, returns, total):
    lines = [f"global_step={int(s)}, episodic_return={r}" for s, r in
             zip(np.linspace(total / len(returns), total, len(returns)), returns)]
    lines += ["SPS: 100"] * (total // 1024)
    (out / f"cleanrl_s{seed}.log").write_text("\n".join(lines) + "\n")


def test_summary_prints_every_seed_and_the_verdict_by_the_rule(tmp_path, capsys):
    total = 10_240
    for seed, final in zip([1, 2, 3], [10.0, 11.0, 12.0]):
        write_cleanrl(tmp_path, seed, [0.0] * 9 + [final], total)
        write_ours(tmp_path, "ppo_atari_envpool", seed, [0.0] * 9 + [final + 0.5], total)  # inside the noise
        write_ours(tmp_path, "ppo_atari_envpool_compat", seed, [0.0] * 9 + [final - 8.0], total)  # clearly behind
    args = make_args(tmp_path, arms=["ppo_atari_envpool", "ppo_atari_envpool_compat"])
    lc.summarize(pal.PPO, args)
    out = capsys.readouterr().out
    assert "CleanRL final per seed: 10.00 11.00 12.00" in out
    ours = next(line for line in out.splitlines() if line.startswith("ours: per seed"))
    assert "10.50 11.50 12.50" in ours and "-> parity" in ours and "inside CleanRL's seed range" in ours
    compat = next(line for line in out.splitlines() if line.startswith("ours --cleanrl-compat: per seed"))
    assert "difference -8.00" in compat and "-> behind" in compat


def judge_mode(tmp_path, capsys, check: str, stem: str, shift: float) -> tuple:
    """A check of a mode of ours against our synchronous runs (finals 10, 11, 12 for seeds 1-3; the mode's shifted
    by `shift`) through check_options and summarize: (the --out it chose, what it printed)."""
    for seed, final in zip([1, 2, 3], [10.0, 11.0, 12.0]):
        write_ours(tmp_path, "ppo_atari_envpool", seed, [0.0] * 9 + [final], 10_240)
        write_ours(tmp_path, stem, seed, [0.0] * 9 + [final + shift], 10_240)
    args = make_args(tmp_path, async_check=check == "async", envpool_async_check=check == "envpool-async",
                     study=False, env_ids=None, cleanrl_seeds=None, arms=["default"], parallel=2)
    args.out = None
    pal.check_options(args)
    assert args.cleanrl_seeds == [] and args.arms == ["ppo_atari_envpool", stem]
    chosen, args.out = args.out, str(tmp_path)
    lc.summarize(pal.PPO, args)
    return chosen, capsys.readouterr().out


def test_async_check_judges_async_against_our_synchronous_runs(tmp_path, capsys):
    """--async-check: no CleanRL run; --async-envs against ours without it, by the same rule, with the half-width."""
    chosen, out = judge_mode(tmp_path, capsys, "async", "ppo_atari_envpool_async", -0.5)
    assert chosen == pal.ASYNC_OUT
    assert "ours final per seed: 10.00 11.00 12.00" in out and "CleanRL" not in out
    line = next(x for x in out.splitlines() if x.startswith("ours --async-envs: per seed"))
    lo, hi = lc.bootstrap_difference([9.5, 10.5, 11.5], [10.0, 11.0, 12.0])
    assert "difference -0.50" in line and "-> parity" in line and f"half-width {(hi - lo) / 2:.2f}" in line


def test_envpool_async_check_judges_it_against_our_synchronous_runs(tmp_path, capsys):
    """--envpool-async-check: no CleanRL run; --envpool-async against ours without it, by the same rule, in its own
    folder; the two checks at once are refused."""
    chosen, out = judge_mode(tmp_path, capsys, "envpool-async", "ppo_atari_envpool_envpool_async", 3.0)
    assert chosen == pal.ENVPOOL_ASYNC_OUT
    line = next(x for x in out.splitlines() if x.startswith("ours --envpool-async: per seed"))
    assert "difference +3.00" in line and "-> ahead" in line
    both = subprocess.run([sys.executable, os.path.join(REPO, "benchmark", "ppo_atari_learning.py"), "--async-check",
                           "--envpool-async-check", "--dry-run"], capture_output=True, text=True)
    assert both.returncode == 2 and "one check at a time" in both.stderr and both.stderr.count("\n") == 1


def test_archived_runs_are_read_from_their_gzipped_metrics(tmp_path, capsys):
    """docs/reproducing/runs/ keeps metrics.jsonl gzipped: the summary reads them there as it reads the plain file."""
    _, plain_out = judge_mode(tmp_path, capsys, "envpool-async", "ppo_atari_envpool_envpool_async", 3.0)
    files = list((tmp_path / "ours").glob("*/metrics.jsonl"))
    for path in files:
        with open(path, "rb") as f, gzip.open(str(path) + ".gz", "wb") as g:
            g.write(f.read())
        path.unlink()
    args = make_args(tmp_path, arms=["ppo_atari_envpool", "ppo_atari_envpool_envpool_async"], cleanrl_seeds=[],
                     reference="ours")
    lc.summarize(pal.PPO, args)
    gz_out = capsys.readouterr().out
    assert len(files) == 6 and "difference +3.00" in gz_out and gz_out.splitlines()[-1] == plain_out.splitlines()[-1]


def test_no_verdict_until_every_seed_finished(tmp_path, capsys):
    total = 10_240
    write_cleanrl(tmp_path, 1, [5.0] * 10, total)
    write_ours(tmp_path, "ppo_atari_envpool", 1, [5.0] * 10, total)
    lc.summarize(pal.PPO, make_args(tmp_path, arms=["ppo_atari_envpool"]))
    assert "no verdict yet" in capsys.readouterr().out


@pytest.mark.parametrize("argv, needle", [(["--arms", "fast"], "--arms fast: unknown"),
                                          (["--seeds", "1", "1"], "a seed given twice"),
                                          (["--cleanrl", "/nonexistent"], "not a CleanRL checkout"),
                                          (["--seeds", "--cleanrl-seeds"], "both empty")])
def test_bad_options_exit_2_with_one_line(tmp_path, argv, needle):
    out = subprocess.run([sys.executable, os.path.join(REPO, "benchmark", "ppo_atari_learning.py"),
                          "--out", str(tmp_path), *argv], capture_output=True, text=True)
    assert out.returncode == 2 and needle in out.stderr and len(out.stderr.strip().splitlines()) == 1
    assert not os.listdir(tmp_path)  # nothing started
