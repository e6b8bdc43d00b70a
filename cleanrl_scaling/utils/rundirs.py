"""Reading run directories (docs/run_directory.md): config.json, summary.json, metrics.jsonl; and matching flags to configs.

Shared by the launcher (--skip-finished) and the aggregation. A run is finished iff its summary.json exists with
status "finished".
"""
import json
import math
import os
from typing import Iterator, Optional


def read_json(path: str) -> Optional[dict]:
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def run_dirs(root: str) -> Iterator[str]:
    """Every directory under root (root included) holding a config.json; skips _launcher/, checkpoints/, dot dirs."""
    for path, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not d.startswith((".", "_")) and d != "checkpoints")
        if "config.json" in files:
            yield path


def run_status(run_dir: str) -> str:
    """summary.json's status, or "running" (no summary: still running, or killed without a chance to write it)."""
    summary = read_json(os.path.join(run_dir, "summary.json"))
    return summary.get("status", "unknown") if isinstance(summary, dict) else "running"


def finished_configs(root: str) -> list:
    """config.json of every finished run under root."""
    out = []
    for run_dir in run_dirs(root):
        if run_status(run_dir) == "finished":
            config = read_json(os.path.join(run_dir, "config.json"))
            if isinstance(config, dict):
                out.append(config)
    return out


def resumable_runs(root: str) -> list:
    """(config.json, checkpoint path) of every run under root that stopped before finishing (interrupted, or killed
    without a summary) and left a checkpoint (checkpoints/latest.ckpt). Diverged runs are not resumable."""
    out = []
    for run_dir in run_dirs(root):
        ckpt = os.path.join(run_dir, "checkpoints", "latest.ckpt")
        if run_status(run_dir) in ("interrupted", "running") and os.path.isfile(ckpt):
            config = read_json(os.path.join(run_dir, "config.json"))
            if isinstance(config, dict):
                out.append((config, ckpt))
    return out


def config_value(config: dict, key: str, prefer: tuple = ("args", "resolved")):
    """A value of a config.json: the top level, then the `prefer` sections in order, then any nested dict.
    KeyError if absent. The launcher matches flags as given (args first); the aggregation groups by the values in
    force (resolved first: e.g. the minibatch size a scaling recipe computed)."""
    if key in config:
        return config[key]
    for sub in prefer:
        if isinstance(config.get(sub), dict) and key in config[sub]:
            return config[sub][key]
    for sub in config.values():
        if isinstance(sub, dict) and key in sub:
            return sub[key]
    raise KeyError(key)


def config_value_or(config: dict, key: str, default=None, prefer: tuple = ("args", "resolved")):
    try:
        return config_value(config, key, prefer)
    except KeyError:
        return default


def flag_key(name: str) -> str:
    return name.lstrip("-").replace("-", "_")


def parse_flags(argv: list) -> dict:
    """`--a 1 --b-c x y --flag --no-other --d=2` -> {a: '1', b_c: ['x', 'y'], flag: True, other: False, d: '2'}.
    tyro's boolean pairs --x / --no-x become True / False; tokens before any flag go to "_positional"."""
    out, i = {}, 0
    while i < len(argv):
        token = argv[i]
        if not token.startswith("--"):
            out.setdefault("_positional", []).append(token)
            i += 1
            continue
        if "=" in token:
            name, value = token[2:].split("=", 1)
            out[flag_key(name)] = value
            i += 1
            continue
        values, j = [], i + 1
        while j < len(argv) and not argv[j].startswith("--"):
            values.append(argv[j])
            j += 1
        name = token[2:]
        if values:
            out[flag_key(name)] = values[0] if len(values) == 1 else values
        elif name.startswith("no-"):
            out[flag_key(name[3:])] = False
        else:
            out[flag_key(name)] = True
        i = j
    return out


def as_bool(value) -> Optional[bool]:
    if isinstance(value, bool):
        return value
    return {"true": True, "false": False}.get(str(value).lower())


def same_value(a, b) -> bool:
    """Loose equality of a command-line string and a config.json value: 0.1 == '0.10', True == 'true',
    None == 'None'."""
    if isinstance(a, (list, tuple)) or isinstance(b, (list, tuple)):
        a = list(a) if isinstance(a, (list, tuple)) else [a]
        b = list(b) if isinstance(b, (list, tuple)) else [b]
        return len(a) == len(b) and all(same_value(x, y) for x, y in zip(a, b))
    if isinstance(a, bool) or isinstance(b, bool):
        return as_bool(a) is not None and as_bool(a) == as_bool(b)
    try:
        return math.isclose(float(a), float(b), rel_tol=1e-12, abs_tol=0.0)
    except (TypeError, ValueError):
        return str(a) == str(b)
