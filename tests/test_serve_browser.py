"""The web page in a real headless Chromium (Debian's `chromium` + `chromium-driver`, driven by
Selenium): the token asked once per tab, remember → list → recall with its channel, stored HTML
shown as text, forget, the drawer, a chat turn streamed from the real llama-server with a new
trace card and the gauge following /context, and the page saying when the chat server is down.

One browser session for the whole file (it is the slow part). Where no Chromium is installed the
tests skip saying how to get one; `.ci/run` installs it.
"""
from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

import httpx
import pytest

from conftest import FORGE_VARS
from fakeserver import closed_url
from test_serve import free_port, start_server

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
DRIVER = shutil.which("chromedriver")
TOKEN = "browser-test-token"
ROOT = Path(__file__).resolve().parent.parent

MISSING = ("needs Debian's chromium and chromium-driver (`apt-get install chromium chromium-driver`; "
           ".ci/run installs them)")

CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--no-first-run",
                  "--disable-dev-shm-usage", "--window-size=1400,1000")


@pytest.fixture(scope="session")
def browser():
    if not (CHROMIUM and DRIVER):
        if os.environ.get("FORGE_REQUIRE_BROWSER", "").strip() in ("1", "true", "yes"):
            pytest.fail(f"FORGE_REQUIRE_BROWSER=1 but this machine {MISSING}", pytrace=False)
        pytest.skip(MISSING)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in CHROMIUM_FLAGS:
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(DRIVER), options=options)
    driver.set_page_load_timeout(30)
    yield driver
    driver.quit()


@contextlib.contextmanager
def forge_server(data: Path, **env: str) -> Iterator[str]:
    """A real `forge serve` (uvicorn) on its own data folder; yields its URL."""
    base = {k: v for k, v in os.environ.items() if k not in FORGE_VARS}
    full = {**base, "FORGE_DATA_DIR": str(data), "API_TOKEN": TOKEN, **env}
    data.mkdir(parents=True, exist_ok=True)
    port = free_port()
    proc = start_server(full, data.parent, port)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@pytest.fixture(scope="module")
def offline(tmp_path_factory) -> Iterator[str]:
    """A server whose chat server is down (nothing listens at LLAMA_CPP_URL)."""
    with forge_server(tmp_path_factory.mktemp("offline") / "data", LLAMA_CPP_URL=closed_url()) as url:
        yield url


def wait(driver, condition, timeout: float = 30):
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, timeout, poll_frequency=0.1).until(lambda d: condition(d))


def by_css(driver, selector: str):
    from selenium.webdriver.common.by import By

    return driver.find_elements(By.CSS_SELECTOR, selector)


def texts(driver, selector: str) -> list[str]:
    """The text of every match, read in one script call (the page re-renders lists freely)."""
    return driver.execute_script(
        "return [...document.querySelectorAll(arguments[0])].map(e => e.textContent)", selector)


def one(driver, selector: str):
    return wait(driver, lambda d: (by_css(d, selector) or [None])[0])


def open_page(driver, url: str) -> None:
    """Load the page in a fresh tab state and give the token when it asks."""
    driver.get(url + "/")
    driver.execute_script("sessionStorage.clear()")
    driver.get(url + "/")
    form = one(driver, "#token-form")
    wait(driver, lambda d: form.is_displayed())
    one(driver, "#token-input").send_keys(TOKEN)
    one(driver, "#token-form button").click()
    wait(driver, lambda d: d.execute_script("return document.body.dataset.ready") == "1")


def remember(driver, kind: str, text: str) -> None:
    from selenium.webdriver.support.ui import Select

    Select(one(driver, "#remember-kind")).select_by_visible_text(kind)
    box = one(driver, "#remember-content")
    box.clear()
    box.send_keys(text)
    one(driver, "#remember-form button").click()
    wait(driver, lambda d: text in texts(d, "#memory-list .entry .content"))


