"""The console in a real headless browser: Debian's Chromium driven by Selenium through Debian's
chromedriver, against a real `LocalRos` (API and console on one loopback port).

Open the console with the printed URL, create a stack from a template file with the parameters
form, watch it complete live, read an output, look at its events, graph and masked parameters,
update it, see a ROS error shown as code + message, and delete it. Set CRHELPER_CONSOLE_SCREENSHOT
to a .png path to keep a screenshot of the stack's page (the README's).

Selenium rather than Playwright: it drives the browser through chromedriver from the same Debian
source package as chromium (versions always match), and the pip package is pure Python;
Playwright's driver is a bundled Node.js program built against its own Chromium revisions.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from crhelper.ros.server import LocalRos

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
#: As root in a closed network: no sandbox (root), nothing phoning home, no first-run dialogs.
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-default-apps", "--disable-extensions", "--window-size=1280,1100")
WAIT = 45.0  # seconds: generous, a CI machine runs other suites beside the browser
SECRET = "s3cr3t-NoEcho-value"

TEMPLATE = """\
ROSTemplateFormatVersion: '2015-09-01'
Description: Jobs and results queues with a notification topic pushing to the jobs queue
Parameters:
  Prefix:
    Type: String
    Default: demo
    Description: Prefix of every queue and topic name
  Secret:
    Type: String
    NoEcho: true
    Default: hush
    Description: Never shown back
  Retention:
    Type: Number
    Default: 345600
    AllowedValues: [345600, 604800]
    Description: How long messages are kept (seconds)
Resources:
  Jobs:
    Type: ALIYUN::MNS::Queue
    Properties:
      QueueName: {'Fn::Sub': '${Prefix}-jobs'}
      MessageRetentionPeriod: {Ref: Retention}
  Results:
    Type: ALIYUN::MNS::Queue
    DependsOn: Jobs
    Properties:
      QueueName: {'Fn::Sub': '${Prefix}-results'}
  Notify:
    Type: ALIYUN::MNS::Topic
    Properties:
      TopicName: {'Fn::Sub': '${Prefix}-notify'}
  ToJobs:
    Type: ALIYUN::MNS::Subscription
    Properties:
      TopicName: {'Fn::GetAtt': [Notify, TopicName]}
      SubscriptionName: to-jobs
      PushType: queue
      Endpoint: {'Fn::Sub': 'acs:mns:${ALIYUN::Region}:${ALIYUN::AccountId}:queues/${Jobs.QueueName}'}
Outputs:
  JobsQueue:
    Description: Name of the jobs queue
    Value: {'Fn::GetAtt': [Jobs, QueueName]}
  JobsUrl:
    Description: Where producers send jobs
    Value: {'Fn::GetAtt': [Jobs, QueueUrl]}
  Retention:
    Description: Seconds a message is kept
    Value: {Ref: Retention}
