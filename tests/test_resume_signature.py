"""What a --resume may change, in every script that resumes (docs/run_directory.md, What a resume must match): each
flag that changes what a run computes, changed on resume, exits 2 with one line naming it, the checkpoint's value and the
given one, before anything is built; each run-length or bookkeeping flag may change; an older checkpoint, whose
signature records fewer flags, resumes under the flags it ran with; a torch checkpoint resumed into another network
exits 2 with one line.

Checkpoints are cheap: the torch scripts train one tiny iteration; the JAX scripts (whose first run compiles for
minutes) write theirs through their own save path with a placeholder state, which the check never reads."""
import dataclasses
import contextlib
import glob
import importlib
import io
import os
import pickle
import sys
import typing

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402

from cleanrl_scaling import (noisy_sgd, ppo_atari_envpool, ppo_continuous_mujoco, ppo_ewma_jax2d,  # noqa: E402
                             ppo_procgen, pqn_atari, sfl_kinetix_jax)
from inprocess import main_inprocess  # noqa: E402

MODULES = {m.SCRIPT: m for m in (ppo_atari_envpool, pqn_atari, ppo_procgen, ppo_continuous_mujoco, ppo_ewma_jax2d,
                                 sfl_kinetix_jax)}
TORCH = ("ppo_atari_envpool", "pqn_atari", "ppo_procgen", "ppo_continuous_mujoco")

# Each script's tiny configuration: one iteration of it is the checkpoint every test resumes
BASE = {
    "ppo_atari_envpool": ["--num-envs", "4", "--num-steps", "16", "--num-minibatches", "2", "--update-epochs", "2"],
    "pqn_atari": ["--num-envs", "2", "--num-steps", "8", "--num-minibatches", "2", "--update-epochs", "2",
                  "--eval-envs", "2"],
    "ppo_procgen": ["--env-id", "bigfish", "--num-envs", "1", "--num-steps", "64", "--num-minibatches", "2",
                    "--update-epochs", "2", "--eval-every", "0"],
    "ppo_continuous_mujoco": ["--env-id", "HalfCheetah-v4", "--num-envs", "2", "--num-steps", "32",
                              "--minibatch-size", "16", "--update-epochs", "2", "--diagnostics-states", "64"],
    "ppo_ewma_jax2d": ["--num-tasks", "8", "--num-envs", "8", "--num-steps", "16", "--num-minibatches", "2",
                       "--update-epochs", "2", "--hidden-size", "32", "--eval-attempts", "1"],
    "sfl_kinetix_jax": ["--no-sfl", "--network", "mlp", "--num-envs", "4", "--num-steps", "16",
                        "--num-minibatches", "2", "--update-epochs", "2", "--hidden-size", "16",
                        "--num-hidden-layers", "2", "--sfl-num-levels", "8", "--sfl-filter-batch", "4",
                        "--sfl-buffer-size", "4"],  # --no-sfl: so that --train-levels may be given
}
TORCH_COMMON = ["--no-compile", "--diagnostics-every", "0", "--progress", "none"]
JAX_COMMON = ["--diagnostics-every", "0", "--progress", "none", "--eval-every", "0"]
ITERATIONS = 4  # the runs' length: the checkpoint is at iteration 1

# The flags a resume may change: the run's length and its bookkeeping (names, paths, tracking, progress, checkpoints,
# diagnostics, evaluation on its own envs and keys, the process layout, the order the envs step in); every other flag
# must match
SHARED_RESUMABLE = {"total_timesteps", "exp_name", "track", "wandb_project_name", "wandb_entity", "runs_dir",
                    "save_model", "checkpoint_every", "resume", "progress", "diagnostics_every", "diagnostics_states",
                    "kl_profile"}
