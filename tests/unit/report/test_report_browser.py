"""report.html in a real browser (headless Chromium driven by selenium): every figure decodes, nothing
overflows a 1280-px-wide window, the console stays free of errors; a screenshot is kept in the test's
tmp dir. Skips, saying why, only where Chromium, its driver or selenium is not installed (`.ci/run`
installs Debian's `chromium` and `chromium-driver`; selenium is in the `dev` extra)."""

from __future__ import annotations

import shutil

import pytest
from report_fixtures import REPO, write_tier

from fp8rl.cli import main

WIDTH = 1280
SLACK_PX = 2  # rounding of sub-pixel layout


def _browser_paths() -> tuple[str, str]:
    browser = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    driver = shutil.which("chromedriver")
    if not browser or not driver:
        pytest.skip(
            "no Chromium and chromedriver on PATH (apt-get install chromium chromium-driver; .ci/run does)"
        )
    return browser, driver


@pytest.fixture(scope="module")
def browser():
    webdriver = pytest.importorskip(
        "selenium.webdriver", reason="selenium is not installed (pip install -e '.[dev]')"
    )
    binary, driver_path = _browser_paths()
    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                f"--window-size={WIDTH},1000", "--hide-scrollbars"):  # fmt: skip
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=webdriver.ChromeService(executable_path=driver_path))
    yield driver
    driver.quit()


@pytest.fixture(scope="module")
def report_html(tmp_path_factory):
    """The report of the synthetic smoke tier (every status, every plot), built through the CLI."""
    tmp = tmp_path_factory.mktemp("browser")
    write_tier(tmp)
    results = tmp / "results"
    args = ["report", "--config", str(REPO / "config" / "smoke.yaml"), "--set", f"results_dir={results}"]
    pins = ["matrix.algorithms=[grpo, dapo]", "matrix.models=[tiny]", "matrix.granularities=[tensorwise]",
            "matrix.variants=[bf16, fp8, fp8_tis, fp8_calib]", "matrix.seeds=[0, 1]"]  # fmt: skip
    assert main([*args, *(f"--set={p}" for p in pins)]) == 0
    return results / "smoke" / "report.html"


@pytest.mark.slow
def test_report_renders_in_chromium(browser, report_html, tmp_path):
    browser.get(report_html.as_uri())  # returns once the page and its (inline) images have loaded
    images = browser.execute_script(
        "return Array.from(document.images, i => ({alt: i.alt, src: i.currentSrc.slice(0, 40),"
        " complete: i.complete, width: i.naturalWidth}))"
    )
    scroll_width, inner_width = browser.execute_script(
        "return [document.documentElement.scrollWidth, window.innerWidth]"
    )
    wide = browser.execute_script(
        "return Array.from(document.querySelectorAll('body *'))"
        ".filter(e => e.getBoundingClientRect().right > window.innerWidth + arguments[0])"
        ".slice(0, 5).map(e => e.tagName + ' ' + Math.round(e.getBoundingClientRect().right) + 'px')",
        SLACK_PX,
    )
    errors = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    shot = tmp_path / "report.png"  # the whole page: the window made as tall as the document
    height = browser.execute_script("return document.documentElement.scrollHeight")
    browser.set_window_size(WIDTH, min(height + 200, 16000))
    browser.save_screenshot(str(shot))

    assert images, "report.html has no <img>"
    broken = [i for i in images if not (i["complete"] and i["width"] > 0)]
    assert not broken, f"images that do not decode: {broken}"
    assert inner_width == WIDTH
    assert scroll_width <= inner_width + SLACK_PX, (
        f"page {scroll_width}px wide in a {inner_width}px window: {wide}"
    )
    assert not errors, f"console errors: {errors}"
    assert shot.stat().st_size > 0
