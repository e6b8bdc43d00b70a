"""ppo_ewma_jax2d.py: the math against hand-computed values, then end-to-end runs that all share one tiny
configuration, so that one compiled training program serves every run (and one evaluation program per --eval-attempts).

Compile time is what this file spends (a Kinetix env step is a large XLA program), so:
- the persistent compilation cache and XLA's backend optimisation at -O0 (tests/conftest.py: about 3x faster
  compiles; every comparison below is between runs compiled the same way), except for the evaluation program, which
  runs longer than it compiles (see shared_make_train);
- runs happen in this process where no process boundary is needed (only the 4-device run and one bad-input check
  start a new interpreter), and they share one make_train (see shared_make_train)."""
import contextlib
import dataclasses
import glob
import io
import json
import math
import os
import pathlib
import pickle
import signal
import subprocess
import sys

REPO = pathlib.Path(__file__).resolve().parents[1]

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import tyro  # noqa: E402

from cleanrl_scaling import ppo_ewma_jax2d as m  # noqa: E402
from inprocess import assert_finished_unevaluated, json_on_devices, main_inprocess, pythonpath  # noqa: E402

SCRIPT = str(REPO / "cleanrl_scaling" / "ppo_ewma_jax2d.py")
BATCH = 8 * 16


def tiny(total_iterations: int, **overrides) -> list:
    """The one configuration of every end-to-end run: only runtime values may differ between runs."""
    flags = {"num-tasks": 8, "num-envs": 8, "num-steps": 16, "num-minibatches": 2, "update-epochs": 2,
             "hidden-size": 32, "diagnostics-states": 64, "updates-per-chunk": 2, "eval-every": 0, "ewma-com": 2,
             "diagnostics-every": 0, "eval-attempts": 1, "progress": "none", "total-timesteps": total_iterations * BATCH}
    flags.update({k.replace("_", "-"): v for k, v in overrides.items()})
    return [x for k, v in flags.items() for x in ((f"--{k}",) if v is True else (f"--{k}", str(v)))]


EVAL_TAGS = {"charts/solve_rate", "charts/solve_rate_se", "charts/solve_rate_greedy", "charts/eval_return",
             "charts/eval_return_se", "charts/eval_return_greedy"}
TRAINING_TAGS = ["losses/policy_loss", "losses/value_loss", "losses/entropy", "losses/approx_kl", "losses/clipfrac",
                 "losses/explained_variance", "charts/episodic_return", "charts/episodic_length"]


# ---------------------------------------------------------------------------------------------------------
# Math
# ---------------------------------------------------------------------------------------------------------


class FakeDevice:
    def __init__(self, stats):
        self.stats = stats

    def memory_stats(self):
        return self.stats


def test_peak_device_bytes_is_the_largest_device_peak_or_none():
    gpus = [FakeDevice({"peak_bytes_in_use": 5, "bytes_in_use": 9}), FakeDevice({"peak_bytes_in_use": 7})]
    assert m.peak_device_bytes(gpus) == 7
    assert m.peak_device_bytes([FakeDevice(None), FakeDevice(None)]) is None  # CPU: memory_stats() gives None
    assert m.peak_device_bytes([FakeDevice({"bytes_in_use": 9})]) is None  # a backend without the peak
    assert m.peak_device_bytes([FakeDevice(None), FakeDevice({"peak_bytes_in_use": 3})]) == 3
    assert m.peak_text(None) == "" and "2.00 GiB" in m.peak_text(2 * 2**30)


def test_ewma_update_matches_hand_computed_sequence():
    prox = {"w": jnp.array([1.0, -2.0])}
    com = 3.0  # beta = 3/4
    expected = np.array([1.0, -2.0])
    for theta in ([2.0, 0.0], [4.0, 4.0], [0.0, 8.0]):
        prox = m.ewma_update(prox, {"w": jnp.array(theta)}, com)
        expected = 0.75 * expected + 0.25 * np.array(theta)
        np.testing.assert_allclose(prox["w"], expected, rtol=1e-6)
    # by hand: (1, -2) -> (1.25, -1.5) -> (1.9375, -0.125) -> (1.453125, 1.90625)
    np.testing.assert_allclose(prox["w"], [1.453125, 1.90625], rtol=1e-6)
    same = m.ewma_update({"w": jnp.array([5.0])}, {"w": jnp.array([7.0])}, 0.0)
    np.testing.assert_array_equal(same["w"], [7.0])  # C = 0: theta_prox is theta


def reference_ppo_loss(network, params, mb, clip, ent_coef, vf_coef):
    """CleanRL's PPO loss (ratio clipping, clipped value loss, entropy bonus) on the script's network helpers."""
    logits, newvalue, _, _ = network.apply(params, mb.obs)
    newlogp = m.log_prob(logits, mb.action)
    ratio = jnp.exp(newlogp - mb.logp)
    adv = (mb.advantages - mb.advantages.mean()) / (mb.advantages.std(ddof=1) + 1e-8)
    pg = jnp.maximum(-adv * ratio, -adv * jnp.clip(ratio, 1 - clip, 1 + clip)).mean()
    v_clipped = mb.value + jnp.clip(newvalue - mb.value, -clip, clip)
    v_loss = 0.5 * jnp.maximum((newvalue - mb.returns) ** 2, (v_clipped - mb.returns) ** 2).mean()
    ent = m.entropy(logits).mean()
    return pg - ent_coef * ent + vf_coef * v_loss


