"""Each script reads algorithm-first: Args, the math, networks, storage and losses, then main(),
then its validation, then the fenced sections (the common block, the
compiled updates), within the style guide's reading distance: the first loss function by line 300
and main() at most 100 lines."""

import ast

import pytest
from conftest import ROOT, SCRIPTS
from test_common_block import BLOCK_START

# STYLE.md's reading distance: the first loss function by line 300 and main() at most 100 lines
FIRST_LOSS_BY = 300
MAIN_AT_MOST = 100
COMPILED = {"sac_continuous_action", "sac_hil_serl", "td3_continuous_action"}  # the scripts with a compiled section
BANNERS = {"common": BLOCK_START, "compiled": "# COMPILED UPDATES"}


def layout(name: str) -> dict:
    """Line numbers (1-based) of a script's landmarks: Args, the first loss function, main()'s first
    and last lines, check_args, check_spaces, each fence's banner (its first `# ===` line), `if
    __name__`, and the file's length."""
    text = (ROOT / f"{name}.py").read_text()
    lines, tree = text.splitlines(), ast.parse(text)
    top = {node.name: node for node in tree.body if isinstance(node, (ast.FunctionDef, ast.ClassDef))}
    losses = [node.lineno for node in top.values() if isinstance(node, ast.FunctionDef) and "loss" in node.name]
    found = {
        "args": top["Args"].lineno,
        "first_loss": min(losses),
        "main": top["main"].lineno,
        "main_end": top["main"].end_lineno,
        "check_args": top["check_args"].lineno,
        "check_spaces": top["check_spaces"].lineno,
        "length": len(lines),
        "entry": next(node.lineno for node in tree.body if isinstance(node, ast.If)),
    }
    for key, banner in BANNERS.items():
        at = [i for i, line in enumerate(lines, 1) if line.startswith(banner)]
        if at:  # a fence begins at its `# ===` rule where it has one (the common block's banner is a single line)
            found[key] = at[0] - 1 if lines[at[0] - 2].startswith("# ====") else at[0]
            found[f"{key}_text"] = " ".join(lines[found[key] - 1 : at[0] + 6])
    return found


@pytest.mark.parametrize("name", SCRIPTS)
def test_each_script_reads_in_the_style_guides_order(name):
    at = layout(name)
    order = ["args", "first_loss", "main", "check_args", "check_spaces", "common", "compiled", "entry"]
    present = [key for key in order if key in at]
    assert [at[key] for key in present] == sorted(at[key] for key in present), {key: at[key] for key in present}
    assert "common" in at
    assert ("compiled" in at) == (name in COMPILED)
    for key in ("common", "compiled"):  # each fence says that a reader of the algorithm may stop there
        assert key not in at or "may stop" in at[f"{key}_text"], (key, at.get(f"{key}_text"))


@pytest.mark.parametrize("name", SCRIPTS)
def test_each_script_keeps_the_reading_distance(name):
    at = layout(name)
    assert at["first_loss"] <= FIRST_LOSS_BY
    assert at["main_end"] - at["main"] + 1 <= MAIN_AT_MOST


def below_fence_names_used_above_main(name: str) -> dict:
    """{top-level definition above main(): the names it reads that are defined below the first fence
    banner}."""
    text = (ROOT / f"{name}.py").read_text()
    tree, lines = ast.parse(text), text.splitlines()
    fence = next(i for i, line in enumerate(lines, 1) if line.startswith(tuple(BANNERS.values())))
    defined = {
        node.name for node in tree.body if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.lineno > fence
    }
    defined |= {
        target.id
        for node in tree.body
        if isinstance(node, ast.Assign) and node.lineno > fence
        for target in node.targets
        if isinstance(target, ast.Name)
    }
    main = next(node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name == "main")
    used = {}
    for node in tree.body:
        if node.lineno < main.lineno and isinstance(node, (ast.FunctionDef, ast.ClassDef, ast.Assign)):
            names = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)} & defined
            if names:
                used[getattr(node, "name", "an assignment")] = sorted(names)
    return used


@pytest.mark.parametrize("name", SCRIPTS)
def test_fences_hold(name):
    """Nothing above main() (the math, networks, storage and losses) uses a name defined below a
    fence banner: the algorithm reads without what a reader may skip."""
    assert below_fence_names_used_above_main(name) == {}
