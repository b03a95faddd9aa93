"""The bindings format: files, -s flags, canonical tokens, faults, defaults and remembered bindings."""

from __future__ import annotations

from pathlib import Path

import pytest
from stack_support import FC2, QUEUE

from crhelper.emulator.delivery_bindings import (
    BindingError,
    Bindings,
    Faults,
    default_bindings_path,
    load_bindings,
    remember_bindings,
    remembered_bindings,
)


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def test_file_binds_tokens_with_paths_relative_to_the_file(tmp_path: Path) -> None:
    (tmp_path / "conf").mkdir()
    source = write(tmp_path / "conf" / "b.yaml", f"""
bindings:
  {FC2}: ../providers/mine.py:provider
  "acs:mns:cn-hangzhou:123456789:/queues/echo-requests": mypkg.module:provider
mode: inprocess
faults: {{duplicate: true, response_fail_first: 2}}
""")
    bindings = load_bindings(source)
    assert bindings.provider_for(FC2) == f"{(tmp_path / 'providers' / 'mine.py').resolve()}:provider"
    assert bindings.provider_for(QUEUE) == "mypkg.module:provider"  # the leading-slash form is the same queue
    assert bindings.mode == "inprocess"
    assert bindings.faults == Faults(duplicate=True, response_fail_first=2)


def test_flags_add_and_override_and_split_at_the_last_equals() -> None:
    bindings = Bindings({FC2: "a.b:provider"}).with_flags([f"{FC2}=c.d:other", f"{QUEUE}=e.f:provider"])
    assert bindings.providers == {FC2: "c.d:other", QUEUE: "e.f:provider"}


@pytest.mark.parametrize("text,message", [
    ("bindings: {web:http://x/: a.b:provider}", "web tokens are POSTed to their URL for real and cannot be bound"),
    ("bindings: {'acs:fc:cn-hangzhou:1:functions/f': nocolon}", "the provider must be 'package.module:provider'"),
    ("bindings: {'acs:ecs:cn-hangzhou:1:x/y': a.b:p}", "product 'ecs' is not supported"),
    ("binding: {}", "unknown key(s) binding; allowed: bindings, environment, faults, mode"),
    ("mode: cloud", "mode must be one of endpoints, inprocess, got 'cloud'"),
    ("faults: {explode: true}", "unknown fault(s) explode"),
    ("faults: {response_fail_status: 200}", "faults.response_fail_status: must be an HTTP error status 400-599"),
    ("[1, 2]", "must be a map with a 'bindings' key"),
])
def test_bad_files_say_which_key_and_rule(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(BindingError) as info:
        load_bindings(write(tmp_path / "b.yaml", text))
    assert message in str(info.value)


def test_bad_flag_explains_the_form() -> None:
    with pytest.raises(BindingError, match="expected TOKEN=MODULE:provider"):
        Bindings().with_flags(["just-a-token"])


def test_missing_file_is_a_binding_error(tmp_path: Path) -> None:
    with pytest.raises(BindingError, match="cannot be read"):
        load_bindings(tmp_path / "nope.yaml")


def test_faults_merge_cli_values_over_the_file() -> None:
    merged = Faults(duplicate=True, response_delay=0.5).merged(duplicate=None, response_delay=None, response_fail_first=3)
    assert merged == Faults(duplicate=True, response_delay=0.5, response_fail_first=3)


def test_bindings_next_to_the_template_are_found(tmp_path: Path) -> None:
    template = write(tmp_path / "app.yaml", "x")
    assert default_bindings_path(template) is None
    companion = write(tmp_path / "app.bindings.yaml", "bindings: {}")
    assert default_bindings_path(template) == companion


def test_bindings_are_remembered_per_stack(tmp_path: Path) -> None:
    remember_bindings(tmp_path, "one", Bindings({FC2: "/abs/p.py:provider"}, mode="inprocess", faults=Faults(duplicate=True)))
    remember_bindings(tmp_path, "two", Bindings({QUEUE: "m.n:provider"}))
    assert remembered_bindings(tmp_path, "one") == Bindings({FC2: "/abs/p.py:provider"}, mode="inprocess")
    assert remembered_bindings(tmp_path, "two").providers == {QUEUE: "m.n:provider"}
    assert remembered_bindings(tmp_path, "three") == Bindings()