def small_problem(ewma_com: float):
    mask = np.array([[True, True, True], [True, True, False]])
    network = m.ActorCritic(action_mask=mask, hidden_size=16, num_layers=2)
    args = m.Args(ewma_com=ewma_com)  # advantage normalisation, the clipped value loss, imp_samp_max 100: defaults
    key = jax.random.PRNGKey(0)
    obs = jax.random.normal(key, (32, 5))
    params = network.init(key, obs)
    action = jnp.stack([jax.random.randint(jax.random.PRNGKey(1), (32,), 0, 3),
                        jax.random.randint(jax.random.PRNGKey(2), (32,), 0, 2)], -1)
    mb = m.Batch(obs=obs, action=action, logp=-1.5 + 0.3 * jax.random.normal(jax.random.PRNGKey(3), (32,)),
                 advantages=jax.random.normal(jax.random.PRNGKey(4), (32,)),
                 returns=jax.random.normal(jax.random.PRNGKey(5), (32,)),
                 value=0.1 * jax.random.normal(jax.random.PRNGKey(6), (32,)))
    hyper = m.Hyper(clip_coef=jnp.float32(0.2), ewma_com=jnp.float32(0.0), ent_coef=jnp.float32(0.01),
                    vf_coef=jnp.float32(0.5))
    return args, network, hyper, params, mb


def test_com_zero_is_exactly_plain_ppo_loss_and_gradients():
    args, network, hyper, params, mb = small_problem(ewma_com=0.0)
    # a sample with pi/pi_behavior > 100 too: plain PPO truncates nothing
    mb = mb._replace(logp=mb.logp.at[0].set(-30.0))
    (loss, _), grads = jax.value_and_grad(lambda p: m.ppo_loss(args, network, hyper, p, p, mb), has_aux=True)(params)
    ref, ref_grads = jax.value_and_grad(lambda p: reference_ppo_loss(network, p, mb, 0.2, 0.01, 0.5))(params)
    assert float(loss) == float(ref)
    for g, r in zip(jax.tree.leaves(grads), jax.tree.leaves(ref_grads)):
        np.testing.assert_array_equal(np.asarray(g), np.asarray(r))
    # and eq. 4 with pi_prox = pi_behavior (ratios below the truncation) is the PPO surrogate bit for bit
    newlogp = mb.logp + 0.1 * jnp.arange(32) / 32
    eq4 = m.decoupled_pg_loss(newlogp, mb.logp, mb.logp, mb.advantages, 0.2, 100.0)
    ratio = jnp.exp(newlogp - mb.logp)
    plain = jnp.maximum(-mb.advantages * ratio, -mb.advantages * jnp.clip(ratio, 0.8, 1.2))
    np.testing.assert_array_equal(np.asarray(eq4), np.asarray(plain))
    g4 = jax.grad(lambda n: m.decoupled_pg_loss(n, mb.logp, mb.logp, mb.advantages, 0.2, 100.0).sum())(newlogp)
    gp = jax.grad(lambda n: jnp.maximum(-mb.advantages * jnp.exp(n - mb.logp),
                                        -mb.advantages * jnp.clip(jnp.exp(n - mb.logp), 0.8, 1.2)).sum())(newlogp)
    np.testing.assert_array_equal(np.asarray(g4), np.asarray(gp))


def test_truncated_importance_ratio():
    behavior = jnp.array([-2.0, -2.0, -2.0])
    prox = behavior
    newlogp = behavior + jnp.array([math.log(1000.0), math.log(1000.0), math.log(2.0)])
    adv = jnp.array([1.0, -1.0, -1.0])
    loss = m.decoupled_pg_loss(newlogp, prox, behavior, adv, 0.2, 100.0)
    # pi/pi_behavior = 1000 > 100: pi_behavior is raised to pi/100, so the weight pi_prox/pi_adj = 0.1
    # adv > 0: max(-1000, -1.2) * 0.1 = -0.12; adv < 0: max(1000, 1.2) * 0.1 = 100 (the capped ratio)
    # ratio 2 < 100: untouched, max(2, 1.2) = 2
    np.testing.assert_allclose(loss, [-0.12, 100.0, 2.0], rtol=1e-5)
    grad = jax.grad(lambda n: m.decoupled_pg_loss(n, prox, behavior, adv, 0.2, 100.0).sum())(newlogp)
    np.testing.assert_allclose(grad, [0.0, 100.0, 2.0], rtol=1e-5)  # no gradient through the truncation
    off = m.decoupled_pg_loss(newlogp, prox, behavior, adv, 0.2, 0.0)
    np.testing.assert_allclose(off, [-1.2, 1000.0, 2.0], rtol=1e-5)


