#!/usr/bin/env python3
"""test_chat_page.py: the chat page of `seer serve` (GET /) in headless Chromium.

Starts `seer serve` with an API key on SmolLM2-135M-Instruct (models/, scripts/get-model.sh;
stories260K from the tests' data when it is absent), opens the page in headless Chromium and
drives it through the DevTools protocol (a small websocket client below, the standard library
only): the page loads without the key and says that one is needed; the key typed into its
field lets it read the model's id; with a system prompt set, a message typed into the input
and sent with Enter gets its answer on the page with a line of tokens/s, the drafter and its
acceptance, and the answer is the server's greedy answer to the same request, byte for
byte; a second message carries the first exchange with it (multi-turn, as the request the
page sent shows); a long answer is seen growing on the page while it streams, and the stop
button aborts it (the server counts the request cancelled); HTML typed into a message stays
text; a message refused (no key yet) leaves no turn behind; "New chat" forgets the
conversation. `--screenshot FILE` saves the page with its conversation (docs/img/chat.png).

Exit 77 (CTest's skip) only when no Chromium is found.
Not for: the API's fields and errors (test_serve.py checks those, the page's numbers too).
"""
import argparse
import base64
import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_serve import KEY, Server, check, fail, metrics, raw  # noqa: E402

SKIP = 77
SYSTEM = "You are a helpful assistant."


class WebSocket:
    """A websocket client, enough for Chromium's DevTools endpoint (RFC 6455: text frames,
    masked from the client, fragments joined; pings answered)."""

    def __init__(self, url, timeout):
        assert url.startswith("ws://")
        hostport, path = url[5:].split("/", 1)
        host, port = hostport.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        key = base64.b64encode(os.urandom(16)).decode()
        self.sock.sendall((f"GET /{path} HTTP/1.1\r\nHost: {hostport}\r\nUpgrade: websocket\r\n"
                           f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
                           "Sec-WebSocket-Version: 13\r\n\r\n").encode())
        self.buf = b""
        while b"\r\n\r\n" not in self.buf:
            self._fill()
        head, self.buf = self.buf.split(b"\r\n\r\n", 1)
        if not head.startswith(b"HTTP/1.1 101"):
            raise OSError(f"websocket handshake: {head[:200]!r}")

    def _fill(self):
        d = self.sock.recv(1 << 16)
        if not d:
            raise OSError("the DevTools connection closed")
        self.buf += d

    def _read(self, n):
        while len(self.buf) < n:
            self._fill()
        d, self.buf = self.buf[:n], self.buf[n:]
        return d

    def _send_frame(self, op, payload):
        mask = os.urandom(4)
        n = len(payload)
        head = bytes([0x80 | op])
        if n < 126:
            head += bytes([0x80 | n])
        elif n < 1 << 16:
            head += bytes([0x80 | 126]) + struct.pack(">H", n)
        else:
            head += bytes([0x80 | 127]) + struct.pack(">Q", n)
        body = bytes(b ^ mask[i & 3] for i, b in enumerate(payload))
        self.sock.sendall(head + mask + body)

    def send(self, text):
        self._send_frame(1, text.encode())

    def recv(self, timeout):
        self.sock.settimeout(timeout)
        parts = []
        while True:
            h = self._read(2)
            fin, op, n = h[0] & 0x80, h[0] & 0x0F, h[1] & 0x7F
            if n == 126:
                n = struct.unpack(">H", self._read(2))[0]
            elif n == 127:
                n = struct.unpack(">Q", self._read(8))[0]
            mask = self._read(4) if h[1] & 0x80 else None
            data = self._read(n)
            if mask:
                data = bytes(b ^ mask[i & 3] for i, b in enumerate(data))
            if op == 9:  # ping
                self._send_frame(10, data)
                continue
            if op == 8:
                raise OSError("the DevTools connection closed")
            if op == 10:
                continue
            parts.append(data)
            if fin:
                return b"".join(parts).decode()

    def close(self):
        self.sock.close()


