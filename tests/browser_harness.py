"""Debian's chromium driven by Playwright for the web UI's browser tests, and screenshots."""

import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Page, sync_playwright

from agent_run.system.home import Home
from tests.harness import TEST_CONFIG, make_home, remove_home

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
SCREENSHOTS = Path(__file__).parent.parent / "docs" / "web"


@contextmanager
def browser_page(
    width: int = 1200,
    height: int = 900,
    javascript: bool = True,
    args: tuple[str, ...] = (),
    color_scheme: str = "light",
) -> Iterator[tuple[Page, dict[str, list[Any]]]]:
    """A fresh page, and what it reported: dialogs (each dismissed), console errors, page errors.
    `javascript=False` is a browser with JS off; `args` are extra chromium switches;
    `color_scheme` is what `prefers-color-scheme` says (light or dark)."""
    if not Path(CHROMIUM).exists():
        raise AssertionError(
            "chromium is not installed: run scripts/test (it installs it with apt), "
            "or deselect these tests with -m 'not browser'"
        )
    seen: dict[str, list[Any]] = {"dialogs": [], "console_errors": [], "page_errors": []}
    with sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path=CHROMIUM, args=[*CHROMIUM_ARGS, *args], headless=True
        )
        try:
            context = browser.new_context(
                viewport={"width": width, "height": height},
                java_script_enabled=javascript,
                color_scheme=color_scheme,  # type: ignore[arg-type]
            )
            page = context.new_page()
            page.set_default_timeout(60_000)
            page.on("dialog", lambda d: (seen["dialogs"].append(d.message), d.dismiss()))
            page.on(
                "console",
                lambda m: seen["console_errors"].append(m.text) if m.type == "error" else None,
            )
            page.on("pageerror", lambda e: seen["page_errors"].append(str(e)))
            yield page, seen
        finally:
            browser.close()


def screenshot(page: Page, name: str) -> None:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=True)


@pytest.fixture(name="home")
def picker_home() -> Iterator[Home]:
    """A home whose folder picker sees /tmp, where the test repositories live."""
    h = make_home(TEST_CONFIG + '[web]\nroots = ["/tmp"]\n')
    yield h
    remove_home(h)


def sign_in(page: Page, web: Any, path: str = "/") -> None:
    """Open `path` through the printed token URL; mark the document to detect reloads."""
    page.goto(f"{web.base}{path}{'&' if '?' in path else '?'}token={web.token}")
    assert "token=" not in page.url
    page.evaluate("window.__notReloaded = true")