def test_default_eval_attempts_bound_the_standard_error():
    # the worst case p = 1/2: SE = 0.5/sqrt(tasks x K) <= 0.02 <=> tasks x K >= 625, with the fewest such K
    assert m.default_eval_attempts(8) == 79 and 0.5 / math.sqrt(8 * 79) <= 0.02 < 0.5 / math.sqrt(8 * 78)
    assert [m.default_eval_attempts(n) for n in (1, 64, 512, 625, 626)] == [625, 10, 2, 1, 1]
    for n in range(1, 700):
        k = m.default_eval_attempts(n)
        assert n * k >= 625 and (k == 1 or n * (k - 1) < 625)
    args = m.Args(num_tasks=8, num_envs=8, num_steps=16, num_minibatches=2)  # no --eval-attempts: the default
    m.apply_scaling(args, m.validate(args))
    assert args.eval_attempts == 79  # what config.json records


def test_summarise_eval_against_hand_computed_values():
    # K = 2 attempts on 2 tasks, then the greedy row
    solved = jnp.array([[True, False], [True, True], [False, True]])
    ret = jnp.array([[1.0, -1.0], [1.0, 3.0], [0.5, 1.5]])
    r = m.summarise_eval(solved, ret)
    # sampled outcomes 1, 0, 1, 1: mean 3/4, sample variance (3 x 1/16 + 9/16) / 3 = 1/4, SE = 1/2 / sqrt(4)
    np.testing.assert_allclose([r.solve_rate, r.solve_rate_se, r.solve_rate_greedy], [0.75, 0.25, 0.5], rtol=1e-6)
    # returns 1, -1, 1, 3: mean 1, sample variance (0 + 4 + 0 + 4) / 3, SE = sqrt(8/3) / 2
    np.testing.assert_allclose([r.eval_return, r.eval_return_se, r.eval_return_greedy],
                               [1.0, math.sqrt(8 / 3) / 2, 1.0], rtol=1e-6)


def test_attempt_keys_keep_the_evaluation_key_for_attempt_zero():
    key = jax.random.PRNGKey(7)
    keys = np.asarray(m.attempt_keys(key, 4))
    np.testing.assert_array_equal(keys[0], np.asarray(key))  # K = 1 draws what the one-episode evaluation drew
    np.testing.assert_array_equal(keys[2], np.asarray(jax.random.fold_in(key, 2)))
    assert len({tuple(k) for k in keys}) == 4


def test_gae_against_hand_computed_values():
    gamma, lam = 0.5, 0.5
    # one env, 3 steps: step 1 is truncated (time limit), step 2 terminates
    t = m.Transition(obs=jnp.zeros((3, 1, 1)), action=jnp.zeros((3, 1, 1), jnp.int32), logp=jnp.zeros((3, 1)),
                     value=jnp.array([[1.0], [2.0], [3.0]]), reward=jnp.array([[1.0], [1.0], [1.0]]),
                     done=jnp.array([[False], [True], [True]]), terminated=jnp.array([[False], [False], [True]]),
                     next_value=jnp.array([[9.0], [4.0], [9.0]]))
    adv, ret = m.compute_gae(t, jnp.array([10.0]), gamma, lam)
    a2 = 1.0 + 0.0 - 3.0  # terminal: no bootstrap
    a1 = 1.0 + 0.5 * 4.0 - 2.0  # truncated: bootstrap from V(true next obs); the trace stops
    a0 = (1.0 + 0.5 * 2.0 - 1.0) + 0.25 * a1
    np.testing.assert_allclose(adv[:, 0], [a0, a1, a2], rtol=1e-6)
    np.testing.assert_allclose(ret[:, 0], [a0 + 1, a1 + 2, a2 + 3], rtol=1e-6)


def test_kl_diagnostics_sum_over_action_dimensions():
    logits = [np.array([[[0.0, 0.0, 0.0], [1.0, 0.0, -1e9]]]), np.array([[[1.0, 0.0, 0.0], [0.0, 0.0, -1e9]]])]
    logps = [m.log_softmax64(x) for x in logits]
    kl = m.PolicyKL(logps)

    def hand(p, q):
        return sum(pi * math.log(pi / qi) for pi, qi in zip(p, q))
    e = math.e
    p0 = [1 / 3] * 3
    q0 = [e / (e + 2), 1 / (e + 2), 1 / (e + 2)]
    p1 = [e / (e + 1), 1 / (e + 1)]
    q1 = [0.5, 0.5]
    np.testing.assert_allclose(kl(0, 1), [hand(p0, q0) + hand(p1, q1)], rtol=1e-9)
    seq, ref = m.kl_profile(kl)
    np.testing.assert_allclose(seq, [hand(q0, p0) + hand(q1, p1)], rtol=1e-9)
    np.testing.assert_allclose(ref, seq, rtol=1e-9)


