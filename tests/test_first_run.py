"""What a newcomer meets first: --help (a description that names the papers, no computed fields, each flag's text in one
piece) and a first run that says where it writes and what it is doing before the first rollout."""
import importlib
import os
import re
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from inprocess import main_inprocess  # noqa: E402

ALL = ["ppo_atari_envpool", "pqn_atari", "ppo_procgen", "ppo_continuous_mujoco", "ppo_ewma_jax2d", "sfl_kinetix_jax",
       "noisy_sgd"]
WITH_COMPUTED_FIELDS = ["ppo_atari_envpool", "pqn_atari", "ppo_procgen", "ppo_continuous_mujoco", "ppo_ewma_jax2d",
                        "sfl_kinetix_jax"]
TORCH = {  # script -> the arguments of two tiny iterations
    "ppo_atari_envpool": ["--num-envs", "4", "--num-steps", "16", "--num-minibatches", "2", "--update-epochs", "1"],
    "pqn_atari": ["--num-envs", "2", "--num-steps", "8", "--num-minibatches", "2", "--update-epochs", "1",
                  "--eval-envs", "2"],
    "ppo_procgen": ["--env-id", "bigfish", "--num-envs", "1", "--num-steps", "64", "--num-minibatches", "2",
                    "--update-epochs", "1"],
    "ppo_continuous_mujoco": ["--env-id", "HalfCheetah-v4", "--num-envs", "2", "--num-steps", "32",
                              "--minibatch-size", "16", "--update-epochs", "1"],
}


def help_text(script, tmp_path, monkeypatch) -> str:
    """--help as the script prints it, on a terminal wide enough that tyro wraps nothing."""
    monkeypatch.setenv("COLUMNS", "1000")
    m = importlib.import_module(f"cleanrl_scaling.{script}")
    code, stdout, stderr = main_inprocess(m, ["--help"], tmp_path)
    assert code == 0, stderr[-2000:]
    return stdout


def flag_rows(text: str) -> dict:
    """{flag: the rows of the flag table that hold its help text}, in tyro's boxed or plain layout."""
    lines = text.splitlines()
    rows, current = {}, None
    for line in lines[next(i for i, line in enumerate(lines) if "-h, --help" in line):]:
        line = line.replace("│", " ").rstrip()
        if not line.strip() or set(line.strip()) <= set("─╰╯-"):
            continue
        cells = re.split(r"\s{2,}", line.strip())
        if len(line) - len(line.lstrip()) <= 3 and line.lstrip().startswith("-"):  # a flag's own row
            current = cells[0].split(",")[0].split(" ")[0]
            rows[current] = cells[1:]
        elif current:  # a row of help text under it
            rows[current].append(line.strip())
    return rows


@pytest.mark.parametrize("script", ALL)
def test_help_opens_with_the_scripts_docstring_and_names_the_papers(script, tmp_path, monkeypatch):
    text = help_text(script, tmp_path, monkeypatch)
    description = text[:text.index("-h, --help")]  # the text above the flags
    m = importlib.import_module(f"cleanrl_scaling.{script}")
    first_paragraph = " ".join(m.__doc__.strip().split("\n\n")[0].split())
    assert first_paragraph in description.splitlines()  # whole, on one line: no break before a "(" or a "§"
    for paper in ["B26 = Beukman et al. 2026", "M25 = Mayor et al. 2025", "H25 = Honari et al. 2025"]:
        assert paper in description


@pytest.mark.parametrize("script", WITH_COMPUTED_FIELDS)
def test_help_hides_the_fields_computed_at_start(script, tmp_path, monkeypatch):
    text = help_text(script, tmp_path, monkeypatch)
    assert "--num-envs" in text and "--batch-size" not in text and "--num-iterations" not in text


@pytest.mark.parametrize("script", WITH_COMPUTED_FIELDS + ["noisy_sgd"])
def test_help_prints_each_flag_text_in_one_piece(script, tmp_path, monkeypatch):
    """A multi-line field docstring used to break its sentence where the source line ended ("the first iteration"
    / "pays a one-off compile" on two rows): on a wide terminal every flag's text is one row."""
    rows = flag_rows(help_text(script, tmp_path, monkeypatch))
    assert "--num-envs" in rows or script == "noisy_sgd"
    broken = {flag: text for flag, text in rows.items() if len(text) != 1}
    assert not broken
    if script == "ppo_atari_envpool":
        for flag in ["--compile", "--save-features-every", "--cleanrl-compat"]:
            assert rows[flag][0].endswith(")") and "(default:" in rows[flag][0]


@pytest.mark.parametrize("script", list(TORCH))
def test_a_run_says_where_it_writes_and_what_it_does_before_the_first_rollout(script, tmp_path):
    m = importlib.import_module(f"cleanrl_scaling.{script}")
    args = TORCH[script] + ["--no-compile", "--progress", "lines", "--diagnostics-every", "0"]
    batch = int(args[args.index("--num-envs") + 1]) * int(args[args.index("--num-steps") + 1])
    code, stdout, stderr = main_inprocess(m, args + ["--total-timesteps", str(2 * batch)], tmp_path)
    assert code in (0, None), stderr[-3000:]
    lines = stdout.splitlines()
    (run_dir,) = (tmp_path / "runs").iterdir()

    def at(pattern):
        found = [i for i, line in enumerate(lines) if re.search(pattern, line)]
        assert found, (pattern, stdout)
        return found

    assert lines[at("^run directory: ")[0]] == f"run directory: {run_dir}"
    assert lines[at("tensorboard")[0]] == f"watch it train: tensorboard --logdir {tmp_path / 'runs'}"
    collecting, updating = at(rf"collecting {batch:,} steps"), at(r"updating: 1 epochs x")
    # a line when each phase of the first iteration starts and one when it ends; none in the second iteration
    assert len(collecting) == 2 and len(updating) == 2 and collecting[1] < updating[0]
    assert at("^run directory: ")[0] < at("tensorboard")[0] < collecting[0]
    assert "compiling" not in lines[updating[0]]  # --no-compile: nothing to compile
    assert at(r"^step \d+/")[0] > updating[1]  # then the progress lines take over
