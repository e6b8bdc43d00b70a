"""Noisy gradient descent on x^T x: B26's (beukman2026) stochastic-optimization model of PPO's outer loop (App. A;
Figs. 1b, 2a, 3b), with the closed-form plateau it reaches. All seeds run as one numpy batch; every seed gets its
own run directory.

    python cleanrl_scaling/noisy_sgd.py --learning-rate 0.1 --total-steps 1000 --num-seeds 5

Docs: docs/noisy_sgd.md. Read top to bottom: Args, the closed form, the descent, main; below the marked line, the
infrastructure every script shares.
"""
import dataclasses
import json
import math
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Literal, Optional

import numpy as np
import tyro


# >>> shared:run-args
@dataclass
class RunArgs:
    exp_name: str = os.path.basename(__file__)[: -len(".py")]
    """the name of this experiment"""
    seed: int = 1
    """seed of the experiment"""
    track: bool = False
    """if toggled, mirror the run to Weights and Biases (set WANDB_MODE=offline to work without an account)"""
    wandb_project_name: str = "cleanrl_scaling"
    """the wandb's project name"""
    wandb_entity: Optional[str] = None
    """the entity (team) of wandb's project"""
    runs_dir: str = "runs"
    """where run directories are created"""
    save_model: bool = False
    """if toggled, save the final model to the run directory and evaluate it"""
    checkpoint_every: int = 0
    """write a checkpoint every K iterations (0 = only at the end and on SIGINT/SIGTERM)"""
    resume: Optional[str] = None
    """path of a checkpoint to resume from (continues in that checkpoint's run directory)"""
    progress: Literal["auto", "bar", "lines", "none"] = "auto"
    """progress display: a bar on a terminal, plain periodic lines otherwise (auto)"""
# <<< shared:run-args


@dataclass
class Args(RunArgs):
    dim: int = 50
    """dimension d of x (B26 App. A: 50)"""
    learning_rate: float = 0.1
    """step size alpha of gradient descent"""
    noise_std: Optional[float] = None
    """std of the Gaussian noise added to every gradient coordinate (default 3/sqrt(dim), B26 App. A's 3/sqrt(50))"""
    total_steps: int = 1000
    """number of gradient steps"""
    num_seeds: int = 5
    """seeds --seed, --seed+1, ... simulated together as one batch (B26 App. A.1 uses five)"""
    x0: float = 1.0
    """every coordinate of the starting point, so the initial distance is x0 * sqrt(dim)"""
    switch_step: int = 0
    """after this many steps the step size becomes --switch-learning-rate (0 = never; B26 Fig. 3b)"""
    switch_learning_rate: float = 0.0
    """the step size after --switch-step"""
    log_every: int = 5
    """log every K steps (and the start and the last step)"""
    log_seeds: int = -1
    """write run directories for the first K seeds only (-1 = all); the printed plateau check uses every seed"""


SCRIPT = "noisy_sgd"


# ---------------------------------------------------------------------------------------------------------
# Closed form of the plateau (derivation: docs/noisy_sgd.md)
# x_{t+1} = x_t - a (2 x_t + s xi_t) = (1 - 2a) x_t - a s xi_t,  xi_t ~ N(0, I_d)
# ---------------------------------------------------------------------------------------------------------
def default_noise_std(dim: int) -> float:
    return 3.0 / math.sqrt(dim)  # B26 App. A: 3/sqrt(50) for d = 50, i.e. E||noise||^2 = 9 for every d


def chi_mean(dim: int) -> float:
    """E||z|| for z ~ N(0, I_dim): the mean of the chi distribution, sqrt(2) Gamma((d+1)/2) / Gamma(d/2)."""
    return math.sqrt(2.0) * math.exp(math.lgamma((dim + 1) / 2) - math.lgamma(dim / 2))


def stationary_variance(lr: float, noise_std: float) -> float:
    """Per-coordinate variance v of the stationary x: v = (1-2a)^2 v + a^2 s^2, so v = a s^2 / (4 (1 - a))."""
    if not 0 < lr < 1:
        return math.inf  # |1 - 2a| >= 1: no stationary distribution
    return lr * noise_std**2 / (4.0 * (1.0 - lr))


