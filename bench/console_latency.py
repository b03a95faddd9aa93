"""Time from a resource's completion (the emulator's event timestamp, ms) to its event showing in
the console's Events timeline, in headless Chromium (Selenium), over a real LocalRos.

Run from the repository root: python3 bench/console_latency.py [RESOURCES] [SLEEP_SECONDS]
A chain of Custom::Echo resources (tests/stack/stack_providers.py, in-process), each sleeping, so
events arrive one by one while the page watches.
"""
import json, os, statistics, sys, tempfile, time
from datetime import datetime
from pathlib import Path

REPO = Path.cwd()
sys.path.insert(0, str(REPO))
from crhelper.emulator.delivery_bindings import Bindings
from crhelper.ros.server import LocalRos
from selenium import webdriver
from selenium.webdriver.chrome.service import Service

count = int(sys.argv[1]) if len(sys.argv) > 1 else 20
sleep = float(sys.argv[2]) if len(sys.argv) > 2 else 0.2
TOKEN = "acs:fc:cn-hangzhou:123456789:services/tests/functions/echo"
resources = {}
for i in range(count):
    props = {"ServiceToken": TOKEN, "Timeout": 60, "Parameters": {"Name": f"r{i}", "CreateSleep": sleep}}
    resources[f"R{i:03d}"] = {"Type": "Custom::Echo", "Properties": props, **({"DependsOn": f"R{i-1:03d}"} if i else {})}
template = json.dumps({"ROSTemplateFormatVersion": "2015-09-01", "Resources": resources})

home = tempfile.mkdtemp()
os.environ["CRHELPER_HOME"] = home
options = webdriver.ChromeOptions()
options.binary_location = "/usr/bin/chromium"
for flag in ("--headless --no-sandbox --disable-gpu --disable-quic --no-first-run --disable-background-networking "
             "--disable-component-update --disable-sync --window-size=1280,1000").split():
    options.add_argument(flag)
options.add_argument("--user-data-dir=" + tempfile.mkdtemp())
driver = webdriver.Chrome(options=options, service=Service("/usr/bin/chromedriver"))
bindings = Bindings(providers={TOKEN: f"{REPO / 'tests/stack/stack_providers.py'}:provider"}, mode="inprocess")
try:
    with LocalRos(home=home, bindings=bindings, capture_output=True) as ros:
        driver.get(ros.console_url)
        time.sleep(1.0)
        driver.execute_script("""
          window.__seen = {};
          new MutationObserver(function () {
            document.querySelectorAll('li.event[data-event-id]').forEach(function (li) {
              var id = li.getAttribute('data-event-id');
              if (!(id in window.__seen)) window.__seen[id] = Date.now();
            });
          }).observe(document.body, {childList: true, subtree: true});""")
        stack_id = ros.stacks.create("latency", template, {})
        driver.execute_script("location.hash = arguments[0]", f"#/stacks/{stack_id}/events")
        while ros.stacks.get(stack_id)["Status"].endswith("IN_PROGRESS"):
            time.sleep(0.05)
        time.sleep(1.5)
        seen = driver.execute_script("return window.__seen")
        raw = ros.stacks._emulator.store.events(stack_id)  # ms timestamps (the API shows seconds)
        events = ros.stacks.events(stack_id)
        lat = []
        for event, record in zip(events, raw):
            if event["Status"] != "CREATE_COMPLETE" or event["LogicalResourceId"] == "latency":
                continue
            at = datetime.fromisoformat(record.timestamp.replace("Z", "+00:00")).timestamp()
            if event["EventId"] in seen:
                lat.append(seen[event["EventId"]] / 1000.0 - at)
        # the first events happen before the page switched to the stack: leave them out
        steady = lat[2:]
        print(json.dumps({"resources": count, "completions_seen": len(lat), "of": count,
                          "median_s": round(statistics.median(steady), 4), "max_s": round(max(steady), 4),
                          "p90_s": round(sorted(steady)[int(0.9 * (len(steady) - 1))], 4),
                          "load": os.getloadavg()}))
finally:
    driver.quit()
