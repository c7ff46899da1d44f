"""README.md and every docs/*.md page: links resolve, the names they use are real, examples parse.

The manual lives in docs/, one page per topic, and README.md is its front
page. Pages drift from the code as options, ini keys and subcommands are
renamed; these checks read the real names from the plugin itself
(``pytest_specdec.config.settings`` and ``pytest_specdec.cli``), never from
the text of those files, and every failure names the page, the line and
what is wrong.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import pytest

from pytest_specdec.cli import COMMANDS
from pytest_specdec.config.settings import COMMAND_LINE_OPTIONS, DEPRECATED_FLAGS, INI_KEYS

ROOT = Path(__file__).resolve().parents[3]
DOCS = ROOT / "docs"
README = ROOT / "README.md"
INDEX = DOCS / "index.md"
WORKFLOW = DOCS / "specdec-workflow.yml"
README_MAX_LINES = 400

FLAGS = {name for name, _ in COMMAND_LINE_OPTIONS} | set(DEPRECATED_FLAGS)
INI = {name for name, _, _ in INI_KEYS}
SUBCOMMANDS = set(COMMANDS)

FENCE = re.compile(r"^(`{3,}|~{3,})[ \t]*([\w+-]*)[^\n]*\n(.*?)^\1[ \t]*$", re.S | re.M)
CODE_SPAN = re.compile(r"(`+)((?:(?!\n[ \t]*\n).)+?)\1", re.S)  # within one paragraph
LINK = re.compile(r"(!?)\[((?:[^\[\]]|\[[^\[\]]*\])*)\]\(\s*<?([^)\s>]*)>?(?:\s+\"[^\"]*\")?\s*\)")
FLAG = re.compile(r"(?<![\w-])--specdec-[a-z0-9]+(?:-[a-z0-9]+)*")
NAME = re.compile(r"(?<![\w./-])specdec_[a-z0-9_]+")  # not pytest_specdec_* hooks, not pytest.mark.specdec_*
SUBCOMMAND = re.compile(r"(?<![\w-])(?:pytest-specdec|python -m pytest_specdec)[ \t]+([a-z][a-z0-9_-]*)")
INI_BEFORE = re.compile(r"\bini\b[^.;\n]{0,25}$", re.I)  # "ini `specdec_x`", "the ini's `specdec_x`"
INI_AFTER = re.compile(r"^`?\s*\(?ini\b", re.I)  # "`specdec_x` (ini)", "`specdec_x` ini says"


def _blank(text: str, start: int, end: int) -> str:
    """`text` with [start, end) replaced by spaces, newlines kept: offsets and line numbers stay put."""
    return text[:start] + re.sub(r"[^\n]", " ", text[start:end]) + text[end:]


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: markup dropped, lower case, punctuation removed, spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link keeps its text
    text = re.sub(r"[^\w\- ]", "", text.strip().lower())
    return text.replace(" ", "-")


@dataclass
class Page:
    path: Path

    @cached_property
    def name(self) -> str:
        return self.path.relative_to(ROOT).as_posix()

    @cached_property
    def text(self) -> str:
        return self.path.read_text(encoding="utf-8")

    def line(self, offset: int) -> int:
        return self.text.count("\n", 0, offset) + 1

    @cached_property
    def blocks(self) -> list[tuple[str, int, str]]:
        """Fenced code blocks: (language, line of the opening fence, code)."""
        return [(m.group(2).lower(), self.line(m.start()), m.group(3)) for m in FENCE.finditer(self.text)]

    @cached_property
    def prose(self) -> str:
        """The text with fenced blocks and inline code blanked out (same offsets)."""
        text = self.text
        for m in FENCE.finditer(self.text):
            text = _blank(text, m.start(), m.end())
        for m in CODE_SPAN.finditer(text):
            text = _blank(text, m.start(), m.end())
        return text

    @cached_property
    def code(self) -> list[tuple[int, str]]:
        """Every piece of code on the page, blocks and inline spans: (offset, code)."""
        pieces = [(m.start(3), m.group(3)) for m in FENCE.finditer(self.text)]
        without_blocks = self.text
        for m in FENCE.finditer(self.text):
            without_blocks = _blank(without_blocks, m.start(), m.end())
        pieces += [(m.start(2), m.group(2)) for m in CODE_SPAN.finditer(without_blocks)]
        return pieces

    @cached_property
    def anchors(self) -> set[str]:
        seen: dict[str, int] = {}
        anchors = set()
        for m in re.finditer(r"^#{1,6}[ \t]+(.+?)[ \t#]*$", self.prose_with_headings, flags=re.M):
            base = slug(m.group(1))
            n = seen.get(base, 0)
            seen[base] = n + 1
            anchors.add(base if n == 0 else f"{base}-{n}")
        return anchors

    @cached_property
    def prose_with_headings(self) -> str:
        """The text with only fenced blocks blanked: headings keep their inline code."""
        text = self.text
        for m in FENCE.finditer(self.text):
            text = _blank(text, m.start(), m.end())
        return text

    @cached_property
    def links(self) -> list[tuple[int, str, str]]:
        """(line, kind, target) of every Markdown link and image outside code."""
        return [
            (self.line(m.start()), "image" if m.group(1) else "link", m.group(3)) for m in LINK.finditer(self.prose)
        ]


PAGES = [Page(README), *(Page(p) for p in sorted(DOCS.glob("*.md")))]


def _page_ids(page: Page) -> str:
    return page.name


def _problems(problems: list[str]) -> str:
    return f"{len(problems)} problem(s):\n" + "\n".join(problems)


def resolve(page: Page, target: str) -> tuple[Path | None, str | None, str | None]:
    """(file, anchor, problem) for a link target on `page`; file None for external links."""
    if re.match(r"^[a-z][a-z0-9+.-]*:", target, flags=re.I):  # http:, https:, mailto:
        return None, None, None
    path_part, _, anchor = target.partition("#")
    file = (page.path.parent / path_part).resolve() if path_part else page.path
    if not file.exists():
        return file, anchor, f"no such file {file.relative_to(ROOT) if file.is_relative_to(ROOT) else file}"
    if not file.is_relative_to(ROOT):
        return file, anchor, "points outside the repository"
    if anchor and file.suffix == ".md":
        headings = Page(file).anchors
        if anchor not in headings:
            return (
                file,
                anchor,
                (
                    f"no heading with anchor #{anchor} in {file.relative_to(ROOT)} "
                    f"(anchors there: {', '.join(sorted(headings))})"
                ),
            )
    return file, anchor, None


def test_the_pages_are_found():
    names = {page.name for page in PAGES}
    assert {"README.md", "docs/index.md", "docs/references.md"} <= names, names
    assert len(PAGES) >= 10, names


@pytest.mark.parametrize("page", PAGES, ids=_page_ids)
def test_every_relative_link_and_image_resolves(page):
    problems = []
    for line, kind, target in page.links:
        if not target:
            problems.append(f"{page.name}:{line}: {kind} with an empty target")
            continue
        _, _, problem = resolve(page, target)
        if problem:
            problems.append(f"{page.name}:{line}: {kind} {target!r} does not resolve: {problem}")
    assert not problems, _problems(problems)


@pytest.mark.parametrize("page", PAGES, ids=_page_ids)
def test_every_flag_named_is_an_option_of_the_plugin(page):
    problems = [
        f"{page.name}:{page.line(m.start())}: {m.group(0)} is not an option of the plugin "
        f"(pytest_specdec.config.settings.COMMAND_LINE_OPTIONS) nor a deprecated alias"
        for m in FLAG.finditer(page.text)
        if m.group(0) not in FLAGS
    ]
    assert not problems, _problems(problems)


def ini_keys_named(page: Page) -> list[tuple[int, str]]:
    """(line, name) of each `specdec_...` name the page presents as an ini key.

    An ini key is a name set in an ``ini`` code block, the first cell of a
    table whose header names "ini" (the options table), or a name with the
    word "ini" just before or after it in the text ("ini `specdec_repeats`",
    "`specdec_slo` (ini)"). Other specdec_ names (fixtures, JUnit properties,
    markers) are not ini keys and are left alone.
    """
    found = []
    for language, start, code in page.blocks:
        if language in ("ini", "cfg", "toml"):
            for n, text in enumerate(code.splitlines(), start=1):
                m = re.match(r"\s*(specdec_[a-z0-9_]+)\s*=", text)
                if m:
                    found.append((start + n, m.group(1)))
    lines = page.text.splitlines()
    ini_table = False
    for n, text in enumerate(lines, start=1):
        if not text.startswith("|"):
            ini_table = False
            continue
        cells = text.strip("|").split("|")
        if n >= 2 and not lines[n - 2].startswith("|"):  # a table's header row
            ini_table = re.search(r"\bini\b", cells[0], flags=re.I) is not None
        elif ini_table and not re.fullmatch(r"[\s:-]*", cells[0]):
            found += [(n, m.group(0)) for m in NAME.finditer(cells[0])]
    table_lines = {n for n, _ in found}
    for m in NAME.finditer(page.prose_with_headings):
        line = page.line(m.start())
        if line in table_lines and lines[line - 1].startswith("|"):
            continue
        before = page.prose_with_headings[max(0, m.start() - 40) : m.start()].replace("\n", " ")
        after = page.prose_with_headings[m.end() : m.end() + 10].replace("\n", " ")
        if INI_BEFORE.search(before) or INI_AFTER.match(after):
            found.append((line, m.group(0)))
    return sorted(set(found))


@pytest.mark.parametrize("page", PAGES, ids=_page_ids)
def test_every_ini_key_named_is_an_ini_key_of_the_plugin(page):
    problems = [
        f"{page.name}:{line}: {name} is named as an ini key but the plugin has no such key "
        f"(pytest_specdec.config.settings.INI_KEYS)"
        for line, name in ini_keys_named(page)
        if name not in INI
    ]
    assert not problems, _problems(problems)


@pytest.mark.parametrize("page", PAGES, ids=_page_ids)
def test_every_subcommand_named_is_a_command_of_the_cli(page):
    problems = []
    for offset, code in page.code:
        for m in SUBCOMMAND.finditer(code):
            if m.group(1) not in SUBCOMMANDS:
                problems.append(
                    f"{page.name}:{page.line(offset + m.start())}: '{m.group(0)}': "
                    f"{m.group(1)!r} is not a pytest-specdec subcommand "
                    f"(pytest_specdec.cli.COMMANDS: {', '.join(sorted(SUBCOMMANDS))})"
                )
    assert not problems, _problems(problems)


@pytest.mark.parametrize("page", PAGES, ids=_page_ids)
def test_every_python_example_parses(page):
    problems = []
    for language, start, code in page.blocks:
        if language not in ("python", "py", "python3"):
            continue
        try:
            ast.parse(code)
        except SyntaxError as exc:
            problems.append(
                f"{page.name}:{start + (exc.lineno or 0)}: the python block opened on line {start} "
                f"does not parse: {exc.msg}: {(exc.text or '').strip()!r}"
            )
    assert not problems, _problems(problems)


def _linked_files(page: Page) -> set[Path]:
    return {
        file
        for _, _, target in page.links
        for file, _, problem in [resolve(page, target)]
        if file is not None and problem is None
    }


def test_the_index_links_every_page_of_the_docs():
    index = Page(INDEX)
    missing = sorted(
        p.relative_to(ROOT).as_posix()
        for p in DOCS.glob("*.md")
        if p != INDEX and p.resolve() not in _linked_files(index)
    )
    assert not missing, f"docs/index.md: no link to {', '.join(missing)}"


def test_the_readme_links_the_index():
    assert INDEX.resolve() in _linked_files(Page(README)), "README.md: no link to docs/index.md"


def test_the_readme_is_a_front_page():
    lines = len(Page(README).text.splitlines())
    assert lines <= README_MAX_LINES, (
        f"README.md:{lines}: {lines} lines, over {README_MAX_LINES}: move the detail into a docs/ page"
    )


def test_the_ini_key_finder_sees_the_options_table_and_prose():
    """The ini check finds keys where the pages name them, and nothing that is not presented as one."""
    options = dict((name, line) for line, name in ini_keys_named(Page(DOCS / "options.md")))
    assert {"specdec_startup_timeout", "specdec_tolerances", "specdec_slo", "specdec_drift_check"} <= set(options)
    goodput = {name for _, name in ini_keys_named(Page(DOCS / "goodput.md"))}
    assert {"specdec_slo", "specdec_slo_percentile"} <= goodput
    assert "specdec_slo_tpot_ms" not in goodput  # a JUnit property, not an ini key
    fixtures = {name for _, name in ini_keys_named(Page(DOCS / "writing-tests.md"))}
    assert "specdec_pool" not in fixtures and "specdec_sharegpt_path" in fixtures


def test_the_options_page_lists_every_option_and_ini_key():
    page = Page(DOCS / "options.md")
    flags = {m.group(0) for m in FLAG.finditer(page.text)}
    keys = {name for _, name in ini_keys_named(page)}
    if "`specdec_<workload>_path`" in page.text:  # one row stands for every data-file workload's key
        keys |= {name for name in INI if re.fullmatch(r"specdec_\w+_path", name)}
    missing = sorted(FLAGS - flags) + sorted(INI - keys)
    assert not missing, f"docs/options.md: no row for {', '.join(missing)}"


def test_the_ci_workflow_parses_and_names_only_options_that_exist():
    import yaml

    document = yaml.safe_load(WORKFLOW.read_text())
    steps = document["jobs"]["specdec"]["steps"]
    commands = "\n".join(step.get("run", "") for step in steps)
    flags = FLAG.findall(commands)
    unknown = sorted(set(flags) - FLAGS)
    assert not unknown, f"{WORKFLOW.relative_to(ROOT)}: not options of the plugin: {unknown}"
    assert {"--specdec-gpu", "--specdec-strict", "--specdec-report", "--specdec-history"} <= set(flags), flags
    triggers = document.get("on", document.get(True))  # YAML 1.1 reads a bare `on` as true
    assert {"pull_request", "schedule"} <= set(triggers)
    assert document["permissions"]["pull-requests"] == "write"
    upload = next(step for step in steps if step.get("uses", "").startswith("actions/upload-artifact"))
    assert "specdec-report/" in upload["with"]["path"] and upload["if"] == "always()"
    post = next(step for step in steps if "pr-comment.md" in step.get("run", ""))
    assert "--edit-last" in post["run"] and "--create-if-none" in post["run"] and "GH_TOKEN" in post["env"]
    # The page shows the workflow's own command, not a copy that drifted.
    run = next(step for step in steps if "--specdec-gpu" in step.get("run", ""))
    page = (DOCS / "ci.md").read_text()
    assert " ".join(run["run"].split()) in " ".join(page.split())