def test_token_asked_once_then_remember_list_by_kind_and_recall_with_channel(browser, offline):
    open_page(browser, offline)
    remember(browser, "decision", "Use SQLite-vec instead of an external vector DB")
    remember(browser, "fact", "The NAS runs Debian 12 with a ZFS mirror")
    groups = {g.get_attribute("data-kind") for g in by_css(browser, "#memory-list .kind-group")}
    assert {"decision", "fact"} <= groups
    assert "decision 1" in one(browser, "#memory-counts").text

    query = one(browser, "#recall-query")
    query.send_keys("Which operating system does the NAS run?")
    one(browser, "#recall-form button").click()
    wait(browser, lambda d: any("Debian" in t for t in texts(d, "#recall-results tbody tr")))
    rows = browser.execute_script(
        "return [...document.querySelectorAll('#recall-results tbody tr')].map(r => "
        "[r.textContent, r.querySelector('.channel').textContent, r.querySelector('.distance').textContent])")
    _, channel, distance = [r for r in rows if "Debian" in r[0]][0]
    assert channel in ("vector", "both")
    assert 0 < float(distance) < 2

    # the token is kept for the tab: a reload does not ask again
    browser.get(offline + "/")
    wait(browser, lambda d: d.execute_script("return document.body.dataset.ready") == "1")
    assert not one(browser, "#token-form").is_displayed()


def test_stored_html_is_shown_as_text_never_run(browser, offline):
    open_page(browser, offline)
    evil = '<img src=x onerror="document.body.dataset.pwned=1"><b>bold</b>'
    remember(browser, "fact", evil)
    assert by_css(browser, "#memory-list img") == [] and by_css(browser, "#memory-list b") == []
    assert browser.execute_script("return document.body.dataset.pwned") is None


def test_forget_removes_the_entry(browser, offline):
    open_page(browser, offline)
    remember(browser, "todo", "Renew the domain before March")
    entry = [e for e in by_css(browser, "#memory-list .entry") if "Renew the domain" in e.text][0]
    entry.find_elements("css selector", "button")[0].click()
    wait(browser, lambda d: not any("Renew the domain" in t for t in texts(d, "#memory-list .entry")))
    listed = httpx.get(offline + "/memory", headers={"Authorization": f"Bearer {TOKEN}"}).json()
    assert not any("Renew the domain" in e["content"] for e in listed["entries"])


def test_without_a_chat_server_the_page_says_so_and_a_turn_fails_as_a_failed_card(browser, offline):
    open_page(browser, offline)
    wait(browser, lambda d: one(d, "#chat-down").is_displayed())
    assert "down" in one(browser, "#chat-status").text
    before = len(by_css(browser, "#trace-cards .card"))
    one(browser, "#chat-input").send_keys("Hello?")
    one(browser, "#chat-send").click()
    wait(browser, lambda d: d.execute_script("return document.body.dataset.lastFailed") == "true")
    assert "chat server" in one(browser, "#error").text
    cards = wait(browser, lambda d: by_css(d, "#trace-cards .card") if len(by_css(d, "#trace-cards .card")) > before else None)
    assert cards[0].get_attribute("data-state") == "failed" and "✗" in cards[0].text
    history = httpx.get(offline + "/history", headers={"Authorization": f"Bearer {TOKEN}"}).json()
    assert history == []     # the failed turn is not persisted


# The router's reply constrained by llama-server itself (`--grammar`, the server's default for
# every request; its `--json-schema` fails to build the sampler in this build): a chat envelope
# whose text is one of these, so every turn is a real streamed completion that the placeholder
# rules keep (never empty, garbled or parroted) and persist.
CHAT_REPLIES = ["Hello there, nice to meet you.", "Blue is a fine colour.",
                "Goodbye, and see you soon."]
CHAT_GRAMMAR = ('root ::= "{\\"action\\": \\"chat\\", \\"content\\": \\"" ( '
                + " | ".join(f'"{r}"' for r in CHAT_REPLIES) + ' ) "\\"}"')


@pytest.fixture(scope="module")
def constrained_chat_server(tmp_path_factory):
    from servers import running_llama_server

    with running_llama_server("chat", tmp_path_factory.mktemp("llama-constrained"),
                              extra_args=["--grammar", CHAT_GRAMMAR]) as server:
        yield server


