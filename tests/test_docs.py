"""The docs: every flag a script's page names exists, every command they show parses, every metric
a run logs is listed, the flag tables list every field of `Args` once with its default, and no
tracked file carries development history, machine names or paths outside the repository."""

import ast
import dataclasses
import importlib
import re
import shlex
import subprocess

import pytest
import tyro
from conftest import ROOT, SCRIPTS, scalars
from test_common_block import tiny

NOT_FLAGS = {"--help", "--logdir", "--no-such-flag"}  # tensorboard's, and the bad-input example
HISTORY = re.compile(
    r"\bsessions?\b|\bVMs?\b|\bzen ?\d|/work/|/root/|/home/\w|\.\./shared|shared/REFERENCE|"
    r"\bseed 00\d\b",
    re.I,
)


@pytest.mark.parametrize("name", SCRIPTS)
def test_every_flag_a_page_names_exists(name):
    fields = importlib.import_module(name).Args.__dataclass_fields__
    flags = {f"--{prefix}{field.replace('_', '-')}" for field in fields for prefix in ("", "no-")}
    page = (ROOT / "docs" / f"{name}.md").read_text()
    prose = re.sub(r"```.*?```", "", page, flags=re.S)
    commands = re.findall(rf"^(?:\S+=\S+ )*python {name}\.py .*$", page, re.M)  # its example commands
    named = set(re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", prose + "\n".join(commands)))
    assert named - NOT_FLAGS <= flags, (
        f"docs/{name}.md names flags {name}.py lacks: {sorted(named - NOT_FLAGS - flags)}"
    )
    assert commands, f"docs/{name}.md shows no command"


@pytest.mark.parametrize("name", SCRIPTS)
def test_every_metric_a_run_logs_is_listed_on_its_page(in_tmp, name):
    """A short run with an evaluation logs its TensorBoard tags; each is in the page's "Logged
    metrics" section, so that a metric added to a script cannot go undocumented."""
    module = importlib.import_module(name)
    summary = module.main(tiny(module, total_timesteps=400, eval_freq=200, log_freq=50))
    tags = scalars(summary["run_dir"])
    page = (ROOT / "docs" / f"{name}.md").read_text()
    section = page.split("## Logged metrics\n")[1].split("\n## ")[0]
    assert "eval/episodic_return" in tags and any(tag.startswith("losses/") for tag in tags), sorted(tags)
    assert [tag for tag in tags if f"`{tag}`" not in section] == [], f"docs/{name}.md's Logged metrics"


@pytest.mark.parametrize("name", SCRIPTS)
def test_every_command_the_docs_show_parses_and_passes_the_script_s_checks(name):
    """Each `python <name>.py ...` of the README and the pages, continuation lines joined, parses
    into Args and passes check_args: a renamed flag or a value out of range in an example fails
    here."""
    module = importlib.import_module(name)
    text = "\n".join(p.read_text() for p in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))])
    commands = re.findall(rf"python {name}\.py((?: [^\n#`]*)?)", text.replace("\\\n", " "))
    assert commands
    for argv in (shlex.split(command) for command in commands):
        if not {"--help", "--no-such-flag"} & set(argv):  # --help prints, the bad-input example fails on purpose
            module.check_args(tyro.cli(module.Args, args=argv))


def render(default):
    """An `Args` default as `--help` shows it and the flag tables write it: 1_000_000 as 1000000,
    3e-4 as 0.0003."""
    return f"`{default}`"


def flag_table(path, heading):
    """[(field, default column)] of the flag table in the section `heading` of `path`, in the
    table's order."""
    section = (ROOT / path).read_text().split(f"\n{heading}\n", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `--([a-z0-9-]+)` \| ([^|]*) \|", section, re.M)
    return [(flag.replace("-", "_"), default) for flag, default in rows]


@pytest.mark.parametrize("name", SCRIPTS)
def test_flag_tables_list_every_field_once_in_order_with_its_default(name):
    defaults = {field.name: field.default for field in dataclasses.fields(importlib.import_module(name).Args)}
    common_block = (ROOT / f"{name}.py").read_text().split("# --- COMMON ARGS")[1].split("# --- END OF COMMON ARGS")[0]
    common = re.findall(r"^    (\w+):", common_block, re.M)
    readme, page = flag_table("README.md", "## Common flags"), flag_table(f"docs/{name}.md", "## Flags")
    assert [field for field, _ in readme] == common, "README's common flags table is not the common fields of Args"
    assert [field for field, _ in page] == [field for field in defaults if field not in common], (
        f"the flags table of docs/{name}.md is not the fields of {name}.Args after the common ones"
    )
    for field, default in readme + page:
        shown = "the script's name" if field == "exp_name" and defaults[field] == name else render(defaults[field])
        assert default == shown, f"--{field.replace('_', '-')}: the table says {default}, Args {shown}"


def test_no_tracked_file_holds_history_words_or_machine_paths():
    files = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True).stdout.split()
    if not files:
        pytest.skip("not a git checkout")
    hits = []
    for path in files:
        if path.endswith((".png", ".jpg")) or path == "tests/test_docs.py":
            continue
        for number, line in enumerate((ROOT / path).read_text(errors="replace").splitlines(), 1):
            if HISTORY.search(line):
                hits.append(f"{path}:{number}: {line.strip()[:100]}")
    assert not hits, "\n".join(hits)