def plateau(lr: float, noise_std: float, dim: int) -> dict:
    """Stationary x ~ N(0, v I_d): E||x - x*||^2 = d v and ||x - x*|| / sqrt(v) ~ chi_d (x* = 0).
    The update a (2x + s xi) is N(0, a^2 (4v + s^2) I_d) = N(0, a^2 s^2 / (1 - a) I_d) at stationarity."""
    v = stationary_variance(lr, noise_std)
    if math.isinf(v):
        return {"sq_distance": math.inf, "distance": math.inf, "update_size": math.inf}
    update_scale = lr * noise_std / math.sqrt(1.0 - lr)
    return {"sq_distance": dim * v, "distance": math.sqrt(v) * chi_mean(dim),
            "update_size": update_scale * chi_mean(dim)}


def expected_sq_distance(lrs: np.ndarray, noise_std: float, dim: int, x0: float) -> np.ndarray:
    """Exact E||x_t - x*||^2 for t = 0..len(lrs) under any step-size schedule: every coordinate has mean
    m_{t+1} = (1 - 2a_t) m_t and variance v_{t+1} = (1 - 2a_t)^2 v_t + a_t^2 s^2."""
    m, v = float(x0), 0.0
    out = [dim * m * m]
    for a in lrs:
        m, v = (1 - 2 * a) * m, (1 - 2 * a) ** 2 * v + a * a * noise_std**2
        out.append(dim * (m * m + v))
    return np.asarray(out)


# ---------------------------------------------------------------------------------------------------------
# Validation, seeding, the problem
# ---------------------------------------------------------------------------------------------------------
def validate(args) -> dict:
    """Every user mistake is caught here, before anything is simulated or written
    (docs/run_directory.md#failure-behaviour)."""
    check_finite_floats(args)
    check(args.dim >= 1, f"--dim must be >= 1 (got {args.dim})")
    check(args.learning_rate > 0, f"--learning-rate must be > 0 (got {args.learning_rate})")
    check(args.noise_std is None or args.noise_std >= 0, f"--noise-std must be >= 0 (got {args.noise_std})")
    check(args.total_steps >= 1, f"--total-steps must be >= 1 (got {args.total_steps})")
    check(args.num_seeds >= 1, f"--num-seeds must be >= 1 (got {args.num_seeds})")
    check(args.seed >= 0, f"--seed must be >= 0 (got {args.seed}); numpy seeds are non-negative")
    check(args.log_every >= 1, f"--log-every must be >= 1 (got {args.log_every})")
    check(args.log_seeds >= -1, f"--log-seeds must be -1 (all) or >= 0 (got {args.log_seeds})")
    check(0 <= args.switch_step < args.total_steps,
          f"--switch-step must lie in [0, --total-steps) = [0, {args.total_steps}) (got {args.switch_step}); "
          "0 = no switch")
    check(args.switch_step == 0 or args.switch_learning_rate > 0,
          f"--switch-step {args.switch_step} needs --switch-learning-rate > 0 (got {args.switch_learning_rate})")
    check(args.switch_step > 0 or args.switch_learning_rate == 0,
          "--switch-learning-rate is only used with --switch-step > 0; pass both or neither")
    check(args.resume is None, "--resume: noisy_sgd runs in seconds and keeps no checkpoints; rerun it instead")
    check(args.checkpoint_every == 0, "--checkpoint-every: noisy_sgd keeps no checkpoints; leave it at 0")
    noise_std = default_noise_std(args.dim) if args.noise_std is None else args.noise_std
    final_lr = args.switch_learning_rate if args.switch_step else args.learning_rate
    return {"env_id": f"NoisyQuadratic-d{args.dim}", "noise_std": noise_std, "final_learning_rate": final_lr,
            "initial_distance": abs(args.x0) * math.sqrt(args.dim),
            "plateau": plateau(final_lr, noise_std, args.dim)}


def lr_at(step: int, args) -> float:
    """Step size of update step+1 (steps count from 0); --switch-step changes it mid-run (B26 Fig. 3b)."""
    return args.switch_learning_rate if args.switch_step and step >= args.switch_step else args.learning_rate


def divergence_advice(step: int, lr: float, args) -> str:
    """The flag to change after x overflowed at `step`: the one that set the step size in force then (after
    --switch-step it is --switch-learning-rate, not --learning-rate); below 1, the noise or the start."""
    if lr < 1:
        return "lower --noise-std or --x0"
    return "lower --switch-learning-rate" if args.switch_step and step - 1 >= args.switch_step else "lower --learning-rate"