@pytest.mark.llama
def test_a_chat_turn_streams_from_the_real_llama_server_adds_a_trace_card_and_moves_the_gauge(
        browser, constrained_chat_server, tmp_path):
    with forge_server(tmp_path / "data", LLAMA_CPP_URL=constrained_chat_server.url,
                      ENABLED_TOOLS="files,git") as url:
        open_page(browser, url)
        assert one(browser, "#chat-status").text == "chat server: up"
        for kind, text in [("decision", "Use SQLite-vec for the vectors"),
                           ("todo", "Back up the NAS every Sunday"),
                           ("fact", "The NAS runs Debian 12")]:
            remember(browser, kind, text)
        turns = 0
        for message in ["Say hello in one short sentence.", "Name one colour.", "Say goodbye."]:
            gauge_before = int(one(browser, "#gauge").get_attribute("data-tokens"))
            cards_before = len(by_css(browser, "#trace-cards .card"))
            one(browser, "#chat-input").send_keys(message)
            one(browser, "#chat-send").click()
            turns += 1
            wait(browser, lambda d: d.execute_script("return document.body.dataset.turns") == str(turns),
                 timeout=180)
            data = browser.execute_script("return {...document.body.dataset}")
            assert data["lastFailed"] == "false"
            assert int(data["lastTokens"]) > 1     # the answer arrived in pieces: it streamed
            cards = by_css(browser, "#trace-cards .card")
            assert len(cards) == cards_before + 1
            assert cards[0].get_attribute("data-state") in ("answered", "unanswered")
            assert "gemma" in cards[0].text.lower() and " ms" in cards[0].text
            context = httpx.get(url + "/context", headers={"Authorization": f"Bearer {TOKEN}"}).json()
            gauge = int(one(browser, "#gauge").get_attribute("data-tokens"))
            assert gauge == context["router_prompt"]["total"]
            assert data["lastPersisted"] == "2"      # the question and its answer
            assert gauge > gauge_before              # the persisted turn weighs on the next prompt
            assert browser.execute_script(
                "return [...document.querySelectorAll('#chat-log .msg.assistant .text')].pop().textContent"
            ) in CHAT_REPLIES
        # pin the first exchange: it shows in the drawer, and unpins from there
        first = by_css(browser, "#chat-log .msg.user")[0]
        first.find_elements("css selector", "button")[0].click()
        wait(browser, lambda d: len(by_css(d, "#drawer-list .entry")) == 2)  # the question and its answer
        one(browser, "#recall-query").send_keys("When are the NAS backups?")
        one(browser, "#recall-form button").click()
        wait(browser, lambda d: any("Sunday" in t for t in texts(d, "#recall-results tbody tr")))
        shot = os.environ.get("FORGE_SCREENSHOT")
        if shot:  # tools/screenshot: the picture in the README
            browser.save_screenshot(shot)
        by_css(browser, "#drawer-list .entry button")[-1].click()
        wait(browser, lambda d: len(by_css(d, "#drawer-list .entry")) == 1)  # unpin acts on one


ATTACK = """<!doctype html><html><body><script>
const target = "%s";
const body = JSON.stringify({kind: "fact", content: "planted by another site"});
Promise.allSettled([
  fetch(target + "/remember", {method: "POST", mode: "no-cors", body}),
  fetch(target + "/remember", {method: "POST", mode: "no-cors", body, headers: {"Content-Type": "text/plain"}}),
  fetch(target + "/remember", {method: "POST", body, headers: {"Content-Type": "application/json"}}),
  fetch(target + "/chat", {method: "POST", mode: "no-cors", body: JSON.stringify({message: "hi"})}),
  fetch(target + "/memory").then((r) => r.text()).then((t) => { document.body.dataset.read = t; }),
]).then((all) => { document.body.dataset.done = JSON.stringify(all.map((r) => r.status)); });
</script></body></html>"""


@contextlib.contextmanager
def attacker_site(target: str) -> Iterator[str]:
    """A page on another site (localhost:PORT is another site than 127.0.0.1) that posts to
    forge serve the ways a browser allows without asking first."""
    import http.server
    import threading

    page = (ATTACK % target).encode()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - the stdlib's name
            self.send_response(200)
            self.send_header("content-type", "text/html")
            self.send_header("content-length", str(len(page)))
            self.end_headers()
            self.wfile.write(page)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://localhost:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


def test_a_page_on_another_site_writes_nothing_and_reads_nothing(browser, tmp_path):
    # no API_TOKEN: the loopback default, where only the origin and Host checks stand between a
    # page the user visits and the memory
    with forge_server(tmp_path / "data", API_TOKEN="", LLAMA_CPP_URL=closed_url()) as url:
        with attacker_site(url) as evil:
            browser.get(evil)
            wait(browser, lambda d: d.execute_script("return document.body.dataset.done"))
            assert browser.execute_script("return document.body.dataset.read") is None
        listed = httpx.get(url + "/memory").json()
        history = httpx.get(url + "/history").json()
    assert listed["entries"] == [] and history == []


