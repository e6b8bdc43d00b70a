"""The blocks every training script shares, marked `# >>> shared:NAME` ... `# <<< shared:NAME`.

The scripts are single files by design (copy one into your project and it runs), so shared code is copied,
not imported. ppo_atari_envpool.py holds the reference copy of each block; this tool checks the copies
(`python -m cleanrl_scaling.utils.shared_blocks`) and rewrites them from the reference (`--sync`).
tests/test_shared_blocks.py runs the check.
"""
import argparse
import glob
import os
import re
import sys

SCRIPTS_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
REFERENCE = "ppo_atari_envpool.py"
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
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