class Page:
    """One page target over the DevTools protocol: commands, and the events that came."""

    def __init__(self, ws_url):
        self.ws = WebSocket(ws_url, 30)
        self.next_id = 0
        self.events = []

    def call(self, method, timeout=60, **params):
        self.next_id += 1
        mid = self.next_id
        self.ws.send(json.dumps({"id": mid, "method": method, "params": params}))
        deadline = time.time() + timeout
        while True:
            left = deadline - time.time()
            if left <= 0:
                fail(f"DevTools: no answer to {method} in {timeout} s")
            m = json.loads(self.ws.recv(left))
            if m.get("id") == mid:
                if "error" in m:
                    fail(f"DevTools {method}: {m['error']}")
                return m.get("result", {})
            if "method" in m:
                self.events.append(m)

    def wait_event(self, name, timeout=60):
        deadline = time.time() + timeout
        while True:
            for i, e in enumerate(self.events):
                if e["method"] == name:
                    return self.events.pop(i)
            left = deadline - time.time()
            if left <= 0:
                fail(f"DevTools: no {name} in {timeout} s")
            m = json.loads(self.ws.recv(left))
            if "method" in m:
                self.events.append(m)

    def js(self, expr, timeout=60):
        r = self.call("Runtime.evaluate", timeout=timeout, expression=expr, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in r:
            fail(f"page script {expr[:80]!r}: {r['exceptionDetails']}")
        return r["result"].get("value")

    def wait_js(self, cond, timeout=60, what=None):
        """Waits in the page (it polls itself) until the expression cond is true."""
        ok = self.js("new Promise((res) => { const t0 = Date.now(); (function poll() { let v = false;"
                     f" try {{ v = ({cond}); }} catch (e) {{}}"
                     f" if (v) return res(true); if (Date.now() - t0 > {int(timeout * 1000)}) return res(false);"
                     " setTimeout(poll, 20); })(); })", timeout=timeout + 30)
        check(ok, f"the page: {what or cond} did not happen in {timeout} s")

    def type_into(self, element_id, text):
        self.js(f"document.getElementById({json.dumps(element_id)}).focus()")
        self.call("Input.insertText", text=text)

    def press_enter(self):
        for kind in ("keyDown", "keyUp"):
            self.call("Input.dispatchKeyEvent", type=kind, key="Enter", code="Enter", windowsVirtualKeyCode=13,
                      nativeVirtualKeyCode=13, **({"text": "\r"} if kind == "keyDown" else {}))

    def click(self, element_id):
        r = self.js(f"(() => {{ const b = document.getElementById({json.dumps(element_id)}).getBoundingClientRect();"
                    " return [b.x + b.width / 2, b.y + b.height / 2]; })()")
        for kind in ("mousePressed", "mouseReleased"):
            self.call("Input.dispatchMouseEvent", type=kind, x=r[0], y=r[1], button="left", clickCount=1)

    def chat_requests(self):
        """The bodies and headers of the page's POSTs to /v1/chat/completions so far."""
        out = []
        for e in self.events:
            if e["method"] == "Network.requestWillBeSent":
                req = e["params"]["request"]
                if req["url"].endswith("/v1/chat/completions") and req["method"] == "POST":
                    out.append((json.loads(req.get("postData") or "null"), req.get("headers", {})))
        return out


def find_chromium():
    for name in (os.environ.get("SEER_CHROMIUM"), "chromium", "chromium-browser", "google-chrome"):
        if name and shutil.which(name):
            return shutil.which(name)
    return None


def start_chromium(exe, profile):
    p = subprocess.Popen(
        [exe, "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
         "--no-default-browser-check", "--disable-extensions", "--disable-background-networking", "--disable-sync",
         "--mute-audio", "--remote-debugging-address=127.0.0.1", "--remote-debugging-port=0",
         f"--user-data-dir={profile}", "--window-size=1100,720", "about:blank"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True)
    log, url = [], None
    deadline = time.time() + 60
    while time.time() < deadline:
        line = p.stderr.readline()
        if not line:
            break
        log.append(line)
        if line.startswith("DevTools listening on "):
            url = line.split(" on ", 1)[1].strip()
            break
    if not url:
        p.kill()
        fail("Chromium did not start: " + "".join(log[-20:]))
    threading.Thread(target=lambda: [None for _ in p.stderr], daemon=True).start()
    return p, url


def page_target(browser_url):
    hostport = browser_url[5:].split("/", 1)[0]
    with urllib.request.urlopen(f"http://{hostport}/json/list", timeout=30) as r:
        targets = json.loads(r.read())
    pages = [t for t in targets if t.get("type") == "page"]
    check(pages, f"no page target: {targets}")
    return pages[0]["webSocketDebuggerUrl"]


# what the page's recorder keeps: [state, length of the newest answer] on every change of the log
RECORDER = """(() => { window.__seen = [];
  new MutationObserver(() => {
    const a = document.querySelectorAll('#log .msg.assistant .text');
    window.__seen.push([document.body.dataset.state, a.length ? a[a.length - 1].textContent.length : -1]);
  }).observe(document.getElementById('log'), {subtree: true, childList: true, characterData: true}); })()"""

LAST_ANSWER = "(() => { const a = document.querySelectorAll('#log .msg.assistant'); return a.length ? " \
              "[a[a.length - 1].querySelector('.text').textContent, a[a.length - 1].querySelector('.stats').textContent]" \
              " : null; })()"


def send_message(page, text):
    """Types a message, sends it with Enter, waits for the answer; returns (answer, stats)."""
    page.js("window.__seen = window.__seen || []; window.__seen.length = 0")
    n = page.js("document.querySelectorAll('#log .msg.assistant').length")
    page.type_into("input", text)
    page.press_enter()
    page.wait_js(f"document.querySelectorAll('#log .msg.assistant').length === {n + 1}"
                 " && document.body.dataset.state === 'idle'", 120, "the answer")
    return page.js(LAST_ANSWER)


def run(a, exe, model, model_id):
    # stories260K's 512-token context would let the answer to be stopped end first
    longer = ["--ctx", "8192", "--ctx-beyond-trained"] if model_id == "stories260K" else []
    srv = Server(a.seer, model, ["--spec", "ngram", "--parallel", "2", "--spec-calibrate-budget", "0.5"] + longer)
    profile = tempfile.mkdtemp(prefix="seer-chromium-")
    chrome = None
    try:
        chrome, url = start_chromium(exe, profile)
        page = Page(page_target(url))
        page.call("Page.enable")
        page.call("Network.enable")
        page.call("Emulation.setDeviceMetricsOverride", width=1100, height=720, deviceScaleFactor=1, mobile=False)
        base = f"http://127.0.0.1:{srv.port}/"
        page.call("Page.navigate", url=base)
        page.wait_event("Page.loadEventFired")
        # loaded without the key; the page says that one is needed
        check(page.js("document.title") == "seer", "the page's title")
        page.wait_js("document.getElementById('status').textContent.includes('API key')", 30, "the key hint")
        # a message sent without the key: the error shown, the message back in the input, no turn kept
        page.type_into("input", "Hello?")
        page.press_enter()
        page.wait_js("document.getElementById('status').textContent.includes('HTTP 401')"
                     " && document.body.dataset.state === 'idle'", 30, "the 401")
        check(page.js("document.getElementById('input').value") == "Hello?"
              and page.js("document.querySelectorAll('#log .msg').length") == 0, "a refused message")
        refused = page.chat_requests()
        check(len(refused) == 1 and "Authorization" not in refused[0][1], f"the refused request: {refused}")
        page.events = [e for e in page.events if e["method"] != "Network.requestWillBeSent"]
        page.js("document.getElementById('input').value = ''")
        # the key typed in: the page reads the model's id with it
        page.type_into("key", KEY)
        page.js("document.getElementById('input').focus()")  # leaving the field: its change event
        page.wait_js(f"document.getElementById('model').textContent === {json.dumps(model_id)}", 30, "the model id")
        page.js("(() => { const set = (id, v) => { const e = document.getElementById(id); e.value = v;"
                " e.dispatchEvent(new Event('change')); }; set('temperature', '0'); set('max-tokens', '48'); })()")
        page.type_into("system", SYSTEM)
        page.js(RECORDER)
        # the first message: streamed, with its numbers
        t0 = time.time()
        answer, stats = send_message(page, "What is the capital of France?")
        print(f"first answer in {time.time() - t0:.1f} s: {answer[:80]!r} [{stats}]")
        check(len(answer) > 0, "the first answer is empty")
        check("tokens/s" in stats and "drafter ngram" in stats and ("acceptance" in stats or "nothing drafted" in stats),
              f"the answer's numbers: {stats!r}")
        reqs = page.chat_requests()
        check(len(reqs) == 1, f"{len(reqs)} requests for one message")
        body, headers = reqs[0]
        check(body["stream"] is True and body["temperature"] == 0 and body["max_tokens"] == 48
              and body["messages"] == [{"role": "system", "content": SYSTEM},
                                       {"role": "user", "content": "What is the capital of France?"}],
              f"the page's request: {body}")
        check(headers.get("Authorization") == "Bearer " + KEY, f"the page's key header: {headers}")
        # what the page shows is the server's greedy answer to the same request
        whole = dict(body, stream=False)
        whole.pop("stream_options", None)
        st, data = raw(srv.port, "POST", "/v1/chat/completions", json.dumps(whole))
        check(st == 200, f"the same request, whole: {st} {data[:200]!r}")
        want = json.loads(data)["choices"][0]["message"]["content"]
        check(answer == want, f"the page shows {answer!r}; the server answers {want!r}")
        # the second message carries the conversation
        answer2, stats2 = send_message(page, "And the capital of Germany?")
        check(len(answer2) > 0 and "tokens/s" in stats2, f"the second answer: {answer2!r} [{stats2}]")
        body2 = page.chat_requests()[-1][0]
        check(body2["messages"] == [{"role": "system", "content": SYSTEM},
                                    {"role": "user", "content": "What is the capital of France?"},
                                    {"role": "assistant", "content": answer},
                                    {"role": "user", "content": "And the capital of Germany?"}],
              f"the second request's messages: {body2['messages']}")
        check(page.js("document.querySelectorAll('#log .msg').length") == 4, "four messages on the page")
        if a.screenshot:
            shot = page.call("Page.captureScreenshot", format="png")
            with open(a.screenshot, "wb") as f:
                f.write(base64.b64decode(shot["data"]))
            print("screenshot:", a.screenshot)
        # stop: a long answer (no end of text) aborted once it streams; HTML typed stays text
        cancelled0 = metrics(srv.port).get('seer_requests_finished_total{reason="cancelled"}', 0)
        page.js("(() => { const set = (id, v) => { const e = document.getElementById(id); e.value = v;"
                " e.dispatchEvent(new Event('change')); }; set('max-tokens', '1500');"
                " set('extra', '{\"seer\": {\"ignore_eos\": true}}'); })()")
        html = "Tell a long story about <b>cats</b> <img src=x onerror=\"window.__pwned=1\">"
        page.js("window.__seen.length = 0")
        page.type_into("input", html)
        page.press_enter()
        # the answer grows on the page while its request runs: three lengths seen while streaming
        page.wait_js("new Set(window.__seen.filter(([state, n]) => state === 'streaming' && n > 0)"
                     ".map(([state, n]) => n)).size >= 3", 60, "the third answer streaming")
        page.click("stop")
        page.wait_js("document.body.dataset.state === 'idle'", 30, "the stop")
        text3, stats3 = page.js(LAST_ANSWER)
        check("stopped" in stats3, f"the stopped answer's line: {stats3!r}")
        check(page.js("document.querySelectorAll('#log b, #log img').length") == 0 and
              page.js("window.__pwned === undefined"), "HTML in a message became elements")
        users = page.js("[...document.querySelectorAll('#log .msg.user .text')].map(e => e.textContent)")
        check(users[-1] == html, f"the message as shown: {users[-1]!r}")
        deadline = time.time() + 60
        while metrics(srv.port).get('seer_requests_finished_total{reason="cancelled"}', 0) <= cancelled0:
            if time.time() > deadline:
                fail("the server did not cancel the stopped request")
            time.sleep(0.05)
        print(f"stopped after {len(text3)} characters; the server cancelled the request")
        # a new chat forgets the conversation
        page.click("new")
        check(page.js("document.querySelectorAll('#log .msg').length") == 0, "New chat left messages")
        page.js("(() => { const set = (id, v) => { const e = document.getElementById(id); e.value = v;"
                " e.dispatchEvent(new Event('change')); }; set('max-tokens', '4'); set('extra', ''); })()")
        send_message(page, "Hi")
        body4 = page.chat_requests()[-1][0]
        check(body4["messages"] == [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Hi"}]
              and "seer" not in body4 and body4["max_tokens"] == 4, f"the first request of a new chat: {body4}")
        page.ws.close()
    finally:
        if chrome and chrome.poll() is None:
            os.killpg(chrome.pid, signal.SIGKILL)
            chrome.wait()
        shutil.rmtree(profile, ignore_errors=True)
        srv.kill()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seer", required=True)
    ap.add_argument("--model", help="default: SmolLM2-135M-Instruct from models/, else stories260K")
    ap.add_argument("--data", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data"))
    ap.add_argument("--screenshot", help="save the page with its conversation here (PNG)")
    a = ap.parse_args()
    exe = find_chromium()
    if not exe:
        print("no Chromium (Debian: chromium): skipped")
        sys.exit(SKIP)
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
    model = a.model or os.path.join(root, "models", "smollm2-135m-instruct.gguf")
    if not os.path.exists(model):
        print(f"{model} is absent (scripts/get-model.sh smollm2-135m-instruct): the page is tested on stories260K")
        model = os.path.join(a.data, "models", "stories260K.gguf")
    model_id = os.path.splitext(os.path.basename(model))[0]
    t0 = time.time()
    run(a, exe, model, model_id)
    print(f"test_chat_page: all ok ({time.time() - t0:.1f} s)")


if __name__ == "__main__":
    main()