def test_the_memory_list_loads_a_page_at_a_time_and_filters_by_text(browser, tmp_path):
    from forge.store import rag
    from forge.core.settings import load_settings

    data = tmp_path / "data"
    base = {k: v for k, v in os.environ.items() if k not in FORGE_VARS}
    with rag.open_store(load_settings({**base, "FORGE_DATA_DIR": str(data)})) as store:
        rag.remember_many(store, [rag.NewEntry("fact", f"Paged fact {n:03d}" + (" on the NAS" if n % 25 == 0 else ""),
                                               None, "remember", None) for n in range(150)])
    with forge_server(data, LLAMA_CPP_URL=closed_url()) as url:
        open_page(browser, url)
        wait(browser, lambda d: len(by_css(d, "#memory-list .entry")) == 100)
        assert "showing 100 of 150" in one(browser, "#memory-shown").text
        one(browser, "#memory-more").click()
        wait(browser, lambda d: len(by_css(d, "#memory-list .entry")) == 150)
        assert not one(browser, "#memory-more").is_displayed()
        one(browser, "#memory-filter").send_keys("the nas")
        wait(browser, lambda d: len(by_css(d, "#memory-list .entry")) == 6)
        assert all("NAS" in t for t in texts(browser, "#memory-list .entry .content"))
        assert "showing 6 of 6" in one(browser, "#memory-shown").text


def test_the_page_marks_a_replacement_in_the_place_of_what_it_replaced(browser, tmp_path):
    """A fact changed in other words and linked (`remember --replaces`): the page's recall row
    says what the newer entry stands in for, and a question about the past what replaced the
    older one, as the CLI's table does."""
    data = tmp_path / "linked" / "data"
    env = {**{k: v for k, v in os.environ.items() if k not in FORGE_VARS},
           "FORGE_DATA_DIR": str(data)}
    for args in (("I work at Acme, in the platform team", "--at", "2023-02-01"),
                 ("Started at Globex in January as a data engineer", "--at", "2025-01-20",
                  "--replaces", "1")):
        subprocess.run([sys.executable, "-m", "forge", "remember", "fact", *args],
                       env=env, check=True, capture_output=True, timeout=120)
    with forge_server(data, LLAMA_CPP_URL=closed_url()) as url:
        open_page(browser, url)
        query = one(browser, "#recall-query")
        for question, mark in (("Where do I work?", "(in place of #1) Started at Globex"),
                               ("Where did I work before?", "(replaced by #2) I work at Acme")):
            query.clear()
            query.send_keys(question)
            one(browser, "#recall-form button").click()
            wait(browser, lambda d: mark in " ".join(texts(d, "#recall-results tbody tr")))
            assert mark in texts(browser, "#recall-results tbody tr")[0]


def test_the_page_shows_each_entrys_date_the_newer_fact_first_and_the_window(browser, tmp_path):
    """Dates where people read (issue "Forge knows when"): the memory list and recall's rows
    show each entry's date, the older of two changed facts says which row is newer, and a
    time in the question is said under the table."""
    data = tmp_path / "dated" / "data"
    env = {**{k: v for k, v in os.environ.items() if k not in FORGE_VARS},
           "FORGE_DATA_DIR": str(data)}
    for text, at in (("Le serveur a 8 Go de RAM", "2024-05-02"),
                     ("Le serveur a maintenant 24 Go de RAM", "2025-02-10")):
        subprocess.run([sys.executable, "-m", "forge", "remember", "fact", text, "--at", at],
                       env=env, check=True, capture_output=True, timeout=120)
    with forge_server(data, LLAMA_CPP_URL=closed_url()) as url:
        open_page(browser, url)
        wait(browser, lambda d: "2024-05-02" in texts(d, "#memory-list .entry .date"))
        assert "2025-02-10" in texts(browser, "#memory-list .entry .date")
        query = one(browser, "#recall-query")
        query.send_keys("Combien de RAM a le serveur ?")
        one(browser, "#recall-form button").click()
        wait(browser, lambda d: len(texts(d, "#recall-results tbody tr")) == 2)
        rows = texts(browser, "#recall-results tbody tr")
        assert "2025-02-10" in rows[0] and "24 Go" in rows[0]
        assert "2024-05-02" in rows[1] and "(older: #2 is newer)" in rows[1]
        query.clear()
        query.send_keys("Qu'avais-je noté en mai 2024 ?")
        one(browser, "#recall-form button").click()
        wait(browser, lambda d: "en mai 2024" in one(d, "#recall-note").text)
        assert "2024-05-01 to 2024-06-01" in one(browser, "#recall-note").text
