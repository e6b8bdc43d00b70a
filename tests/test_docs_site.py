"""The documentation site (mkdocs.yml) builds without a warning, and no page links to a file the site leaves out:
mkdocs reports a link to an excluded file at INFO whatever its validation settings say, so `mkdocs build --strict`
alone lets such 404s through."""
import logging
from pathlib import Path

from mkdocs.commands.build import build
from mkdocs.config import load_config

REPO = Path(__file__).resolve().parent.parent


def test_the_site_builds_without_warnings_or_links_to_excluded_files(tmp_path):
    records = []
    handler = logging.Handler(logging.INFO)
    handler.emit = records.append
    logger = logging.getLogger("mkdocs")
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        build(load_config(str(REPO / "mkdocs.yml"), site_dir=str(tmp_path / "site")))
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    problems = [r.getMessage() for r in records
                if r.levelno >= logging.WARNING or "excluded from the built site" in r.getMessage()]
    assert problems == []  # what `mkdocs build --strict` fails on, and the links to excluded files
    assert (tmp_path / "site" / "ppo_atari_envpool" / "index.html").exists()
    assert (tmp_path / "site" / "reproducing" / "runs" / "index.html").exists()  # the archived runs' README
    assert not list((tmp_path / "site" / "reproducing" / "runs").glob("*/*/metrics.jsonl"))  # not their data
