"""The single-file scripts copy their shared blocks; these tests keep the copies honest."""
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from cleanrl_scaling.utils import shared_blocks  # noqa: E402

SCRIPTS = [os.path.basename(p) for p in shared_blocks.scripts()]


def test_every_copy_of_a_shared_block_matches_the_reference():
    assert shared_blocks.differences() == []


@pytest.mark.parametrize("script", SCRIPTS)
def test_scripts_import_nothing_from_each_other(script):
    text = open(os.path.join(ROOT, "cleanrl_scaling", script)).read()
    for other in SCRIPTS:
        name = other[:-3]
        assert f"import {name}" not in text and f"from {name}" not in text
        assert f"from cleanrl_scaling" not in text


def test_sync_rewrites_a_drifted_copy(tmp_path):
    reference = open(os.path.join(ROOT, "cleanrl_scaling", shared_blocks.REFERENCE)).read()
    (tmp_path / shared_blocks.REFERENCE).write_text(reference)
    drifted = "x = 1\n# >>> shared:errors\nclass UsageError(Exception):\n    pass\n# <<< shared:errors\ny = 2\n"
    (tmp_path / "other.py").write_text(drifted)
    assert shared_blocks.differences(str(tmp_path)) == [("other.py", "errors")]
    assert shared_blocks.sync(str(tmp_path)) == ["other.py"]
    assert shared_blocks.differences(str(tmp_path)) == []
    text = (tmp_path / "other.py").read_text()
    assert text.startswith("x = 1\n") and text.endswith("y = 2\n") and "def exit_usage" in text


def test_layout_flags_a_shared_block_above_the_marked_line(tmp_path):
    """Below the marked line every shared block but the flag groups; no line yet = listed, not failed."""
    block = "# >>> shared:{0}\ndef {1}():\n    pass\n# <<< shared:{0}\n"
    args = block.format("run-args", "run_args")
    good = args + "def main():\n    pass\n" + shared_blocks.MARK + "\n" + block.format("errors", "check") + "main()\n"
    bad = args + block.format("errors", "check") + shared_blocks.MARK + "\n" + block.format("rundir", "claim") + "main()\n"
    # the scaling recipe is read beside Args, above the line, like the flag groups
    recipe = args + block.format("recipe", "resolve_scaling") + shared_blocks.MARK + "\n" + block.format("errors", "check")
    (tmp_path / "good.py").write_text(good)
    (tmp_path / "bad.py").write_text(bad)
    (tmp_path / "recipe.py").write_text(recipe)
    (tmp_path / "old.py").write_text(block.format("errors", "check") + "main()\n")
    (tmp_path / "twice.py").write_text(shared_blocks.MARK + "\n" + shared_blocks.MARK + "\n")
    assert shared_blocks.layout(str(tmp_path)) == ([("bad.py", "errors")], ["old.py", "twice.py"])


def test_the_checker_passes_and_names_the_scripts_not_yet_restructured():
    out = subprocess.run([sys.executable, "-m", "cleanrl_scaling.utils.shared_blocks"], cwd=ROOT, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stdout
    misplaced, unmarked = shared_blocks.layout()
    assert misplaced == [] and shared_blocks.REFERENCE not in unmarked
    if unmarked:
        assert "not restructured yet" in out.stdout and all(name in out.stdout for name in unmarked)


def top_level(script: str) -> dict:
    """The source of each top-level function and class of cleanrl_scaling/SCRIPT, by name."""
    import ast
    source = open(os.path.join(ROOT, "cleanrl_scaling", script)).read()
    return {n.name: ast.get_source_segment(source, n) for n in ast.parse(source).body
            if isinstance(n, (ast.FunctionDef, ast.ClassDef))}


def test_the_two_jax_scripts_copies_of_the_ppo_ewma_math_agree():
    """sfl_kinetix_jax.py and ppo_ewma_jax2d.py each carry PPO-EWMA's math outside the shared blocks (a copied script
    stands alone); the copies must stay the same code, so a fix to one reaches the other."""
    sfl, ewma = top_level("sfl_kinetix_jax.py"), top_level("ppo_ewma_jax2d.py")
    # not UpdateCarry: sfl_kinetix_jax's training chunk carries no probe (None; only its separate diagnostics pass
    # does), ppo_ewma_jax2d's still carries one behind lax.cond
    for name in ("decoupled_pg_loss", "ewma_update", "log_prob", "entropy", "log_softmax64", "flat_params",
                 "diagnostic_states", "restore_runner", "tree_select", "action_layout", "MLP",
                 "peak_device_bytes", "peak_text"):
        assert sfl[name] == ewma[name], f"{name} differs between sfl_kinetix_jax.py and ppo_ewma_jax2d.py"


def test_the_torch_scripts_copies_of_env_threads_agree():
    """The four torch scripts count envpool's workers with one function each, beside their make_envs (outside the
    shared blocks); the copies must stay the same code."""
    copies = {name: top_level(name)["env_threads"] for name in
              ("ppo_atari_envpool.py", "pqn_atari.py", "ppo_procgen.py", "ppo_continuous_mujoco.py")}
    assert len(set(copies.values())) == 1, sorted(copies)


def test_the_two_atari_scripts_copies_of_the_envs_and_the_rollout_steps_agree():
    """ppo_atari_envpool.py and pqn_atari.py each carry the envpool set-up and the rollout's bookkeeping, --async-envs'
    halves included, outside the shared blocks (they sit beside the algorithm); the copies must stay the same code."""
    ppo, pqn = top_level("ppo_atari_envpool.py"), top_level("pqn_atari.py")
    for name in ("import_envpool", "make_envs", "make_env_groups", "EpisodeStats", "store_frames", "envs_of",
                 "observe"):
        assert ppo[name] == pqn[name], f"{name} differs between ppo_atari_envpool.py and pqn_atari.py"