RESUMABLE = {
    "ppo_atari_envpool": {"eval_episodes", "save_features_every", "features_states", "init_from", "async_envs",
                          "env_threads"},
    "pqn_atari": {"eval_episodes", "eval_epsilon", "init_from", "async_envs", "env_threads"},
    "ppo_procgen": {"eval_every", "eval_episodes", "init_from", "env_threads"},
    "ppo_continuous_mujoco": {"eval_episodes", "init_from", "env_threads"},
    "ppo_ewma_jax2d": {"eval_every", "eval_attempts", "final_eval", "keep_checkpoints", "init_from"},
    "sfl_kinetix_jax": {"eval_every", "eval_random_levels", "eval_level_seed", "eval_attempts", "final_eval",
                        "distributed", "estimate_memory", "init_from"},
}
COMPUTED = {"batch_size", "num_iterations"}
# flags with no other valid value to resume with: --capture-video is refused on every run (no renderer), and
# ppo_ewma_jax2d knows one environment
NO_OTHER_VALUE = {script: {"capture_video"} | ({"env_id"} if script == "ppo_ewma_jax2d" else set()) for script in BASE}

# Another value for flags whose generic one (other_value) is not valid with the base configuration
OTHER = {
    "ppo_atari_envpool": {"env_id": "Pong-v5", "minibatch_size": 32},
    "pqn_atari": {"env_id": "Pong-v5", "minibatch_size": 8, "scaling_recipe": "larger-minibatches"},
    "ppo_procgen": {"env_id": "starpilot", "minibatch_size": 32, "num_envs": 2,
                    "scaling_recipe": "larger-minibatches"},
    "ppo_continuous_mujoco": {"env_id": "Hopper-v4", "num_minibatches": 2, "minibatch_size": 32},
    "ppo_ewma_jax2d": {"minibatch_size": 32, "scaling_recipe": "larger-minibatches"},
    "sfl_kinetix_jax": {"env_size": "m", "network": "transformer", "obs_dtype": "bfloat16", "preset": "2048",
                        "minibatch_size": 32, "scaling_recipe": "larger-minibatches", "num_envs": 8,
                        "sfl_num_levels": 16, "sfl_filter_batch": 8, "sfl_buffer_size": 2, "num_heads": 4,
                        "attention_size": 32, "train_levels": ("s/h4_thrust_aim",)},
}
TARGETS = [(script, f.name) for script, m in MODULES.items() for f in dataclasses.fields(m.Args)
           if f.name not in SHARED_RESUMABLE | RESUMABLE[script] | COMPUTED | NO_OTHER_VALUE[script]]
ALLOWED = [(script, name) for script in MODULES for name in sorted((SHARED_RESUMABLE | RESUMABLE[script]) - {"resume"})]


def base_argv(script: str, root) -> list:
    return BASE[script] + (TORCH_COMMON if script in TORCH else JAX_COMMON) + ["--runs-dir", str(root / "runs")]


def total_flag(script: str, iterations: int) -> list:
    """--total-timesteps of `iterations` batches of the base configuration."""
    argv = BASE[script]
    batch = int(argv[argv.index("--num-envs") + 1]) * int(argv[argv.index("--num-steps") + 1])
    return ["--total-timesteps", str(iterations * batch)]


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    """script -> its checkpoint at iteration 1, made on first use."""
    made = {}

    def get(script: str) -> str:
        if script not in made:
            root = tmp_path_factory.mktemp(script)
            made[script] = (train_one_iteration if script in TORCH else save_placeholder)(script, root)
        return made[script]
    return get


def train_one_iteration(script: str, root) -> str:
    threads = torch.get_num_threads()  # ppo_continuous_mujoco sets --torch-threads for the process
    try:
        code, _, err = main_inprocess(MODULES[script], base_argv(script, root) + total_flag(script, 1), root)
    finally:
        torch.set_num_threads(threads)
    assert code in (0, None), err[-3000:]
    (path,) = glob.glob(str(root / "runs" / "*" / "checkpoints" / "latest.ckpt"))
    return path


def save_placeholder(script: str, root) -> str:
    """The script's own read_args and save path, with a placeholder for the runner state."""
    m = MODULES[script]
    args, _, signature, _ = read_args(m, base_argv(script, root) + total_flag(script, ITERATIONS))
    run_dir = str(root / "runs" / "run")
    placeholder = {"params": np.zeros(3, np.float32)}
    if script == "ppo_ewma_jax2d":
        logger = m.RunLogger(run_dir, {}, args, 100)
        m.save_run_checkpoint(logger, args, signature, 1, 0.0, placeholder)
    else:
        clock = m.ChunkClock(args.batch_size, 0.0, 0.0)
        logger = m.active_time_logger(run_dir, {}, args, 100, None, clock)
        m.save_run_checkpoint(logger, args, signature, 1, clock, placeholder)
    logger.close({})
    return os.path.join(logger.run_dir, "checkpoints", "latest.ckpt")