# ---------------------------------------------------------------------------------------------------------
# End-to-end runs (in-process where possible so that they share traced programs)
# ---------------------------------------------------------------------------------------------------------
# Fields the compiled programs take as arguments (the seed, Hyper's COM and epsilon, chunk lengths, --eval-attempts
# as a static argument) or never read (how often to log, evaluate and checkpoint; where): runs that differ only in
# these can share one make_train. COM enters the programs only as the choice PPO (0) or PPO-EWMA (> 0).
RUNTIME_FIELDS = {"seed", "exp_name", "runs_dir", "resume", "init_from", "progress", "checkpoint_every", "track",
                  "total_timesteps", "num_iterations", "eval_every", "eval_attempts", "final_eval", "diagnostics_every",
                  "kl_profile",
                  "ewma_com", "clip_coef", "ent_coef", "vf_coef", "save_model"}
MAKE_TRAIN = m.make_train


def shared_make_train(args):
    """m.make_train, once per program-relevant configuration: the script traces Kinetix's step afresh for every run
    (tens of seconds), and the tiny runs below differ only in RUNTIME_FIELDS."""
    key = tuple((k, v) for k, v in sorted(dataclasses.asdict(args).items()) if k not in RUNTIME_FIELDS)
    key += (args.ewma_com > 0, args.num_iterations if args.anneal_lr else None)
    if key not in shared_make_train.made:
        train = MAKE_TRAIN(args)
        # the evaluation, unlike the training chunk, runs longer than it compiles: its 257-step while loop of the
        # physics runs several times faster at XLA's -O2 than at -O0, compile included, and the runs below evaluate
        # ~10 times; so it alone is compiled at -O2 (every comparison is still between runs of one program)
        evaluate = jax.jit(train.evaluate.__wrapped__, static_argnames="attempts",
                           compiler_options={"xla_backend_optimization_level": 2})
        shared_make_train.made[key] = train._replace(evaluate=evaluate)
    return shared_make_train.made[key]


shared_make_train.made = {}


@pytest.fixture(autouse=True, scope="module")
def share_programs():
    m.make_train = shared_make_train
    yield
    m.make_train = MAKE_TRAIN


def run_main(argv):
    """main() in this process, its output to capsys or the caller's redirect; returns its exit code."""
    return main_inprocess(m, argv, capture=False)[0]


def run_dir_of(runs_dir):
    dirs = sorted(glob.glob(os.path.join(runs_dir, "*")), key=os.path.getmtime)
    return dirs[-1]


def rows(run_dir):
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f]


def training_curve(run_dir, first=1):
    """(iteration, tag, value) of the training metrics, in order (no wall-clock or diagnostics)."""
    return [(r["iteration"], k, r[k]) for r in rows(run_dir) if r["iteration"] >= first for k in TRAINING_TAGS if k in r]


def start_four_device_run(runs_dir):
    """The tiny run in a new interpreter with 4 CPU devices (the device count is fixed when JAX starts). Started
    before the in-process runs so that its compiles overlap theirs on a second core."""
    env = dict(os.environ, XLA_FLAGS=os.environ["XLA_FLAGS"] + " --xla_force_host_platform_device_count=4",
               PYTHONPATH=pythonpath(REPO))
    runs_dir.mkdir(parents=True)
    with open(runs_dir / "stderr.log", "w") as log:  # a file, not a pipe: a full pipe would stall the run until read
        return subprocess.Popen([sys.executable, SCRIPT] + tiny(4) + ["--runs-dir", str(runs_dir / "runs")], env=env,
                                stdout=subprocess.DEVNULL, stderr=log)


@pytest.fixture(scope="module")
def runs(tmp_path_factory, request):
    """Six in-process runs of the tiny configuration (one compiled chunk for all; one evaluation program per --eval-attempts,
    1 and 4), and, where the slow 4-device test was selected (pytest -m slow), the 4-device run beside them."""
    base = tmp_path_factory.mktemp("ppo_ewma_runs")
    wanted = any(item.name == "test_four_devices_give_the_one_device_result" for item in request.session.items)
    four = start_four_device_run(base / "four_devices") if wanted else None
    out = {"four_devices": (four, base / "four_devices")}
    try:
        for name, argv in [
            ("diag", tiny(4, diagnostics_every=2, checkpoint_every=2, eval_every=2)),
            ("nodiag", tiny(4)),
            ("half", tiny(2)),
            ("attempts", tiny(4, diagnostics_every=2, checkpoint_every=2, eval_every=2, eval_attempts=4)),
        ]:
            runs_dir = str(base / name)
            printed = io.StringIO()
            with contextlib.redirect_stdout(printed):
                assert run_main(argv + ["--runs-dir", runs_dir]) == 0
            out[name], out[f"{name}_stdout"] = run_dir_of(runs_dir), printed.getvalue()
        ckpt = os.path.join(out["half"], "checkpoints", "latest.ckpt")
        runs_dir = str(base / "reload")  # before the resume below, which overwrites this checkpoint
        # iterations 3-4: one chunk of 2 updates, the program every other run uses (3 would compile a 1-update chunk)
        assert run_main(tiny(4, ewma_com=8, clip_coef=0.3) + ["--init-from", ckpt, "--runs-dir", runs_dir]) == 0
        out["reload"] = run_dir_of(runs_dir)
        assert run_main(tiny(4) + ["--resume", ckpt]) == 0
        out["resumed"] = out["half"]
        yield out
    finally:
        if four is not None and four.poll() is None:  # the 4-device test did not run (deselected) or failed before waiting
            four.kill()
            four.wait()