"""


@pytest.fixture(scope="session")
def required_chromium() -> tuple[str, str]:
    """Chromium and chromedriver (Debian's, as .ci/run installs them) and Selenium; a test without
    them skips with the reason, and fails under CI=true."""
    missing = [path for path in (CHROMIUM, CHROMEDRIVER) if not os.access(path, os.X_OK)]
    if importlib.util.find_spec("selenium") is None:
        missing.append("the selenium package (pip install selenium)")
    if missing:
        message = f"the browser test needs {', '.join(missing)} (apt-get install chromium chromium-driver)"
        if os.environ.get("CI") == "true":
            pytest.fail(f"{message} and CI=true")
        pytest.skip(message)
    return CHROMIUM, CHROMEDRIVER


@pytest.fixture
def browser(required_chromium: tuple[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    monkeypatch.setenv("SE_OFFLINE", "true")  # Selenium Manager never looks for a download
    options = webdriver.ChromeOptions()
    options.binary_location = required_chromium[0]
    for flag in FLAGS:
        options.add_argument(flag)
    profile = tempfile.mkdtemp(prefix="chromium-profile-", dir=tmp_path)
    options.add_argument(f"--user-data-dir={profile}")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    service = Service(executable_path=required_chromium[1], log_output=str(tmp_path / "chromedriver.log"))
    driver = webdriver.Chrome(options=options, service=service)
    driver.set_page_load_timeout(WAIT)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def until(driver: Any, condition: Callable[[Any], Any], what: str) -> Any:
    """Wait for `condition(driver)` to be truthy; a stale or missing element is retried (the page redraws live)."""
    from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException
    from selenium.webdriver.support.ui import WebDriverWait

    try:
        return WebDriverWait(driver, WAIT, poll_frequency=0.05,
                             ignored_exceptions=(NoSuchElementException, StaleElementReferenceException)).until(condition)
    except Exception as error:
        problem = driver.find_element("id", "error").text if driver.find_elements("id", "error") else ""
        raise AssertionError(f"waiting for {what}: {type(error).__name__}; page error banner: {problem!r}; "
                             f"url {driver.current_url}") from error


def by_id(driver: Any, element_id: str) -> Any:
    return driver.find_element("id", element_id)


def settled(driver: Any, status: str) -> None:
    """Wait until the page shows the operation of `status` (CREATE, UPDATE, DELETE) ended, then
    check it ended as `status` (a failure is reported at once, with the stack's reason)."""
    operation = status.split("_")[0]

    def ended(d: Any) -> str | None:
        shown = by_id(d, "stack-status").get_attribute("data-status") or ""
        if shown.endswith("IN_PROGRESS") or not (shown.startswith(operation) or "ROLLBACK" in shown):
            return None
        return shown

    shown = until(driver, ended, f"the stack to settle ({status})")
    assert shown == status, f"{shown}: {by_id(driver, 'stack-reason').text}"


def fill(driver: Any, element_id: str, text: str) -> None:
    field = by_id(driver, element_id)
    field.clear()
    field.send_keys(text)


@pytest.mark.slow
def test_create_watch_read_an_output_update_and_delete_in_the_browser(browser: Any, tmp_path: Path) -> None:
    from selenium.webdriver.support.ui import Select

    template = tmp_path / "queues.yaml"
    template.write_text(TEMPLATE)
    with LocalRos(home=str(tmp_path / "home")) as ros:
        browser.get(ros.console_url)
        until(browser, lambda d: by_id(d, "stacks") and by_id(d, "no-stacks").is_displayed(), "the empty stack list")
        assert "token=" not in browser.current_url  # the script took it out of the address bar
        assert browser.execute_script("return document.cookie") == ""  # HttpOnly: scripts never see it
        cookies = browser.get_cookies()
        assert [c["httpOnly"] and c["sameSite"] for c in cookies] == ["Strict"], cookies

        # create from a template file, with the parameters form ValidateTemplate's answer built
        by_id(browser, "create-button").click()
        until(browser, lambda d: by_id(d, "template-file"), "the create form").send_keys(str(template))
        until(browser, lambda d: by_id(d, "param-Prefix"), "the parameters form")
        assert by_id(browser, "param-Secret").get_attribute("type") == "password"
        assert [o.text for o in Select(by_id(browser, "param-Retention")).options] == ["345600", "604800"]
        assert "4 resources, 3 outputs" in by_id(browser, "template-summary").text
        fill(browser, "stack-name", "browser-queues")
        fill(browser, "param-Prefix", "web")
        fill(browser, "param-Secret", SECRET)
        Select(by_id(browser, "param-Retention")).select_by_visible_text("604800")
        by_id(browser, "submit-create").click()

        # watch it complete without reloading, and read an output
        settled(browser, "CREATE_COMPLETE")
        until(browser, lambda d: by_id(d, "output-JobsQueue").text == "web-jobs", "the JobsQueue output")
        stack_id = browser.current_url.rsplit("/stacks/", 1)[1].split("/")[0]
        assert ros.stacks.get(stack_id)["Status"] == "CREATE_COMPLETE"
        until(browser, lambda d: len(d.find_elements("css selector", "#graph g.node")) == 4, "the graph's nodes")
        edges = {(e.get_attribute("data-from"), e.get_attribute("data-to"))
                 for e in browser.find_elements("css selector", "#graph path.edge")}
        assert edges == {("Jobs", "Results"), ("Jobs", "ToJobs"), ("Notify", "ToJobs")}
        shot = os.environ.get("CRHELPER_CONSOLE_SCREENSHOT")
        if shot:
            browser.save_screenshot(shot)

        # a new tab has the cookie but no token in its URL: the page asks for its session, once
        first = browser.current_window_handle
        browser.switch_to.new_window("tab")
        browser.get(ros.console_url.split("?")[0])
        until(browser, lambda d: d.find_elements("css selector", "#stack-rows tr[data-stack-name='browser-queues']"),
              "the stack listed in a new tab")
        browser.close()
        browser.switch_to.window(first)

        by_id(browser, "tab-link-events").click()
        events = ros.stacks.events(stack_id)
        until(browser, lambda d: len(d.find_elements("css selector", "#events li.event")) == len(events), "every event")
        newest = browser.find_elements("css selector", "#events li.event")[0]
        assert newest.get_attribute("data-logical-id") == "browser-queues"
        assert newest.get_attribute("data-status") == "CREATE_COMPLETE"

        by_id(browser, "tab-link-parameters").click()
        until(browser, lambda d: by_id(d, "parameter-Prefix").text == "web", "the parameters")
        assert by_id(browser, "parameter-Secret").text.strip("*") == "" and SECRET not in browser.page_source
        assert by_id(browser, "parameter-Retention").text == "604800"

        by_id(browser, "tab-link-resources").click()
        until(browser, lambda d: len(d.find_elements("css selector", "#resources tbody tr")) == 4, "the resources")
        by_id(browser, "logs-Jobs").click()
        until(browser, lambda d: "no log lines" in by_id(d, "logs").text, "the (empty) provider logs of a local queue")

        # update: the form starts from the stack's values; NoEcho left empty keeps its value
        by_id(browser, "update-button").click()
        until(browser, lambda d: by_id(d, "param-Prefix").get_attribute("value") == "web", "the update form")
        assert by_id(browser, "param-Secret").get_attribute("value") == ""
        assert Select(by_id(browser, "param-Retention")).first_selected_option.text == "604800"
        Select(by_id(browser, "param-Retention")).select_by_visible_text("345600")
        by_id(browser, "submit-update").click()
        settled(browser, "UPDATE_COMPLETE")
        by_id(browser, "tab-link-outputs").click()
        until(browser, lambda d: by_id(d, "output-Retention").text == "345600", "the updated output")
        assert by_id(browser, "output-JobsQueue").text == "web-jobs"

        # a ROS error is shown as its code and message
        browser.get(ros.console_url.split("?")[0] + "#/create")
        until(browser, lambda d: by_id(d, "template-file"), "the create form").send_keys(str(template))
        until(browser, lambda d: by_id(d, "submit-create").is_enabled(), "the parameters form")
        fill(browser, "stack-name", "browser-queues")
        by_id(browser, "submit-create").click()
        until(browser, lambda d: by_id(d, "form-error").text.startswith("StackExists: "), "the StackExists error")

        # delete from the stack's page, and it leaves the list
        browser.get(ros.console_url.split("?")[0] + f"#/stacks/{stack_id}")
        settled(browser, "UPDATE_COMPLETE")
        deadline = time.monotonic() + WAIT
        while ros.stacks.running_action(stack_id) is not None and time.monotonic() < deadline:
            time.sleep(0.05)  # the update's thread ends just after its status is written
        by_id(browser, "delete-button").click()
        until(browser, lambda d: by_id(d, "confirm-delete"), "the delete confirmation").click()
        settled(browser, "DELETE_COMPLETE")
        by_id(browser, "nav-stacks").click()
        until(browser, lambda d: by_id(d, "no-stacks").is_displayed(), "the empty stack list again")
        assert ros.stacks.list() == []

        severe = [entry["message"] for entry in browser.get_log("browser") if entry["level"] == "SEVERE"
                  and "the server responded with a status of 409" not in entry["message"]]  # the StackExists above
        assert severe == [], severe  # no script error, no CSP violation, no other failed fetch