def read_args(m, argv: list) -> tuple:
    """m.read_args() on argv; SystemExit carries the exit code and stderr."""
    old = sys.argv
    sys.argv = [m.__file__] + argv
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            return m.read_args()
    except SystemExit as e:
        e.stderr = err.getvalue()
        raise
    finally:
        sys.argv = old


def other_value(m, script: str, name: str, value):
    """A value of the flag other than `value`, valid with the base configuration."""
    if name in OTHER[script]:
        return OTHER[script][name]
    kind = typing.get_type_hints(m.Args)[name]
    if typing.get_origin(kind) is typing.Literal:
        return next(choice for choice in typing.get_args(kind) if choice != value)
    if isinstance(value, bool):
        return not value
    if value is None:  # Optional[float]: --target-kl
        return 0.02
    if isinstance(value, int):
        return 2 * value if value else 1
    if isinstance(value, float):
        return value / 2 if value else 0.5
    raise AssertionError(f"{script}: no other value for --{name} {value!r}; add one to OTHER")


def as_tokens(name: str, value) -> list:
    flag = "--" + name.replace("_", "-")
    if isinstance(value, bool):
        return [flag if value else flag.replace("--", "--no-", 1)]
    if isinstance(value, (list, tuple)):
        return [flag, *map(str, value)]
    return [flag, str(value)]


def recorded(path: str) -> dict:
    with open(path, "rb") as f:
        return pickle.load(f)


def test_the_lists_of_resumable_flags_are_the_scripts():
    """The allow-lists above and the scripts' agree, and noisy_sgd keeps no checkpoints at all."""
    assert set(ppo_atari_envpool.RESUMABLE_FLAGS) == SHARED_RESUMABLE
    for script, m in MODULES.items():
        assert set(m.RESUMABLE) == RESUMABLE[script], script
    assert not hasattr(noisy_sgd, "load_checkpoint")


@pytest.mark.parametrize("script, name", TARGETS)
def test_a_flag_that_changes_the_run_must_match_on_resume(script, name, checkpoints, tmp_path):
    m, path = MODULES[script], checkpoints(script)
    saved = recorded(path)["signature"][name]
    value = other_value(m, script, name, saved)
    argv = base_argv(script, tmp_path) + total_flag(script, ITERATIONS) + as_tokens(name, value) + ["--resume", path]
    with pytest.raises(SystemExit) as e:
        read_args(m, argv)
    lines = e.value.stderr.strip().splitlines()
    assert e.value.code == 2 and len(lines) == 1, lines
    if conflicts_alone(m, script, name, value, tmp_path):
        # a scaling flag that no run of the base configuration accepts (it conflicts with a flag the base sets, or is
        # read only by a recipe the base does not use) is refused by that check, resume or not; it is still recorded
        assert name.replace("_", "-") in lines[0] and "the checkpoint has" not in lines[0], lines
        assert not (tmp_path / "runs").exists()
        return
    given = list(value) if isinstance(value, tuple) else value
    assert f"the checkpoint has {name}={saved!r} but this run has {given!r}" in lines[0]
    assert f"pass {m.as_flag(name, saved)} to resume it, or " in lines[0]
    assert f"or --init-from {path} instead of --resume" in lines[0]  # every script starts a new run from old weights
    assert not (tmp_path / "runs").exists()  # nothing was built or written


def conflicts_alone(m, script: str, name: str, value, tmp_path) -> bool:
    """Whether the base configuration with --NAME VALUE and no --resume is refused as a usage error."""
    if name not in ("minibatch_size", "num_minibatches", "base_num_envs", "minibatch_multiplier"):
        return False
    argv = base_argv(script, tmp_path / "alone") + total_flag(script, ITERATIONS) + as_tokens(name, value)
    try:
        read_args(m, argv)
    except SystemExit as e:
        return e.code == 2
    return False