def noise_chunks(seeds: list, dim: int, total_steps: int):
    """Standard normal noise [steps, seeds, dim] in chunks of ~16 MB. Each seed draws from its own generator, so a
    seed's trajectory is the same whatever other seeds share its batch."""
    rngs = [np.random.default_rng(s) for s in seeds]
    chunk = max(1, min(total_steps, 2**21 // (len(seeds) * dim)))
    for start in range(0, total_steps, chunk):
        size = min(chunk, total_steps - start)
        yield start, np.stack([rng.standard_normal((size, dim)) for rng in rngs], axis=1)


def descend(x: np.ndarray, seeds: list, noise_std: float, args):
    """Noisy gradient descent on x^T x for every seed at once (rows of x). Yields (step, x, grad, lr) after every
    --log-every steps and after the last one; grad is the noisy gradient of that step."""
    for start, xi in noise_chunks(seeds, x.shape[1], args.total_steps):
        for j in range(xi.shape[0]):
            lr = lr_at(start + j, args)
            grad = 2.0 * x + noise_std * xi[j]  # B26 App. A: the gradient of x^T x is 2x, plus N(0, s^2 I) noise
            x = x - lr * grad
            step = start + j + 1
            if step % args.log_every == 0 or step == args.total_steps:
                yield step, x, grad, lr


def mean_with_ci(values: np.ndarray) -> str:
    """Mean over seeds with its 95% confidence interval; one seed has none, which is said, not printed as nan."""
    if len(values) < 2:
        return f"{values.mean():.5g} (one seed: no confidence interval; --num-seeds 2 or more gives one)"
    ci = 1.96 * values.std(ddof=1) / math.sqrt(len(values))
    return f"{values.mean():.5g} +- {ci:.2g} (95% CI over {len(values)} seeds)"


# ---------------------------------------------------------------------------------------------------------
# Main: args -> validation -> run directories -> loop (gradient step, diagnostics, logging) -> summary
# ---------------------------------------------------------------------------------------------------------
def open_runs(args, resolved: dict, logged: list) -> list:
    """One run directory per logged seed, each complete (docs/run_directory.md); the aggregation averages over them."""
    env_id = resolved["env_id"]
    commit, versions = git_commit(), package_versions()
    loggers = []
    for i, seed in enumerate(logged):
        seed_args = dataclasses.replace(args, seed=seed, progress=args.progress if i == 0 else "none")
        run_dir = os.path.join(args.runs_dir, f"{env_id}__{args.exp_name}__{seed}__{int(time.time())}")
        config = {"args": dataclasses.asdict(seed_args), "resolved": resolved, "env_id": env_id, "argv": sys.argv[1:],
                  "versions": versions, "git_commit": commit, "script": SCRIPT}
        loggers.append(RunLogger(run_dir, config, seed_args, args.total_steps, headline="charts/neg_distance"))
    return loggers


def print_plateau_check(args, resolved: dict, step: int, distance: np.ndarray) -> None:
    """The closed-form plateau against every seed's final distance, and a note when the run was too short."""
    target = resolved["plateau"]
    schedule = np.array([lr_at(t, args) for t in range(step)])
    transient = expected_sq_distance(schedule, resolved["noise_std"], args.dim, args.x0)[-1] - target["sq_distance"]
    print(f"plateau (step size {resolved['final_learning_rate']:g}): closed form E||x - x*|| = "
          f"{target['distance']:.5g}, E||x - x*||^2 = {target['sq_distance']:.5g}; simulated ||x_T - x*|| = "
          f"{mean_with_ci(distance)}")
    if abs(transient) > 0.01 * target["sq_distance"]:
        print(f"note: {step} steps are too few to reach the plateau from x0 (E||x_T||^2 is still "
              f"{transient:+.3g} from it); raise --total-steps")


def main():
    args = tyro.cli(Args, description=help_description(__doc__))
    try:
        resolved = validate(args)
        if args.log_seeds != 0:  # --log-seeds 0 writes nothing
            check_writable_dir(args.runs_dir, "--runs-dir")
    except UsageError as e:
        exit_usage(e)
    env_id, noise_std, target = resolved["env_id"], resolved["noise_std"], resolved["plateau"]
    seeds = list(range(args.seed, args.seed + args.num_seeds))
    logged = seeds if args.log_seeds < 0 else seeds[: args.log_seeds]
    print(f"resolved: env_id={env_id}, noise_std={noise_std:.6g}, seeds={seeds[0]}..{seeds[-1]}, "
          f"initial distance={resolved['initial_distance']:.6g}, closed-form plateau distance={target['distance']:.6g}")

    loggers = open_runs(args, resolved, logged)
    stop = StopFlag()

    def log(step: int, x: np.ndarray, grad: Optional[np.ndarray], lr: float) -> None:
        distance = np.linalg.norm(x[: len(loggers)], axis=1)  # x* = 0
        grad_norm = None if grad is None else np.linalg.norm(grad[: len(loggers)], axis=1)
        for i, logger in enumerate(loggers):
            scalars = {"charts/neg_distance": -distance[i], "charts/learning_rate": lr}  # B26 plots -||x - x*||
            if grad_norm is not None:  # B26 Fig. 2a: the size of the update that produced x_t
                scalars.update({"diagnostics/update_size": lr * grad_norm[i], "diagnostics/grad_norm": grad_norm[i]})
            logger.log(step, step, scalars)

    x = last_finite = np.full((len(seeds), args.dim), float(args.x0))
    log(0, x, None, lr_at(0, args))
    status, step, start_time = "finished", 0, time.time()
    with np.errstate(over="ignore", invalid="ignore"):
        for step, x, grad, lr in descend(x, seeds, noise_std, args):
            if not np.isfinite(np.linalg.norm(x, axis=1)).all():  # ||x|| overflows long before x does
                status = "diverged"
                print(f"error: x is no longer finite at step {step} (step size {lr:g}; only step sizes below 1 have a "
                      f"plateau); {divergence_advice(step, lr, args)}", file=sys.stderr)
                break
            last_finite = x
            log(step, x, grad, lr)
            if loggers and loggers[0].mode == "bar":  # a bar on a terminal; plain lines are pointless for seconds
                loggers[0].progress(step, step / max(time.time() - start_time, 1e-9))
            if stop.signum:
                status = "interrupted"
                break
    elapsed = time.time() - start_time

    # Summary: each run directory, then the plateau check over every seed
    distance = np.linalg.norm(last_finite, axis=1)
    for i, logger in enumerate(loggers):
        summary = {"status": status, "global_step": step, "iteration": step,
                   "final_neg_distance": float(-distance[i]), "closed_form_neg_distance": -target["distance"]}
        if args.save_model and status == "finished":
            with open(os.path.join(logger.run_dir, f"{args.exp_name}.cleanrl_model"), "wb") as f:
                np.save(f, x[i])  # the "model" is the final point x_T
        logger.close(summary)
    print(f"{len(seeds)} seeds x {step} steps in {elapsed:.2f}s; {len(loggers)} run directories in {args.runs_dir}")
    if status == "finished" and math.isfinite(target["distance"]):
        print_plateau_check(args, resolved, step, distance)
    if status == "diverged":
        sys.exit(3)
    if status == "interrupted":
        sys.exit(128 + stop.signum)


# ===== Shared infrastructure: identical in every script, checked by cleanrl_scaling.utils.shared_blocks =====
# >>> shared:errors
class UsageError(Exception):
    """A user mistake: reported as one line on stderr and exit code 2, never a traceback."""


def exit_usage(err: Exception) -> None:
    print(f"error: {err}", file=sys.stderr)
    sys.exit(2)


def check(condition: bool, message: str) -> None:
    if not condition:
        raise UsageError(message)


def check_finite_floats(args) -> None:
    """inf or nan in any float flag (--ent-coef inf) would train, then stop on a NaN loss: refuse it up front."""
    for field in dataclasses.fields(args):
        value = getattr(args, field.name)
        if isinstance(value, float):
            check(math.isfinite(value), f"--{field.name.replace('_', '-')} must be a finite number (got {value})")
# <<< shared:errors


# >>> shared:help
PAPERS = """The papers the flags cite:
- B26 = Beukman et al. 2026, Preventing Learning Stagnation in PPO by Scaling to 1 Million Parallel Environments, https://arxiv.org/abs/2603.06009
- M25 = Mayor et al. 2025, The Impact of On-Policy Parallelized Data Collection on Deep Reinforcement Learning Networks (ICML 2025), https://arxiv.org/abs/2506.03404
- H25 = Honari et al. 2025, Training PPO-Clip with Parallelized Data Generation: A Case of Fixed-Point Convergence (RLC 2025 workshop), https://openreview.net/forum?id=R9AudTtTIH"""


def help_description(doc: str) -> str:
    """The text --help prints above the flags: the script's docstring, each paragraph on one line (tyro would break
    one before a line that starts with "(" or "§"), then the papers B26, M25 and H25 by name."""
    paragraphs = [" ".join(line.strip() for line in block.splitlines()) for block in doc.strip().split("\n\n")]
    return "\n\n".join(paragraphs + [PAPERS])
# <<< shared:help


# >>> shared:rundir
def package_versions() -> dict:
    from importlib import metadata
    names = ["torch", "numpy", "gymnasium", "envpool", "ale-py", "mujoco", "jax", "flax", "optax", "kinetix-env", "tyro"]
    found = {}
    for name in names:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return found


def git_commit() -> Optional[str]:
    try:
        here = os.path.dirname(os.path.abspath(__file__))
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=here, capture_output=True, text=True, timeout=5)
        return out.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def atomic_write(path: str, data: bytes) -> None:
    """Temp file + fsync + rename: a kill -9 at any moment leaves either the old or the new file
    (docs/run_directory.md#checkpoints-and-resume). A write that fails (a full disk, a quota) removes its temp file:
    the old file stays, and no half-written copy keeps the space."""
    tmp = f"{path}.tmp{os.getpid()}"
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.remove(tmp)
        except OSError:
            pass
        raise


def check_writable_dir(path: str, flag: str) -> None:
    """Create `path` if needed and write a file in it: an impossible --runs-dir (under /proc, a file, read-only)
    is then one line and exit 2 before anything heavy starts (docs/run_directory.md#failure-behaviour), not a traceback
    after the envs are built."""
    try:
        os.makedirs(path, exist_ok=True)
        probe = os.path.join(path, f".write_test{os.getpid()}")
        with open(probe, "wb"):
            pass
        os.remove(probe)
    except OSError as e:
        raise UsageError(f"{flag}: cannot write to {path} ({e.strerror or e}); pass a directory you can write to")


def announce_run(run_dir: str) -> None:
    """At start, not only at the end: where the run writes, and the command that shows its curves while it trains."""
    print(f"run directory: {run_dir}\nwatch it train: tensorboard --logdir {os.path.dirname(run_dir) or '.'}", flush=True)


def claim_run_dir(path: str) -> str:
    """A new run directory, even when two runs with the same name start in the same second (suffix -2, -3…)."""
    candidate, k = path, 1
    while True:
        try:
            os.makedirs(candidate)
            return candidate
        except FileExistsError:
            k += 1
            candidate = f"{path}-{k}"


# The append-only logs: a resumed run cuts them back to what they held when its checkpoint was written
LOG_FILES = ("metrics.jsonl", "kl_profile.jsonl")


def cut_logs(run_dir: str, ckpt: dict) -> None:
    """A resumed run replaces what followed its checkpoint: each log cut to its size when the checkpoint was written
    (which also drops rows of the checkpoint's own iteration logged after it, and a line torn by a kill). A checkpoint
    without recorded sizes (older ones) keeps the rows up to its iteration, and drops a torn line."""
    sizes = ckpt.get("log_sizes")
    for name in LOG_FILES:
        path = os.path.join(run_dir, name)
        if not os.path.exists(path):
            continue
        if sizes is not None:
            with open(path, "rb") as f:
                kept = f.read(sizes.get(name, 0))
        else:
            with open(path) as f:
                kept = "".join(line for line in f if row_up_to(line, ckpt["iteration"])).encode()
        atomic_write(path, kept)


def row_up_to(line: str, iteration: int) -> bool:
    try:
        return json.loads(line).get("iteration", 0) <= iteration
    except ValueError:  # blank, or torn by a kill in the middle of a write
        return False


class RunLogger:
    """metrics.jsonl + TensorBoard (+ W&B with --track) + a progress bar or plain lines (docs/run_directory.md)."""

    def __init__(self, run_dir: str, config: dict, args, total_steps: int, resumed: Optional[dict] = None,
                 headline: str = "charts/episodic_return"):
        """resumed: the checkpoint a resumed run continues (its run directory, logs cut back to it); None: a new run."""
        self.run_dir = run_dir = claim_run_dir(run_dir) if resumed is None else run_dir
        os.makedirs(os.path.join(run_dir, "checkpoints"), exist_ok=True)
        atomic_write(os.path.join(run_dir, "config.json"), json.dumps(config, indent=2, default=str).encode())
        if resumed is not None:
            cut_logs(run_dir, resumed)
        self.metrics = open(os.path.join(run_dir, "metrics.jsonl"), "a")
        self.kl_profile = None
        from tensorboard.summary import Writer
        self.tb = Writer(run_dir)
        self.wandb = None
        if args.track:
            import wandb
            self.wandb = wandb.init(project=args.wandb_project_name, entity=args.wandb_entity, config=config,
                                    name=os.path.basename(run_dir), dir=run_dir, resume="allow")
        self.t0 = time.time()
        self.total_steps = total_steps
        self.headline, self.last_headline = headline, None  # the tag the progress display shows, and its last value
        mode = args.progress
        if mode == "auto":
            mode = "bar" if sys.stderr.isatty() else "lines"
        self.bar = None  # made at the first progress(): the start-up lines print before it, not through it
        self.mode, self.last_line = mode, 0.0

    def wall_clock(self) -> float:
        """A row's wall_time (a script that tracks active time across resumes overrides this)."""
        return time.time()

    def log(self, step: int, iteration: int, scalars: dict) -> None:
        row = {"global_step": int(step), "iteration": int(iteration), "wall_time": self.wall_clock()}
        row.update({k: float(v) for k, v in scalars.items()})
        self.metrics.write(json.dumps(row) + "\n")
        for tag, value in scalars.items():
            self.tb.add_scalar(tag, float(value), int(step))
        if self.wandb is not None:
            self.wandb.log({**scalars, "global_step": step})
        if self.headline in scalars:
            self.last_headline = float(scalars[self.headline])

    def log_profile(self, row: dict) -> None:
        if self.kl_profile is None:
            self.kl_profile = open(os.path.join(self.run_dir, "kl_profile.jsonl"), "a")
        self.kl_profile.write(json.dumps(row) + "\n")

    def headline_text(self) -> str:
        """The headline's last value; before the first one, that none has come yet (a NaN says nothing)."""
        name = "return" if self.headline == "charts/episodic_return" else self.headline.split("/")[-1]
        if self.last_headline is None:
            return "no episode finished yet" if name == "return" else f"no {name} yet"
        return f"{name} {self.last_headline:.2f}"

    def progress(self, step: int, sps: float) -> None:
        if self.mode == "bar" and self.bar is None:
            from tqdm import tqdm
            self.bar = tqdm(total=self.total_steps, unit="step", dynamic_ncols=True, smoothing=0.1)
        if self.bar is not None:
            self.bar.n = min(step, self.total_steps)
            self.bar.set_postfix_str(f"SPS {sps:.0f}, {self.headline_text()}", refresh=False)
            self.bar.refresh()
        elif self.mode == "lines" and time.time() - self.last_line > 10:
            self.last_line = time.time()
            print(f"step {step}/{self.total_steps} SPS {sps:.0f}, {self.headline_text()}", flush=True)

    def log_sizes(self) -> dict:
        """The logs' sizes once flushed: what a resume from a checkpoint written now keeps (a checkpoint's log_sizes)."""
        self.flush()
        return {name: os.path.getsize(path) for name in LOG_FILES
                if os.path.exists(path := os.path.join(self.run_dir, name))}

    def flush(self) -> None:
        self.metrics.flush()
        if self.kl_profile is not None:
            self.kl_profile.flush()
        self.tb.flush()

    def close(self, summary: dict) -> None:
        atomic_write(os.path.join(self.run_dir, "summary.json"), json.dumps(summary, indent=2).encode())
        if self.bar is not None:
            self.bar.close()
        self.flush()
        self.metrics.close()
        if self.kl_profile is not None:
            self.kl_profile.close()
        self.tb.close()
        if self.wandb is not None:
            self.wandb.finish()


class StopFlag:
    """SIGINT/SIGTERM (Ctrl-C, Slurm preemption) set a flag; the loop checkpoints and exits at a safe point."""

    def __init__(self):
        self.signum = 0
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, self._handle)

    def _handle(self, signum, frame):
        if self.signum:  # a second signal: stop now
            raise KeyboardInterrupt
        self.signum = signum
        text = f"\nreceived {signal.Signals(signum).name}: finishing this iteration, then checkpointing\n"
        try:
            sys.stderr.write(text)
        except RuntimeError:  # it interrupted a write to a buffered (wrapped) stderr, which a write here re-enters
            try:
                os.write(2, text.encode())
            except OSError:  # nowhere to say it; the flag is what stops the run
                pass
# <<< shared:rundir


if __name__ == "__main__":
    main()
