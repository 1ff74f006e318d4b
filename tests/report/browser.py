"""Headless Chromium (Debian's, installed by .ci/run) looking at a card the way a person would."""

from __future__ import annotations

from pathlib import Path

from playwright.sync_api import sync_playwright

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
]


def screenshots(pages: dict[str, Path], artifacts_dir: Path) -> dict[str, tuple[list[str], list[int]]]:
    """Open each page in headless Chromium; its console errors and image widths, and a full-page PNG."""
    out = {}
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            for name, path in pages.items():
                page = browser.new_page(viewport={"width": 1200, "height": 900})
                errors: list[str] = []
                page.on(
                    "console", lambda m, errors=errors: errors.append(m.text) if m.type == "error" else None
                )
                page.on("pageerror", lambda e, errors=errors: errors.append(str(e)))
                page.goto(path.as_uri())
                page.wait_for_load_state("load")
                widths = page.eval_on_selector_all("img", "els => els.map(e => e.naturalWidth)")
                page.screenshot(path=str(artifacts_dir / f"{name}.png"), full_page=True)
                out[name] = (errors, widths)
                page.close()
        finally:
            browser.close()
    return out