def test_a_run_says_where_it_writes_and_what_it_does_before_the_first_update(runs):
    """A first run sat silent through the task generation and the compile; now each phase is named as it starts."""
    lines = runs["nodiag_stdout"].splitlines()
    at = {key: next(i for i, line in enumerate(lines) if key in line) for key in
          ["building 8 tasks and the agent", "run directory: ", "tensorboard --logdir", "first 2 updates of 128 steps"]}
    assert lines[at["run directory: "]] == f"run directory: {runs['nodiag']}"
    assert lines[at["tensorboard --logdir"]] == f"watch it train: tensorboard --logdir {os.path.dirname(runs['nodiag'])}"
    assert list(at.values()) == sorted(at.values())
    assert sum("updates of 128 steps" in line for line in lines) == 2  # the first chunk starts and ends; not the second


def test_smoke_run_directory(runs):
    run_dir = runs["diag"]
    config = json.load(open(os.path.join(run_dir, "config.json")))
    assert config["resolved"]["batch_size"] == BATCH and config["resolved"]["num_minibatches"] == 2
    assert config["args"]["num_iterations"] == 4 and config["args"]["ewma_com"] == 2.0
    assert config["script"] == "ppo_ewma_jax2d" and config["devices"] == 1
    # the launcher's --skip-finished matches a grid point on exactly these flags
    assert config["argv"] == tiny(4, diagnostics_every=2, checkpoint_every=2, eval_every=2) + [
        "--runs-dir", os.path.dirname(run_dir)]
    metrics = rows(run_dir)
    tags = set().union(*metrics)
    required = ["charts/SPS", "charts/learning_rate", "losses/policy_loss", "losses/value_loss", "losses/entropy",
                "losses/approx_kl", "losses/old_approx_kl", "losses/clipfrac", "losses/explained_variance",
                "charts/solve_rate", "charts/solve_rate_greedy", "charts/solve_rate_se", "charts/eval_return_se",
                "diagnostics/kl_behavior", "diagnostics/ddr",
                "diagnostics/kl_prox", "diagnostics/seq_kl_mean", "diagnostics/ref_kl_mean", "diagnostics/update_size",
                "diagnostics/grad_norm", "diagnostics/feature_rank", "diagnostics/srank", "diagnostics/dormant_frac",
                "diagnostics/weight_norm", "diagnostics/grad_kurtosis", "diagnostics/ess_pct",
                "diagnostics/policy_variance", "diagnostics/critic_feature_rank"]
    assert not [t for t in required if t not in tags]
    for r in metrics:
        for k, v in r.items():
            if k != "losses/explained_variance":
                assert math.isfinite(v), (k, v)
    diag_iterations = sorted(r["iteration"] for r in metrics if "diagnostics/ddr" in r)
    assert diag_iterations == [2, 4]
    assert sorted(r["iteration"] for r in metrics if "charts/solve_rate" in r) == [2, 4]  # every 2 and at the end
    profile = [json.loads(line) for line in open(os.path.join(run_dir, "kl_profile.jsonl"))]
    assert [len(p["seq_kl"]) for p in profile] == [4, 4]  # 2 epochs x 2 minibatches
    ckpt = pickle.load(open(os.path.join(run_dir, "checkpoints", "latest.ckpt"), "rb"))
    assert ckpt["script"] == "ppo_ewma_jax2d" and ckpt["iteration"] == 4
    assert all(isinstance(x, np.ndarray) for x in ckpt["runner"])
    summary = json.load(open(os.path.join(run_dir, "summary.json")))
    assert summary["status"] == "finished" and 0.0 <= summary["solve_rate"] <= 1.0
    assert summary["peak_device_bytes"] is None  # CPU devices keep no allocator statistics


def test_diagnostics_do_not_change_training(runs):
    assert training_curve(runs["diag"]) == training_curve(runs["nodiag"])


def without_evaluation(run_dir):
    """Every logged row without the evaluation's tags and the wall clock (SPS)."""
    drop = EVAL_TAGS | {"charts/SPS", "wall_time"}
    return [{k: v for k, v in r.items() if k not in drop} for r in rows(run_dir)]


def test_eval_attempts_do_not_change_training(runs):
    """--eval-attempts 4 against 1, everything else equal: every row bit for bit, evaluation tags aside."""
    assert without_evaluation(runs["attempts"]) == without_evaluation(runs["diag"])
    evals = [[r for r in rows(runs[k]) if "charts/solve_rate" in r] for k in ("diag", "attempts")]
    assert [r["iteration"] for r in evals[0]] == [r["iteration"] for r in evals[1]] == [2, 4]
    assert all(r["charts/eval_return"] != s["charts/eval_return"] for r, s in zip(*evals))  # 32 episodes, not 8
    assert json.load(open(os.path.join(runs["attempts"], "config.json")))["args"]["eval_attempts"] == 4
    states = [pickle.load(open(os.path.join(runs[k], "checkpoints", "latest.ckpt"), "rb"))["runner"]
              for k in ("attempts", "diag")]
    for a, b in zip(*states):  # the final state too, RNG key included
        np.testing.assert_array_equal(a, b)


