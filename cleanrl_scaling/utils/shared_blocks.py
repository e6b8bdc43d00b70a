"""The blocks every training script shares, marked `# >>> shared:NAME` ... `# <<< shared:NAME`.

The scripts are single files by design (copy one into your project and it runs), so shared code is copied,
not imported. ppo_atari_envpool.py holds the reference copy of each block; this tool checks the copies
(`python -m cleanrl_scaling.utils.shared_blocks`) and rewrites them from the reference (`--sync`).
tests/test_shared_blocks.py runs the check.

Layout: a script reads algorithm first; one marked line (MARK) separates it from the shared blocks,
which all sit below the line, except the flag groups (blocks named *-args), dataclass bases that must precede
Args, and the scaling recipe (shared:recipe), the arithmetic those flags stand for, read beside Args. The check
fails a script that has the line and another block above it; scripts without the line yet are listed, not failed.
"""
import argparse
import glob
import os
import re
import sys

SCRIPTS_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
REFERENCE = "ppo_atari_envpool.py"
MARK = "# ===== Shared infrastructure: identical in every script, checked by cleanrl_scaling.utils.shared_blocks ====="
ABOVE_THE_LINE = ("recipe",)  # besides the *-args flag groups
BLOCK = re.compile(r"^# >>> shared:(?P<name>[\w-]+)\n(?P<body>.*?)^# <<< shared:(?P=name)\n", re.M | re.S)


def blocks(text: str) -> dict:
    found = {}
    for m in BLOCK.finditer(text):
        if m.group("name") in found:
            raise ValueError(f"block shared:{m.group('name')} appears twice")
        found[m.group("name")] = m.group("body")
    return found


def scripts(directory: str = SCRIPTS_DIR) -> list:
    return sorted(p for p in glob.glob(os.path.join(directory, "*.py")) if not p.endswith("__init__.py"))


def differences(directory: str = SCRIPTS_DIR) -> list:
    """(script, block) pairs whose copy differs from the reference, plus blocks unknown to the reference."""
    reference = blocks(open(os.path.join(directory, REFERENCE)).read())
    bad = []
    for path in scripts(directory):
        for name, body in blocks(open(path).read()).items():
            if name not in reference or body != reference[name]:
                bad.append((os.path.basename(path), name))
    return bad


def layout(directory: str = SCRIPTS_DIR) -> tuple:
    """(misplaced, unmarked): (script, block) pairs of shared blocks above the marked line in scripts that have it
    (flag groups, *-args, and ABOVE_THE_LINE excepted), and the scripts that have no marked line yet."""
    misplaced, unmarked = [], []
    for path in scripts(directory):
        text = open(path).read()
        lines = text.splitlines()
        if lines.count(MARK) != 1:
            unmarked.append(os.path.basename(path))
            continue
        mark_at = text.index(MARK + "\n")
        for m in BLOCK.finditer(text):
            name = m.group("name")
            if m.start() < mark_at and not name.endswith("-args") and name not in ABOVE_THE_LINE:
                misplaced.append((os.path.basename(path), name))
    return misplaced, unmarked


def sync(directory: str = SCRIPTS_DIR) -> list:
    """Rewrite every copy from the reference; returns the scripts changed."""
    reference = blocks(open(os.path.join(directory, REFERENCE)).read())
    changed = []
    for path in scripts(directory):
        text = open(path).read()
        def replace(m):
            name = m.group("name")
            body = reference.get(name, m.group("body"))
            return f"# >>> shared:{name}\n{body}# <<< shared:{name}\n"
        new = BLOCK.sub(replace, text)
        if new != text:
            open(path, "w").write(new)
            changed.append(os.path.basename(path))
    return changed


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sync", action="store_true", help="rewrite the copies from the reference script")
    opts = parser.parse_args()
    if opts.sync:
        print("rewrote:", ", ".join(sync()) or "nothing")
    bad = differences()
    for script, name in bad:
        print(f"{script}: block shared:{name} differs from {REFERENCE}")
    misplaced, unmarked = layout()
    for script, name in misplaced:
        print(f"{script}: block shared:{name} is above the shared-infrastructure line; move it below")
    if unmarked:
        print("not restructured yet (no shared-infrastructure line, layout not checked, not a failure): "
              + ", ".join(unmarked))
    sys.exit(1 if bad or misplaced else 0)


if __name__ == "__main__":
    main()
