"""Each script reads algorithm-first: Args, the math, networks, storage and losses, then main(), then its validation,
then the fenced sections (SAC's robot-learning options, the common block, the compiled updates), within the line
budgets of the project's style guide. The common block's own size is checked in test_common_block.py."""

import ast

import pytest
from conftest import ROOT, SCRIPTS
from test_common_block import BLOCK_START

# script: (first loss function by line, main() ends by line, main() at most, lines above the compiled section at most)
BUDGETS = {
    "sac_continuous_action": (330, 560, 100, None),  # SAC: no total; its span to the common block is budgeted below
    "td3_continuous_action": (330, 420, 130, 660),
    "sac_atari": (330, 420, 130, 675),
    "a2c": (330, 420, 130, 615),
    "acer": (330, 420, 130, 655),
}
COMPILED_AT_MOST = {"sac_continuous_action": 110, "td3_continuous_action": 80}  # the banner to the end of the file
SAC_SPAN_AT_MOST = 450  # from the end of main() to the common block: validation, then the robot-learning section
BANNERS = {"robot": "# ROBOT-LEARNING OPTIONS", "common": BLOCK_START, "compiled": "# COMPILED UPDATES"}


def layout(name: str) -> dict:
    """Line numbers (1-based) of a script's landmarks: Args, the first loss function, main()'s first and last lines,
    check_args, check_spaces, each fence's banner (its first `# ===` line), `if __name__`, and the file's length."""
    text = (ROOT / f"{name}.py").read_text()
    lines, tree = text.splitlines(), ast.parse(text)
    top = {node.name: node for node in tree.body if isinstance(node, (ast.FunctionDef, ast.ClassDef))}
    losses = [node.lineno for node in top.values() if isinstance(node, ast.FunctionDef) and "loss" in node.name]
    found = {"args": top["Args"].lineno, "first_loss": min(losses), "main": top["main"].lineno,
             "main_end": top["main"].end_lineno, "check_args": top["check_args"].lineno,
             "check_spaces": top["check_spaces"].lineno, "length": len(lines),
             "entry": next(node.lineno for node in tree.body if isinstance(node, ast.If))}
    for key, banner in BANNERS.items():
        at = [i for i, line in enumerate(lines, 1) if line.startswith(banner)]
        if at:  # a fence begins at its `# ===` rule where it has one (the common block's banner is a single line)
            found[key] = at[0] - 1 if lines[at[0] - 2].startswith("# ====") else at[0]
            found[f"{key}_text"] = " ".join(lines[found[key] - 1: at[0] + 6])
    return found


@pytest.mark.parametrize("name", SCRIPTS)
def test_each_script_reads_in_the_style_guides_order(name):
    at = layout(name)
    order = ["args", "first_loss", "main", "check_args", "check_spaces", "robot", "common", "compiled", "entry"]
    present = [key for key in order if key in at]
    assert [at[key] for key in present] == sorted(at[key] for key in present), {key: at[key] for key in present}
    assert "common" in at and ("robot" in at) == (name == "sac_continuous_action")
    assert ("compiled" in at) == (name in COMPILED_AT_MOST)
    for key in ("robot", "common", "compiled"):  # each fence says that a reader of the algorithm may stop there
        assert key not in at or "may stop" in at[f"{key}_text"], (key, at.get(f"{key}_text"))


@pytest.mark.parametrize("name", SCRIPTS)
def test_each_script_meets_its_line_budgets(name):
    at, (first_loss, main_end, main_lines, above_compiled) = layout(name), BUDGETS[name]
    assert at["first_loss"] <= first_loss and at["main_end"] <= main_end
    assert at["main_end"] - at["main"] + 1 <= main_lines
    if above_compiled is not None:
        assert at.get("compiled", at["length"] + 1) - 1 <= above_compiled
    if name in COMPILED_AT_MOST:
        assert at["length"] - at["compiled"] + 1 <= COMPILED_AT_MOST[name]


def test_sac_from_the_end_of_main_to_the_common_block_is_within_its_budget():
    at = layout("sac_continuous_action")
    assert at["common"] - at["main_end"] - 1 <= SAC_SPAN_AT_MOST
