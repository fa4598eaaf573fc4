"""Headless Chromium driven over the DevTools protocol on a pipe.

``chromium --remote-debugging-pipe`` reads protocol messages (JSON, each ended
by a NUL byte) from file descriptor 3 and writes its answers to descriptor 4,
so the test needs neither a websocket client nor a browser download: Debian's
``chromium`` package is enough.
"""

import fcntl
import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

# Flags that keep a headless run quiet, offline and reproducible.
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--hide-scrollbars",
    "--remote-debugging-pipe",
)
CANDIDATES = ("chromium", "chromium-browser", "google-chrome")


def find_chromium():
    """Path of a Chromium executable, or None."""
    for name in CANDIDATES:
        path = shutil.which(name)
        if path:
            return path
    return None


class ProtocolError(RuntimeError):
    """Chromium answered a command with an error."""


class Chromium:
    """One headless Chromium process with one page (tab) attached."""

    def __init__(self, executable, timeout=60):
        self.profile = tempfile.mkdtemp(prefix="kernelref-chromium-")
        to_browser_r, self._to_browser = os.pipe()
        self._from_browser, from_browser_w = os.pipe()
        # above 10, so that moving them onto 3 and 4 cannot overwrite one another
        ends = [
            fcntl.fcntl(fd, fcntl.F_DUPFD, 10) for fd in (to_browser_r, from_browser_w)
        ]
        os.close(to_browser_r)
        os.close(from_browser_w)
        shell = f'exec "$0" "$@" 3<&{ends[0]} 4>&{ends[1]} {ends[0]}<&- {ends[1]}>&-'
        self.process = subprocess.Popen(
            [
                "/bin/bash",
                "-c",
                shell,
                executable,
                *FLAGS,
                f"--user-data-dir={self.profile}",
                "about:blank",
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            pass_fds=ends,
        )
        for fd in ends:
            os.close(fd)
        self.timeout = timeout
        self._next_id = 0
        self._buffer = b""
        self.session = None
        target = self.call("Target.createTarget", url="about:blank")["targetId"]
        self.session = self.call(
            "Target.attachToTarget", targetId=target, flatten=True
        )["sessionId"]
        self.call("Page.enable")
        self.call("Runtime.enable")

    def _send(self, message):
        os.write(self._to_browser, json.dumps(message).encode() + b"\0")

    def _receive(self):
        while b"\0" not in self._buffer:
            chunk = os.read(self._from_browser, 1 << 16)
            if not chunk:
                raise ProtocolError("Chromium closed the DevTools pipe")
            self._buffer += chunk
        message, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(message)

    def call(self, method, **params):
        """Send one command (to the attached page if there is one) and wait."""
        self._next_id += 1
        message = {"id": self._next_id, "method": method, "params": params}
        if self.session and not method.startswith("Target."):
            message["sessionId"] = self.session
        self._send(message)
        while True:
            answer = self._receive()
            if answer.get("id") == self._next_id:
                if "error" in answer:
                    raise ProtocolError(f"{method}: {answer['error']}")
                return answer.get("result", {})

    def wait_for_event(self, method):
        while True:
            event = self._receive()
            if event.get("method") == method:
                return event

    def set_width(self, width, height=900, mobile=False):
        self.call(
            "Emulation.setDeviceMetricsOverride",
            width=width,
            height=height,
            deviceScaleFactor=1,
            mobile=mobile,
        )

    def open(self, url):
        """Load ``url`` and wait for its load event."""
        self.call("Page.navigate", url=url)
        self.wait_for_event("Page.loadEventFired")

    def evaluate(self, expression):
        """Value of a JavaScript expression (a promise is awaited)."""
        result = self.call(
            "Runtime.evaluate",
            expression=expression,
            awaitPromise=True,
            returnByValue=True,
            timeout=self.timeout * 1000,
        )
        if "exceptionDetails" in result:
            raise ProtocolError(f"JavaScript failed: {result['exceptionDetails']}")
        return result["result"].get("value")

    def screenshot(self, path):
        import base64

        data = self.call("Page.captureScreenshot", format="png")["data"]
        Path(path).write_bytes(base64.b64decode(data))

    def close(self):
        try:
            self._send({"id": 0, "method": "Browser.close"})
            self.process.wait(timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            self.process.kill()
            self.process.wait()
        finally:
            os.close(self._to_browser)
            os.close(self._from_browser)
            shutil.rmtree(self.profile, ignore_errors=True)


# Waits for MathJax (its script is deferred, so it may still be loading when the
# load event fires) and the fonts, folds the cells, and reports what would print
# wrongly: math left as TeX, images that did not load.
PREPARE_FOR_PRINT = r"""
(async () => {
  for (let i = 0; i < 600 && !(window.MathJax && MathJax.startup); i++) {
    await new Promise((r) => setTimeout(r, 100));
  }
  const problems = [];
  if (window.MathJax && MathJax.startup) {
    await MathJax.startup.promise;
  } else if (document.querySelector('div.math, span.math')) {
    problems.push('MathJax did not load, the equations would print as TeX');
  }
  await document.fonts.ready;
  document.querySelectorAll('details').forEach((d) => { d.open = false; });
  const raw = document.querySelectorAll('div.math:not(:has(mjx-container))').length;
  if (raw) problems.push(`${raw} display equations were not typeset`);
  const broken = [...document.images].filter((i) => !(i.complete && i.naturalWidth));
  if (broken.length) problems.push(`${broken.length} images did not load`);
  return problems;
})()
"""


def print_to_pdf(html, pdf, executable=None):
    """Print a built page (MathJax typeset first) to a PDF file: ``make pdf``."""
    import base64

    executable = executable or find_chromium()
    if executable is None:
        raise SystemExit("Chromium is needed for the PDF: apt-get install chromium")
    browser = Chromium(executable, timeout=600)
    try:
        browser.open(Path(html).resolve().as_uri())
        problems = browser.evaluate(PREPARE_FOR_PRINT)
        if problems:
            raise SystemExit(f"{html} is not ready to print: {'; '.join(problems)}")
        data = browser.call(
            "Page.printToPDF",
            printBackground=True,
            preferCSSPageSize=False,
            paperWidth=8.27,
            paperHeight=11.69,
            marginTop=0.6,
            marginBottom=0.6,
            marginLeft=0.5,
            marginRight=0.5,
        )["data"]
        Path(pdf).write_bytes(base64.b64decode(data))
    finally:
        browser.close()


if __name__ == "__main__":
    import sys

    if len(sys.argv) != 3:
        raise SystemExit("usage: python tests/book/chromium.py PAGE.html OUT.pdf")
    print_to_pdf(sys.argv[1], sys.argv[2])