def test_the_quickstart_installs_torch_first_cpu_only_or_the_default_a_line_each_and_says_which():
    """The Quickstart's commands: a CPU-only torch and the default one, a line each, before the
    requirement sets; the prose after them says when to choose each; the test command is the one
    .ci/run runs verbatim."""
    quickstart = (ROOT / "README.md").read_text().split("\n## Quickstart\n", 1)[1].split("\n## ", 1)[0]
    block, prose = quickstart.split("```bash\n", 1)[1].split("```\n", 1)
    commands = [line.split("  #")[0].strip() for line in block.splitlines()]
    cpu = [i for i, c in enumerate(commands) if re.fullmatch(r"pip install torch==[\d.]+ --index-url \S+/whl/cpu", c)]
    default = [i for i, c in enumerate(commands) if re.fullmatch(r"pip install torch==[\d.]+", c)]
    requirements = [i for i, c in enumerate(commands) if c.startswith("pip install -r requirements/")]
    assert len(cpu) == len(default) == 1 and max(cpu + default) < min(requirements), commands
    choice = prose.strip().split("\n\n")[0]
    assert "CPU-only" in choice and "NVIDIA GPU" in choice and "default" in choice, choice
    test_command = "pip install -r requirements/requirements-dev.txt && python -m pytest"
    assert test_command in commands and (ROOT / ".ci" / "run").read_text().strip().endswith(test_command)


SHOWN_COMMAND = re.compile(r"^ *((?:[A-Z_]+=\S+ )*(?:python|bash) \S+\.(?:py|sh)(?: .*)?)$", re.M)
INLINE_COMMAND = re.compile(r"`((?:[A-Z_]+=\S+ )*(?:python|bash) \S+\.(?:py|sh)(?: [^`]*)?)`")


def shown_commands() -> list:
    """[(file, argv)] of every command the README, the pages and the benchmark tools' help show, in
    code blocks and inline, continuation lines joined and comments dropped."""
    texts = {path: path.read_text() for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]}
    texts.update({path: ast.get_docstring(ast.parse(path.read_text())) for path in (ROOT / "benchmark").glob("*.py")})
    return [
        (path.relative_to(ROOT), shlex.split(match[1], comments=True))
        for path, text in texts.items()
        for pattern in (SHOWN_COMMAND, INLINE_COMMAND)
        for match in pattern.finditer(text.replace("\\\n", " "))
    ]


def test_no_command_the_docs_show_writes_into_the_committed_results():
    """benchmark/results/ holds the committed reports and tables: a command on a page may read
    there (report.py's ROOT, with an --out elsewhere), and writes into a scratch folder; the
    benchmark shell scripts' defaults point elsewhere too."""
    commands = shown_commands()
    assert len(commands) > 50 and any("benchmark/report.py" in argv for _, argv in commands)
    written = []
    for path, argv in commands:
        read = []
        if "benchmark/report.py" in argv and any(arg.split("=")[0] == "--out" for arg in argv):
            read = [argv[argv.index("benchmark/report.py") + 1]]  # ROOT, read only
        written += [f"{path}: {shlex.join(argv)}" for arg in argv if "benchmark/results" in arg and arg not in read]
    assert not written, "\n".join(written)
    for script in sorted((ROOT / "benchmark").rglob("*.sh")):
        assert "benchmark/results" not in script.read_text(), script


def test_every_picture_the_docs_show_exists_and_is_small_and_each_script_page_shows_one():
    showing = set()
    for page in [ROOT / "README.md", ROOT / "docs" / "performance.md", *(ROOT / "docs" / f"{n}.md" for n in SCRIPTS)]:
        for target in re.findall(r"!\[[^\]]*\]\(([^)]+)\)", page.read_text()):
            picture = (page.parent / target).resolve()
            assert picture.is_file(), f"{page.name} shows {target}, which does not exist"
            assert picture.stat().st_size < 200_000, f"{target} is over 200 KB"
            showing.add(page.stem)
    assert set(SCRIPTS) <= showing, f"no learning curves on the pages of {sorted(set(SCRIPTS) - showing)}"