def built_like(argv):
    """The programs of a tiny run (shared_make_train: the same compiled evaluation the runs used)."""
    args = tyro.cli(m.Args, args=argv)
    m.apply_scaling(args, m.validate(args))
    return m.make_train(args)


def test_first_attempt_is_the_one_attempt_evaluation(runs):
    """K attempts are K streams: the first is the K = 1 evaluation's (what runs before --eval-attempts logged)."""
    train = built_like(tiny(4))
    ckpt = pickle.load(open(os.path.join(runs["diag"], "checkpoints", "latest.ckpt"), "rb"))
    params = m.restore_runner(train.init(train.tasks, 1), ckpt["runner"], "--resume").train.params
    params = jax.device_put(params, jax.devices()[0])
    key = jax.random.fold_in(jax.random.PRNGKey(1 + 7919), 4)
    one, four = (jax.device_get(train.evaluate(train.eval_tasks, params, key, attempts=k)) for k in (1, 4))
    assert four.solved.shape == four.ep_return.shape == (5, 8)
    np.testing.assert_array_equal(four.ep_return[[0, -1]], one.ep_return)  # attempt 0 and the greedy episodes
    np.testing.assert_array_equal(four.solved[[0, -1]], one.solved)
    assert len({tuple(r) for r in four.ep_return[:4]}) == 4  # the other attempts drew other actions
    np.testing.assert_allclose(four.eval_return, four.ep_return[:4].mean(), rtol=1e-6)
    np.testing.assert_allclose(four.eval_return_se, four.ep_return[:4].std(ddof=1) / math.sqrt(32), rtol=1e-5)


def test_resume_is_bit_exact(runs):
    assert training_curve(runs["resumed"]) == training_curve(runs["nodiag"])
    final = [json.load(open(os.path.join(runs[k], "summary.json"))) for k in ("resumed", "nodiag")]
    assert final[0]["iteration"] == final[1]["iteration"] == 4
    assert final[0]["solve_rate"] == final[1]["solve_rate"]
    assert final[0]["solve_rate_greedy"] == final[1]["solve_rate_greedy"]
    states = [pickle.load(open(os.path.join(runs[k], "checkpoints", "latest.ckpt"), "rb"))["runner"]
              for k in ("resumed", "nodiag")]
    for a, b in zip(*states):  # parameters, Adam, theta_prox, RNG key, env states: all bit for bit
        np.testing.assert_array_equal(a, b)


def test_reload_with_another_com(runs):
    run_dir = runs["reload"]
    config = json.load(open(os.path.join(run_dir, "config.json")))
    assert config["args"]["ewma_com"] == 8.0 and config["args"]["clip_coef"] == 0.3
    assert config["start_iteration"] == 2 and config["init_from"]
    metrics = rows(run_dir)
    assert [r["iteration"] for r in metrics if "losses/policy_loss" in r] == [3, 4]
    assert run_dir != runs["half"]
    # the same state continued with other hyperparameters: iteration 3 differs from the COM 2 run's
    first = [r for r in rows(runs["nodiag"]) if r["iteration"] == 3 and "losses/policy_loss" in r][0]
    reloaded = [r for r in metrics if "losses/policy_loss" in r][0]
    assert reloaded["losses/policy_loss"] != first["losses/policy_loss"]


def test_interrupted_reload_resumes_with_its_init_from_argv(runs, tmp_path, monkeypatch):
    """The launcher's --resume-unfinished appends --resume to the grid point's argv, which for a reload (B26 Fig. 3a)
    holds its --init-from: the run continues from its own checkpoint, in its directory, and keeps its reload point."""
    source = os.path.join(runs["reload"], "checkpoints", "latest.ckpt")  # iteration 4
    argv = tiny(8, ewma_com=8, clip_coef=0.3) + ["--init-from", source, "--runs-dir", str(tmp_path)]
    with monkeypatch.context() as patch:  # SIGTERM after the first chunk (iteration 6), then resumed unpatched
        patch.setattr(m.RunLogger, "progress", lambda self, step, sps: os.kill(os.getpid(), signal.SIGTERM))
        assert run_main(argv) == 128 + signal.SIGTERM
    run_dir = run_dir_of(str(tmp_path))
    ckpt = os.path.join(run_dir, "checkpoints", "latest.ckpt")
    assert pickle.load(open(ckpt, "rb"))["iteration"] == 6
    assert run_main(argv + ["--resume", ckpt]) == 0
    assert os.listdir(tmp_path) == [os.path.basename(run_dir)]  # the same run, not a new one
    config = json.load(open(os.path.join(run_dir, "config.json")))
    assert config["init_from"] == source and config["start_iteration"] == 4 and config["argv"][-1] == ckpt
    updates = [r["iteration"] for r in rows(run_dir) if "losses/policy_loss" in r]
    assert updates == [5, 6, 7, 8]
    assert json.load(open(os.path.join(run_dir, "summary.json")))["status"] == "finished"


