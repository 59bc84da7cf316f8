"""requirements/*.txt and pyproject.toml declare the same dependency sets."""

import pytest
from conftest import ROOT, SCRIPTS

tomllib = pytest.importorskip("tomllib")  # Python >= 3.11


def requirement_lines(name: str) -> set:
    lines = (ROOT / "requirements" / name).read_text().splitlines()
    return {line.strip() for line in lines if line.strip() and not line.startswith(("#", "-r"))}


def test_requirement_files_match_pyproject():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert requirement_lines("requirements.txt") == set(project["dependencies"])
    for extra, packages in project["optional-dependencies"].items():
        assert requirement_lines(f"requirements-{extra}.txt") == set(packages), extra


def test_every_script_is_a_module_of_the_package():
    assert tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["py-modules"] == SCRIPTS


@pytest.mark.parametrize("extra", ["video", "dev"])
def test_the_video_set_and_the_dev_set_install_pygame_for_classic_control_frames(extra):
    """--capture-video on CartPole, Pendulum and the other classic-control envs draws with pygame:
    gymnasium's classic-control extra brings it (pygame-ce)."""
    packages = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"][extra]
    assert any(p.startswith("gymnasium[classic-control]") for p in packages), packages
