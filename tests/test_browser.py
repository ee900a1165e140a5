"""A generated report in a real browser: headless Chromium (Debian's package; .ci/run
installs it), driven over the DevTools protocol with websocket-client. Fails on any
console error, uncaught exception or network request, checks the screenshot is not
blank and that the tables sort."""

import base64
import io
import json
import re
import shutil
import subprocess
import time
import urllib.request

import pytest
from click.testing import CliRunner

from gobrrr.cli import cli

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(CHROMIUM is None,
                                reason="no chromium here (.ci/run installs Debian's)")
# Keep Chromium off the closed network and out of any profile (README of the machine).
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--hide-scrollbars", "--remote-allow-origins=*", "--window-size=1100,1400"]


class Page:
    """The smallest DevTools client: send a command, collect events until its reply."""

    def __init__(self, ws_url):
        import websocket

        self.ws = websocket.create_connection(ws_url, timeout=30, suppress_origin=True)
        self.next_id = 0
        self.events = []

    def send(self, method, **params):
        self.next_id += 1
        self.ws.send(json.dumps({"id": self.next_id, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv())
            if msg.get("id") == self.next_id:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result", {})
            self.events.append(msg)

    def wait_for(self, method, timeout_s=30.0):
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if any(e.get("method") == method for e in self.events):
                return
            self.events.append(json.loads(self.ws.recv()))
        raise TimeoutError(method)

    def eval(self, expr):
        r = self.send("Runtime.evaluate", expression=expr, returnByValue=True)
        return r["result"].get("value")


@pytest.fixture(scope="module")
def report_html(tmp_path_factory, calibrated_cache):
    tmp = tmp_path_factory.mktemp("browser")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("XDG_CACHE_HOME", str(calibrated_cache))  # the session's calibration
        r = CliRunner().invoke(cli, ["doctor", "examples:transformer", "--device", "cpu",
                                     "-q", "--time-budget", "0.2", "--batch-size", "2",
                                     "--html", str(tmp / "report.html")])
    assert r.exit_code == 0, r.output
    return tmp / "report.html"


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    profile = tmp_path_factory.mktemp("chromium-profile")
    proc = subprocess.Popen([CHROMIUM, *FLAGS, f"--user-data-dir={profile}",
                             "--remote-debugging-port=0", "about:blank"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        port = None
        deadline = time.monotonic() + 30
        while port is None and time.monotonic() < deadline:
            line = proc.stderr.readline()
            m = re.search(r"DevTools listening on ws://127\.0\.0\.1:(\d+)/", line)
            port = m and m.group(1)
            if not line and proc.poll() is not None:
                break
        assert port, "chromium did not start its DevTools endpoint"
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as r:
            targets = json.load(r)
        ws_url = next(t["webSocketDebuggerUrl"] for t in targets if t["type"] == "page")
        p = Page(ws_url)
        yield p
        p.ws.close()
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()


def test_report_loads_without_errors_and_is_not_blank(page, report_html):
    for domain in ("Page", "Runtime", "Log", "Network"):
        page.send(f"{domain}.enable")
    page.events.clear()
    page.send("Page.navigate", url=report_html.as_uri())
    page.wait_for("Page.loadEventFired")
    assert page.eval("document.title").startswith("gobrrr doctor: examples:")

    errors = []
    for e in page.events:
        m, p = e.get("method"), e.get("params", {})
        if m == "Runtime.exceptionThrown":
            det = p["exceptionDetails"]
            errors.append(det.get("exception", {}).get("description") or det.get("text"))
        elif m == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
            errors.append(str(p.get("args")))
        elif m == "Log.entryAdded" and p["entry"]["level"] == "error":
            errors.append(p["entry"]["text"])
    assert errors == []
    # Self-contained: the only request is the file itself.
    urls = [e["params"]["request"]["url"] for e in page.events
            if e.get("method") == "Network.requestWillBeSent"]
    assert urls == [report_html.as_uri()]

    # All three figures are rendered at a real size.
    sizes = page.eval("Array.from(document.querySelectorAll('svg')).map("
                      "s => [s.getBoundingClientRect().width, s.getBoundingClientRect().height])")
    assert len(sizes) == 3 and all(w > 300 and h > 100 for w, h in sizes), sizes

    shot = page.send("Page.captureScreenshot", format="png")
    from matplotlib.image import imread

    pixels = imread(io.BytesIO(base64.b64decode(shot["data"])), format="png")[..., :3]
    assert pixels.shape[0] >= 1000 and pixels.shape[1] >= 1000
    # Not blank: a white page with a few lines of text has under 1% non-white pixels and
    # no color; the verdict banner and the budget bar are large colored areas.
    non_white = (pixels.min(axis=2) < 0.9).mean()
    colored = (pixels.max(axis=2) - pixels.min(axis=2) > 0.25).mean()
    assert non_white > 0.05, non_white
    assert colored > 0.02, colored


def test_tables_sort_in_the_browser(page, report_html):
    page.send("Page.enable")
    page.events.clear()  # a load event of an earlier navigation must not count
    page.send("Page.navigate", url=report_html.as_uri())
    page.wait_for("Page.loadEventFired")
    col = "#ops table th:nth-child(4)"  # time
    values = ("Array.from(document.querySelectorAll('#ops tbody tr td:nth-child(4)'))"
              ".map(td => parseFloat(td.dataset.v))")
    page.eval(f"document.querySelector('{col}').click()")
    asc = page.eval(values)
    page.eval(f"document.querySelector('{col}').click()")
    desc = page.eval(values)
    assert len(asc) >= 3
    assert asc == sorted(asc) and desc == sorted(desc, reverse=True)