def test_a_timed_run_never_evaluates(tmp_path, monkeypatch, runs):
    """--eval-every 0 --no-final-eval (B26 Figs. 13/14's timed runs): no evaluation, not even at the end; the run still
    finishes with its checkpoint and summary, without solve rates."""
    def evaluated(*_):
        raise AssertionError("the run evaluated")
    monkeypatch.setattr(m, "evaluate_and_log", evaluated)
    assert run_main(tiny(2, no_final_eval=True) + ["--runs-dir", str(tmp_path)]) == 0
    assert_finished_unevaluated(run_dir_of(str(tmp_path)), 2)


def test_sigterm_checkpoints_and_exits_143(tmp_path, monkeypatch):
    """A real SIGTERM through the script's handler, delivered after the first chunk's log line."""
    def progress_then_sigterm(self, step, sps):
        os.kill(os.getpid(), signal.SIGTERM)
    monkeypatch.setattr(m.RunLogger, "progress", progress_then_sigterm)
    assert run_main(tiny(6) + ["--runs-dir", str(tmp_path)]) == 128 + signal.SIGTERM
    run_dir = run_dir_of(str(tmp_path))
    summary = json.load(open(os.path.join(run_dir, "summary.json")))
    assert summary["status"] == "interrupted" and summary["iteration"] == 2
    ckpt = pickle.load(open(os.path.join(run_dir, "checkpoints", "latest.ckpt"), "rb"))
    assert ckpt["iteration"] == 2
    assert max(r["iteration"] for r in rows(run_dir)) == 2


@pytest.mark.slow  # a second interpreter compiling every program for 4 devices: minutes of the other core
def test_four_devices_give_the_one_device_result(runs):
    proc, runs_dir = runs["four_devices"]
    assert proc.wait(timeout=900) == 0, (runs_dir / "stderr.log").read_text()[-2000:]
    run_dir = run_dir_of(str(runs_dir / "runs"))
    assert json.load(open(os.path.join(run_dir, "config.json")))["devices"] == 4
    one, four = training_curve(runs["nodiag"]), training_curve(run_dir)
    assert [(i, k) for i, k, _ in one] == [(i, k) for i, k, _ in four]
    # Same result up to float rounding: the sharded program rounds differently, and contact physics amplifies that
    # once parameters differ in the last bits (measured: agreement to ~1e-6 relative over iterations 1-2, visible
    # differences from iteration 3 on). So the comparison covers the first two iterations.
    early = [(v4, v1) for (i, _, v4), (_, _, v1) in zip(four, one) if i <= 2]
    assert len(early) >= 2 * 6
    np.testing.assert_allclose(*zip(*early), rtol=1e-3, atol=1e-5)


def placement(tree) -> dict:
    """Per leaf what selects a compiled program besides shape: dtype, weak type, sharding, committed to it."""
    return {jax.tree_util.keystr(path): (str(x.dtype), x.aval.weak_type, str(x.sharding), x.committed)
            for path, x in jax.tree_util.tree_leaves_with_path(tree)}


def chunk_compiles(argv, chunks: int = 3) -> dict:
    """train_chunk's compiled programs after `chunks` chunks of the tiny run, state placed as main() places it, and
    the state leaves a chunk returned placed or typed otherwise than it took them (each such change compiles again)."""
    args = tyro.cli(m.Args, args=argv)
    m.apply_scaling(args, m.validate(args))
    train = m.make_train(args)
    hyper = m.Hyper(clip_coef=jnp.float32(args.clip_coef), ewma_com=jnp.float32(args.ewma_com),
                    ent_coef=jnp.float32(args.ent_coef), vf_coef=jnp.float32(args.vf_coef))
    runner = m.initial_runner(train, args, None)
    probe = train.empty_probe(runner.train.params)
    changed = set()
    for _ in range(chunks):
        before = placement((runner, probe))
        runner, probe, stats, _ = train.train_chunk(hyper, train.tasks, runner, probe, args.updates_per_chunk, -1)
        after = placement((runner, probe))
        changed |= {k for k in before if before[k] != after[k]}
    jax.block_until_ready(stats)
    return {"compiles": train.train_chunk._cache_size(), "changed": sorted(changed), "devices": jax.device_count()}


def test_train_chunk_compiles_once_on_one_device():
    """A chunk returns its state as it took it, so a run (and a resumed run) compiles the chunk once: not again on
    the second chunk, inside the timed SPS. In-process: the tiny runs' program (shared_make_train)."""
    result = chunk_compiles(tiny(6))
    assert result["changed"] == [] and result["compiles"] == 1, result


@pytest.mark.slow  # a new interpreter compiling the 4-device chunk (about a minute)
def test_train_chunk_compiles_once_on_four_devices():
    """The same on 4 CPU devices (envs split over them), in a new interpreter: the 4-device run's program (cached)."""
    result = json_on_devices("test_ppo_ewma_jax2d", "t.chunk_compiles(t.tiny(6))", 4, timeout=900)
    assert result["devices"] == 4
    assert result["changed"] == [] and result["compiles"] == 1, result


