"""References a reader who copies a file can follow: the scripts, the benchmark scripts and the tests cite a paper
section, a docs page or a public URL, never the project's internal contract or its issue tracker, and every docs page
and anchor they cite exists."""
import re
from pathlib import Path

import markdown
import pytest

REPO = Path(__file__).resolve().parent.parent
FILES = sorted([*REPO.glob("cleanrl_scaling/*.py"), *REPO.glob("cleanrl_scaling/utils/*"),
                *REPO.glob("benchmark/*"), *REPO.glob("tests/*.py")])
UNFOLLOWABLE = re.compile(r"\bSPEC\b\s*(§|\.md)|\bissues?[ -]#?\d", re.IGNORECASE)
DOCS_LINK = re.compile(r"\bdocs/([\w./-]+?\.md)(?:#([\w-]+))?")


def text(path: Path) -> str:
    return path.read_text(errors="replace") if path.is_file() else ""


def rel(path: Path) -> str:
    return str(path.relative_to(REPO))


@pytest.mark.parametrize("path", FILES, ids=rel)
def test_no_citation_of_the_internal_contract_or_an_issue_number(path):
    found = [f"{rel(path)}:{n}: {line.strip()}" for n, line in enumerate(text(path).splitlines(), 1)
             if UNFOLLOWABLE.search(line)]
    assert found == []


def anchors(page: Path) -> set:
    """The ids the site gives a page: its headings' (mkdocs' toc slugs) and any explicit <a id=...>."""
    html = markdown.markdown(page.read_text(), extensions=["toc", "tables", "md_in_html"])
    return set(re.findall(r'\bid="([^"]+)"', html))


def test_every_cited_docs_page_and_anchor_exists():
    cited = {}
    for path in FILES:
        for m in DOCS_LINK.finditer(text(path)):
            cited.setdefault((m.group(1), m.group(2)), rel(path))
    assert len(cited) > 10  # the pattern finds the citations at all
    missing = [f"{where}: docs/{page}" for (page, _), where in cited.items() if not (REPO / "docs" / page).is_file()]
    assert missing == []
    pages = {page: anchors(REPO / "docs" / page) for page, anchor in cited if anchor}
    unknown = [f"{where}: docs/{page}#{anchor}" for (page, anchor), where in cited.items()
               if anchor and anchor not in pages[page]]
    assert unknown == []
