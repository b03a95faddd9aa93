"""Locale (spec §6, test case 12): labels and err_code<N> in the requested language, fallbacks."""

from __future__ import annotations

import pytest

from appcenter_support import config_of, load
from handlers.appcenter.locale import Translator, language_key


def test_case_12_an_exit_code_shows_the_packages_err_code_message() -> None:
    zookeeper = Translator(load("zookeeper").locales, "zh-cn")
    message = zookeeper.error_message(210)
    assert message is not None and message.startswith("当前无法获取待删除节点的角色")
    assert zookeeper.error_message(1) is None
    # English has no err_code210: the message still reaches the user in the language that has it
    assert Translator(load("zookeeper").locales, "en").error_message(210) == message


def test_case_12_a_missing_key_shows_the_source_string() -> None:
    english = Translator(load("zookeeper").locales, "en")
    assert english.text("Participant Node") == "ZooKeeper Node"
    assert english.text("Node Count") == "Node Count"
    assert Translator(load("zookeeper").locales, "zh-cn").text("Node Count") == "节点数量"
    assert Translator(load("zookeeper").locales, None).text("Node Count") == "Node Count"
    assert Translator(load("zookeeper").locales, "fr").text("Node Count") == "Node Count"


@pytest.mark.parametrize("asked, found", [("zh-cn", "zh-cn"), ("zh_CN", "zh-cn"), ("ZH-CN", "zh-cn"), ("zh", "zh-cn"),
                                          ("en-US", "en"), ("en", "en"), ("fr", None), ("", None)])
def test_languages_match_loosely(asked: str, found: str | None) -> None:
    assert language_key(asked, {"en": {}, "zh-cn": {}}) == found


def test_form_labels_and_the_upgrade_notice() -> None:
    zh = Translator(load("zookeeper").locales, "zh-cn")
    labels = zh.labels(config_of("zookeeper"))
    assert labels["cluster.zk_node.count"] == {"label": "节点数量", "description": "要创建的节点数量"}
    assert labels["env.tickTime"]["label"] == "tickTime"  # no translation: the source string
    notice = zh.upgrade_notice()
    assert notice is not None and notice.startswith("升级期间会发生主从切换")
    assert Translator(load("etcd").locales, "en").upgrade_notice() is None