@pytest.mark.parametrize("argv, flag", [
    (["--num-envs", "0"], "--num-envs"),
    (["--num-minibatches", "3"], "--num-minibatches"),
    # the message speaks of the user's batch (8 x 16), not of the 2048-env base
    (["--num-tasks", "8", "--num-envs", "8", "--num-steps", "16", "--num-minibatches", "3"], "the batch 8x16=128"),
    (["--ewma-com", "-1"], "--ewma-com"),
    (["--env-id", "Jax2D-Walker"], "--env-id"),
    (["--env-id", "Jax2D-Locomotion-m"], "--env-id"),  # kinetix's generator cannot build a robot in the m scene
    (["--resume", "/nonexistent/latest.ckpt"], "--resume"),
    (["--imp-samp-max", "0.5"], "--imp-samp-max"),
    (["--ent-coef", "inf"], "--ent-coef"),  # refused up front, not trained into a NaN stop
    (["--ewma-com", "nan"], "--ewma-com"),
    (["--hidden-size", "0"], "--hidden-size must"),  # names only the flag at fault
    # the error is reported under the flag the user gave
    (["--init-from", "/nonexistent/latest.ckpt"], "--init-from: no checkpoint"),
    (tiny(1) + ["--runs-dir", "/proc/cleanrl_scaling/runs"], "--runs-dir: cannot write"),
    (["--clip-coef", "-0.1"], "--clip-coef"),
    (["--eval-attempts", "0"], "--eval-attempts must be >= 1"),
    (["--keep-checkpoints", "4", "0"], "--keep-checkpoints must be iterations >= 1 (got 4 0)"),
    (tiny(6) + ["--keep-checkpoints", "7"], "--keep-checkpoints 7: the run ends at iteration 6"),
])
def test_bad_inputs_exit_2_naming_the_flag(argv, flag, capsys):
    assert run_main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and flag in err[0] and "Traceback" not in err[0]
    assert "--resume" not in err[0] or "--resume" in argv


def test_clip_coef_zero_is_allowed():
    """B26 Fig. 6b trains PPO with eps = 0: the objective is defined there, so validation accepts it."""
    scaling = m.validate(m.Args(clip_coef=0.0, num_tasks=8, num_envs=8, num_steps=16, num_minibatches=2))
    assert scaling["batch_size"] == BATCH


def test_bad_input_exit_2_in_a_fresh_process():
    out = subprocess.run([sys.executable, SCRIPT, "--num-tasks", "0"], capture_output=True, text=True, timeout=120,
                         env=dict(os.environ, PYTHONPATH=pythonpath(REPO)))
    assert out.returncode == 2
    assert "--num-tasks" in out.stderr and "Traceback" not in out.stderr


@pytest.mark.slow
def test_learns_above_random_on_eight_tasks(tmp_path):
    """The docs' learning check (about 10 minutes on 2 CPU cores): PPO on 8 tasks for 60 iterations. Measured on
    these tasks: a near-uniform policy solves 1.6% of episodes; this run's training episodes went from 0.9% solved
    (iterations 1-10) to 13% (iterations 51-60), and the final policy solves 18% sampled and 2 of 8 tasks greedily."""
    env = dict(os.environ, PYTHONPATH=pythonpath(REPO))
    env["XLA_FLAGS"] = env["XLA_FLAGS"].replace("--xla_backend_optimization_level=0", "").strip()  # full speed
    argv = ["--task-seed", "31", "--num-tasks", "8", "--num-envs", "64", "--num-steps", "128", "--num-minibatches", "8",
            "--update-epochs", "8", "--total-timesteps", str(60 * 64 * 128), "--eval-every", "0",
            "--diagnostics-every", "0", "--updates-per-chunk", "10", "--progress", "none", "--runs-dir", str(tmp_path)]
    out = subprocess.run([sys.executable, SCRIPT] + argv, env=env, capture_output=True, text=True, timeout=3600)
    assert out.returncode == 0, out.stderr[-2000:]
    metrics = rows(run_dir_of(str(tmp_path)))

    def solved_fraction(first, last):
        episodes = [r for r in metrics if first <= r["iteration"] <= last and "charts/episodic_return" in r]
        return sum(r["charts/episodic_return"] > 0.5 for r in episodes) / len(episodes)  # +1 only for the goal
    assert solved_fraction(1, 10) < 0.03
    assert solved_fraction(51, 60) > 0.05


@pytest.mark.slow  # ten figure scripts, each run twice through the launcher and matplotlib (about 80 s)
def test_benchmark_scripts_draw_their_figures(runs, tmp_path):
    """Each of the nine Jax2D figure scripts and the Jax2D pilot draws its figures (PNG, PDF, CSV) from finished run directories
    in the exact format of this module's real tiny run (tests/jax2d_figures.py); the CSVs hold the known answers."""
    from jax2d_figures import draw_every_figure

    draw_every_figure(pathlib.Path(runs["diag"]), tmp_path)
