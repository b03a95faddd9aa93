"""Every template in templates/ (examples and other helpers' templates included) passes the stack
emulator's validation with its default parameters; the deployment templates also with every
optional part turned on."""

from __future__ import annotations

from pathlib import Path

import pytest

from crhelper.emulator import StackEmulator

TEMPLATES = Path(__file__).resolve().parents[2] / "templates"
FOUND = sorted(p for p in TEMPLATES.rglob("*") if p.suffix in (".yaml", ".yml", ".json")
               and not p.name.endswith((".bindings.yaml", ".bindings.yml")))


def test_the_directory_holds_the_deployment_templates_and_an_example_per_provider() -> None:
    names = {p.relative_to(TEMPLATES).as_posix() for p in FOUND}
    assert {"deploy-fc3.yaml", "deploy-fc2.yaml", "examples/routes.yaml", "examples/bootgroups.yaml",
            "examples/appcenter.yaml"} <= names


@pytest.mark.parametrize("template", FOUND, ids=lambda p: p.relative_to(TEMPLATES).as_posix())
def test_every_template_passes_validation(template: Path, tmp_path: Path) -> None:
    with StackEmulator(tmp_path) as emulator:
        emulator.validate(template.read_text())


@pytest.mark.parametrize("name", ["deploy-fc3.yaml", "deploy-fc2.yaml"])
def test_the_deployment_templates_pass_with_ecs_and_a_user_provider(name: str, tmp_path: Path) -> None:
    with StackEmulator(tmp_path) as emulator:
        emulator.validate((TEMPLATES / name).read_text(), {"EnableEcs": "true", "UserProvider": "mypkg.cluster:provider",
                                                           "UserCodeObject": "mine.zip", "StateBucketName": "my-state"})


def test_a_bad_parameter_of_a_deployment_template_is_refused_naming_it(tmp_path: Path) -> None:
    from crhelper.emulator.errors import TemplateValidationError

    with StackEmulator(tmp_path) as emulator, pytest.raises(TemplateValidationError) as refused:
        emulator.validate((TEMPLATES / "deploy-fc2.yaml").read_text(), {"Runtime": "python3.12"})
    assert "Runtime" in str(refused.value)