@pytest.mark.parametrize("script, name", ALLOWED)
def test_a_run_length_or_bookkeeping_flag_may_change_on_resume(script, name, checkpoints, tmp_path, monkeypatch):
    m, path = MODULES[script], checkpoints(script)
    state = recorded(path)
    saved = state["args"][name]
    value = {"total_timesteps": int(total_flag(script, ITERATIONS + 4)[1]), "runs_dir": str(tmp_path / "elsewhere"),
             "exp_name": "renamed", "wandb_project_name": "other", "wandb_entity": "someone",
             "init_from": path, "keep_checkpoints": (2, 3)}.get(name)
    if value is None:
        value = other_value(m, script, name, saved)
    if name == "distributed":  # joining other processes is not what this test is about
        monkeypatch.setattr(m, "init_distributed", lambda: None)
    argv = base_argv(script, tmp_path) + total_flag(script, ITERATIONS) + as_tokens(name, value) + ["--resume", path]
    args, _, signature, ckpt = read_args(m, argv)
    assert ckpt["iteration"] == state["iteration"] and getattr(args, name) == value
    assert signature == state["signature"]


def test_the_checkpoint_records_the_flags_as_given_not_as_resolved(checkpoints):
    """The scaling writes the resolved minibatches into args: --minibatch-size 16 decides 64 / 16 = 4 where 32 (the
    default) were given. The signature keeps the 32 given, so the same command line resumes (test above)."""
    state = recorded(checkpoints("ppo_continuous_mujoco"))
    assert state["args"]["num_minibatches"] == 4 and state["signature"]["num_minibatches"] == 32


# ---------------------------------------------------------------------------------------------------------
# Older checkpoints: their signature records fewer flags; their args record every flag they ran with, resolved
# ---------------------------------------------------------------------------------------------------------
OLD_ATARI_KEYS = ("env_id", "separate_encoders", "num_envs", "num_steps")  # the signature before every flag joined


def older_checkpoint(path: str, dst, args_update=None, drop=()) -> str:
    state = recorded(path)
    state["signature"] = {k: state["signature"][k] for k in OLD_ATARI_KEYS}
    state["args"].update(args_update or {})
    for name in drop:
        del state["args"][name]
    out = dst / "older.ckpt"
    out.write_bytes(pickle.dumps(state))
    return str(out)


def atari_resume(path: str, root, *flags) -> tuple:
    argv = base_argv("ppo_atari_envpool", root) + total_flag("ppo_atari_envpool", ITERATIONS) + list(flags)
    return read_args(ppo_atari_envpool, argv + ["--resume", path])


def refusal(path: str, root, *flags) -> str:
    with pytest.raises(SystemExit) as e:
        atari_resume(path, root, *flags)
    assert e.value.code == 2
    (line,) = e.value.stderr.strip().splitlines()
    return line


def test_an_older_checkpoint_resumes_under_the_flags_it_ran_with(checkpoints, tmp_path):
    old = older_checkpoint(checkpoints("ppo_atari_envpool"), tmp_path)
    assert atari_resume(old, tmp_path)[3]["iteration"] == 1
    # flags its signature did not record are read from its args
    assert "the checkpoint has learning_rate=0.00025 but this run has 0.0001" in refusal(old, tmp_path,
                                                                                         "--learning-rate", "1e-4")
    assert "pass --seed 1 " in refusal(old, tmp_path, "--seed", "2")
    # a flag newer than the checkpoint (absent from its args) stands for its default
    newer = older_checkpoint(checkpoints("ppo_atari_envpool"), tmp_path, drop=("cleanrl_compat",))
    assert atari_resume(newer, tmp_path)[3]["iteration"] == 1
    assert "cleanrl_compat=False but this run has True" in refusal(newer, tmp_path, "--cleanrl-compat")


def test_an_older_checkpoint_with_a_recipe_compares_its_resolved_lr(checkpoints, tmp_path):
    """Its args hold the lr the recipe resolved (sqrt-lr at 4 of 8 base envs: x sqrt(1/2)); the same flags resolve
    to it and resume, another --learning-rate does not."""
    recipe = ["--scaling-recipe", "sqrt-lr", "--base-num-envs", "8", "--num-minibatches", "4"]
    args, scaling, _, _ = atari_resume_args(tmp_path, recipe)
    assert scaling["learning_rate"] != 2.5e-4  # the recipe changed it
    old = older_checkpoint(checkpoints("ppo_atari_envpool"), tmp_path, args_update={
        **{k: getattr(args, k) for k in ("scaling_recipe", "base_num_envs")},
        "learning_rate": scaling["learning_rate"], "num_minibatches": scaling["num_minibatches"]})
    assert atari_resume(old, tmp_path, *recipe)[3]["iteration"] == 1
    line = refusal(old, tmp_path, *recipe, "--learning-rate", "1e-4")
    assert f"the checkpoint has learning_rate={scaling['learning_rate']!r} but this run has 0.0001" in line


