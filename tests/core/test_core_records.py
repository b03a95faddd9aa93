"""The plain read-only records that replaced dataclasses on the cold-start path (issue 18): they must
keep what the dataclasses gave (read-only fields, value equality where it was used, a useful repr),
and the import path must not grow dataclasses back."""

from __future__ import annotations

import copy
import dataclasses
import pickle
import subprocess
import sys

import pytest

from crhelper.config import DeliverySettings, Settings
from crhelper.envelopes import Envelope
from crhelper.outbound import DeliveryReport
from crhelper.registry import Registration, TypeOptions
from crhelper.runtime import Answer, Outcome
from crhelper.store.url import SqliteSettings, parse_store_url


def test_records_are_read_only() -> None:
    report = DeliveryReport(True, 1, status=200)
    with pytest.raises(AttributeError, match="read-only"):
        report.delivered = False  # type: ignore[misc]
    with pytest.raises(AttributeError, match="read-only"):
        del report.status
    with pytest.raises(AttributeError):
        report.extra = 1  # type: ignore[attr-defined]  # __slots__: no new attributes either


def test_records_survive_pickle_and_copy() -> None:
    """Records may cross process boundaries (multiprocessing) or be copied; frozen dataclasses allowed both."""
    settings = SqliteSettings("/var/lib/state.sqlite")
    assert pickle.loads(pickle.dumps(settings)) == settings
    assert copy.deepcopy(DeliverySettings(allowed_hosts=("h",))) == DeliverySettings(allowed_hosts=("h",))
    report = copy.copy(DeliveryReport(True, 2, status=204))
    assert (report.delivered, report.attempts, report.status) == (True, 2, 204)


def test_value_records_compare_and_hash_by_their_fields() -> None:
    assert DeliverySettings() == DeliverySettings()
    assert DeliverySettings(method="PUT") != DeliverySettings()
    assert hash(DeliverySettings(allowed_hosts=("a",))) == hash(DeliverySettings(allowed_hosts=("a",)))
    assert parse_store_url("sqlite:///x.db") == SqliteSettings("x.db")
    assert SqliteSettings("x.db") != "x.db"
    assert TypeOptions(30.0) == TypeOptions(30.0) != TypeOptions(31.0)
    assert Envelope("mns", "m1", {"a": 1}, None) == Envelope("mns", "m1", {"a": 1}, None, {})
    # Settings stays a dataclass (providers `dataclasses.replace` it); its nested record still compares
    assert dataclasses.replace(Settings(), default_type="Custom::X").delivery == DeliverySettings()


def test_identity_records_are_not_compared_by_value() -> None:
    assert Outcome(None, False) != Outcome(None, False)
    assert Registration(print) == Registration(print)  # mutable, compared like the dataclass it replaces


def test_repr_names_the_fields_and_hides_what_the_dataclass_hid() -> None:
    assert repr(DeliveryReport(False, 0, error="not sent")) == (
        "DeliveryReport(delivered=False, attempts=0, status=None, url_kind=None, error='not sent', final=False)")
    shown = repr(Answer({"Status": "SUCCESS"}, error="e"))
    assert "body={'Status': 'SUCCESS'}" in shown and "verdict" not in shown
    assert Answer({"x": 1}).with_body({"y": 2}, None).body == {"y": 2}


@pytest.mark.slow
def test_the_provider_import_path_generates_few_dataclasses() -> None:
    """What the FC cold start pays: each dataclass generated at import costs ~1 ms (was 22 of them)."""
    code = (
        "import dataclasses, sys\n"
        "made = []\n"
        "real = dataclasses._process_class\n"
        "def counting(cls, *a, **k):\n"
        "    made.append(cls.__module__ + '.' + cls.__qualname__)\n"
        "    return real(cls, *a, **k)\n"
        "dataclasses._process_class = counting\n"
        "import crhelper.provider, crhelper.transports.fc\n"
        "print('\\n'.join(m for m in made if m.startswith('crhelper')))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    made = done.stdout.split()
    assert len(made) <= 8, made  # Settings, Request, Result, InProgress and 4 store records
    for converted in ("crhelper.config.DeliverySettings", "crhelper.runtime.Answer", "crhelper.outbound.DeliveryReport"):
        assert converted not in made