def atari_resume_args(root, flags):
    """read_args of a new run (no --resume) with flags: the resolved configuration they give."""
    argv = base_argv("ppo_atari_envpool", root) + total_flag("ppo_atari_envpool", ITERATIONS) + flags
    return read_args(ppo_atari_envpool, argv)


# ---------------------------------------------------------------------------------------------------------
# Another network: one line, exit 2, nothing written
# ---------------------------------------------------------------------------------------------------------
NETWORK_CLASS = {"ppo_atari_envpool": "Agent", "pqn_atari": "QNetwork", "ppo_procgen": "Agent",
                 "ppo_continuous_mujoco": "Agent"}


@pytest.mark.parametrize("script", TORCH)
def test_a_torch_checkpoint_resumed_into_another_network_exits_2(script, checkpoints, tmp_path, monkeypatch):
    m, path = MODULES[script], checkpoints(script)
    original = getattr(m, NETWORK_CLASS[script])

    class Wider(original):  # the same network with one more layer: a class edited since the checkpoint
        def __init__(self, *a, **k):
            super().__init__(*a, **k)
            self.extra = nn.Linear(3, 3)
    monkeypatch.setattr(m, NETWORK_CLASS[script], Wider)
    metrics = os.path.join(os.path.dirname(os.path.dirname(path)), "metrics.jsonl")
    before = open(metrics).read()
    threads = torch.get_num_threads()
    try:
        code, _, err = main_inprocess(m, base_argv(script, tmp_path) + total_flag(script, ITERATIONS)
                                      + ["--resume", path], tmp_path)
    finally:
        torch.set_num_threads(threads)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, err[-2000:]
    assert "--resume: the checkpoint holds another network's weights (2 of this network's tensors missing" in lines[0]
    assert open(metrics).read() == before  # the run directory is untouched


def numpy_core() -> str:
    """This NumPy's name for its core package (NumPy 2 renamed numpy.core to numpy._core)."""
    return "numpy.core" if np.__version__.startswith("1.") else "numpy._core"


class OtherNumpyArray:
    """Pickles as an array written under the other NumPy major version: one that names _frombuffer's module as that
    version does (numpy._core.numeric under NumPy 2, numpy.core.numeric under NumPy 1)."""

    def __init__(self, array):
        self.array = array

    def __reduce__(self):
        a = self.array
        frombuffer = importlib.import_module(numpy_core() + ".numeric")._frombuffer
        return frombuffer, (a.tobytes(), a.dtype, a.shape, "C")


def other_numpy_pickle(state: dict) -> bytes:
    """`state` pickled (protocol 2: module names as plain text lines) as the other NumPy major version writes it."""
    ours = numpy_core()
    other = {"numpy.core": "numpy._core", "numpy._core": "numpy.core"}[ours]
    data = pickle.dumps(state, protocol=2)
    assert f"c{ours}.numeric\n_frombuffer\n".encode() in data
    return data.replace(f"c{ours}.numeric\n".encode(), f"c{other}.numeric\n".encode())


@pytest.mark.parametrize("script", sorted(MODULES))
def test_a_checkpoint_written_under_the_other_numpy_major_version_loads(script, tmp_path):
    """A run's checkpoint moves between machines with NumPy 1 and NumPy 2 (a GPU image's NumPy 2, this pinned set's
    1.26): NumPy 1.26 has no numpy._core.numeric, so a plain pickle.load fails there."""
    weights = np.arange(6, dtype=np.float32).reshape(2, 3)
    path = tmp_path / "latest.ckpt"
    path.write_bytes(other_numpy_pickle({"script": script, "weights": OtherNumpyArray(weights)}))
    state = MODULES[script].load_checkpoint(str(path), script, {})
    np.testing.assert_array_equal(state["weights"], weights)
    assert state["weights"].dtype == np.float32
