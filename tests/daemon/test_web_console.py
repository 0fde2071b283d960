"""The web console in a real browser (issue 38): Debian's chromium, driven through
chromedriver by selenium, against the processes ``sova demo`` runs (a world of simulated
hosts, ``sova manager`` in recommend mode with named operator credentials, one agent per
host) on loopback.

H1 is hot from the start, so the manager proposes moving a VM to H2 after a few rounds;
the world is paused once a plan is proposed, so it cannot expire under the test. A viewer
logs in, sees the hosts and plans, and is refused (the API's 403, shown on the page) when
approving and fencing; the operator then approves the same plan and sets and clears a
fence from the page. Every step is checked against the API, not only the page. A second
manager serves TLS with a self-signed certificate, which chromium is told to trust by its
key alone: the console loads over https and an operator fences a host through it.

Screenshots go to $SOVA_CONSOLE_SCREENSHOTS (default: the test's temporary directory);
the directory is printed (``pytest -s`` or ``-rP`` shows it). ~55 s.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import os
import secrets
import shutil
import ssl
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from sova.demo import Cluster

from .conftest import DATA, REPO, free_port, report, running_cluster, wait_until
from .test_tls_guard import _cert

CHROMIUM = Path(os.environ.get("SOVA_CHROMIUM", "/usr/bin/chromium"))
CHROMEDRIVER = Path(os.environ.get("SOVA_CHROMEDRIVER", "/usr/bin/chromedriver"))
SCENARIO = DATA / "two-hosts.yaml"
OPERATOR = secrets.token_urlsafe(24)
VIEWER = secrets.token_urlsafe(24)

webdriver = pytest.importorskip(
    "selenium.webdriver", reason="selenium is not installed (it comes with the test extra)"
)
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not (CHROMIUM.exists() and CHROMEDRIVER.exists()),
        reason=f"no {CHROMIUM} or {CHROMEDRIVER}: apt-get install chromium chromium-driver "
        "(scripts/ci-setup-browser.sh does it in CI)",
    ),
]

from selenium.common.exceptions import WebDriverException  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import Select, WebDriverWait  # noqa: E402


def _digest(token: str) -> str:
    return "sha256:" + hashlib.sha256(token.encode()).hexdigest()


@pytest.fixture(scope="module")
def shots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    where = os.environ.get("SOVA_CONSOLE_SCREENSHOTS")
    path = Path(where) if where else tmp_path_factory.mktemp("console-screenshots")
    path.mkdir(parents=True, exist_ok=True)
    print(f"\nweb console screenshots: {path}")
    return path


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    tmp = tmp_path_factory.mktemp("console")
    ops = tmp / "operators.toml"
    ops.write_text(
        f'[alice]\nrole = "operator"\ntokens = ["{_digest(OPERATOR)}"]\n'
        f'[victor]\nrole = "viewer"\ntokens = ["{_digest(VIEWER)}"]\n'
    )
    ops.chmod(0o600)
    env = {"SOVA_MANAGER_MODE": "recommend", "SOVA_MANAGER_OPERATORS_FILE": str(ops)}
    with running_cluster(SCENARIO, tmp, speed=20.0, manager_env=env, show_logs="manager.log") as c:
        yield c


def _get(c: Cluster, path: str) -> Any:
    r = httpx.get(c.manager_url + path, headers=c.admin_headers, timeout=10)
    r.raise_for_status()
    return r.json()


def proposed_plan(c: Cluster) -> dict[str, Any]:
    """The open plan, the world paused so that it stays open while the test acts."""
    c.pause(False)
    found = wait_until(lambda: _get(c, "/v1/plans?state=proposed")["plans"], 90, "a proposed plan")
    c.pause()
    now = _get(c, "/v1/plans?state=proposed")["plans"]
    return dict((now or found)[0])


@contextlib.contextmanager
def chromium(tmp_path: Path, *extra: str) -> Iterator[Any]:
    opts = webdriver.ChromeOptions()
    opts.binary_location = str(CHROMIUM)
    profile = tempfile.mkdtemp(prefix="chromium-", dir=tmp_path)
    # Headless as root; no background connections (this machine's network is closed and
    # chromium would retry them), and a fresh profile: no sessionStorage carried over.
    for flag in (
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-dev-shm-usage",
        f"--user-data-dir={profile}",
        "--window-size=1400,1400",
        *extra,
    ):
        opts.add_argument(flag)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=opts, service=webdriver.ChromeService(str(CHROMEDRIVER)))
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        with contextlib.suppress(WebDriverException):
            driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[Any]:
    with chromium(tmp_path) as driver:
        yield driver


def _wait(driver: Any, what: str, pred: Any, timeout: float = 20) -> Any:
    return WebDriverWait(driver, timeout).until(pred, message=f"the page never showed {what}")


def act(driver: Any, button: str, what: str, pred: Any) -> None:
    """Click ``button``, wait for ``what`` and for the tables the page reloads after
    every action (the message shows before they are redrawn: a row read in between
    would be replaced under the reader)."""
    before = driver.find_element(By.TAG_NAME, "body").get_attribute("data-loaded")
    driver.find_element(By.ID, button).click()
    _wait(driver, what, pred)
    _wait(
        driver,
        f"the tables reloaded after {what}",
        lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-loaded") != before,
    )


def log_in(driver: Any, url: str, token: str, who: str) -> None:
    driver.get(url + "/console")  # redirected to /console/
    field = _wait(driver, "the login form", lambda d: d.find_element(By.ID, "token"))
    field.send_keys(token)
    driver.find_element(By.ID, "login-button").click()
    _wait(driver, who, lambda d: who in d.find_element(By.ID, "whoami").text)
    _wait(
        driver,
        "loaded tables",
        lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-loaded"),
    )
    # The token is in the tab's sessionStorage, not in the address or the page.
    assert token not in driver.current_url
    assert driver.execute_script("return sessionStorage.getItem('sova-console-token')") == token
    assert token not in driver.page_source


def rows(driver: Any, table: str) -> list[list[str]]:
    out = []
    for tr in driver.find_elements(By.CSS_SELECTOR, f"#{table} tbody tr"):
        out.append([td.text for td in tr.find_elements(By.TAG_NAME, "td")])
    return out


def message(driver: Any) -> str:
    m = driver.find_element(By.ID, "message")
    return str(m.text) if m.is_displayed() else ""


def page_errors(driver: Any) -> list[str]:
    """The browser console's errors but the refusals the test asked for (a policy
    violation or a script error would be here)."""
    return [
        e["message"]
        for e in driver.get_log("browser")
        if e["level"] == "SEVERE"
        and "status of 403" not in e["message"]
        and "status of 401" not in e["message"]
    ]


def test_a_wrong_token_is_refused_at_login(cluster: Cluster, browser: Any, shots: Path) -> None:
    browser.get(cluster.manager_url + "/console/")
    browser.find_element(By.ID, "token").send_keys("not-a-token-" + "x" * 20)
    browser.find_element(By.ID, "login-button").click()
    _wait(browser, "the 401", lambda d: "401" in message(d))
    assert "invalid operator token" in message(browser)
    assert browser.find_element(By.ID, "login").is_displayed()
    assert not browser.find_element(By.ID, "console").is_displayed()
    assert browser.execute_script("return sessionStorage.getItem('sova-console-token')") is None
    browser.save_screenshot(str(shots / "0-wrong-token.png"))
    assert page_errors(browser) == []


def test_a_viewer_sees_hosts_and_plans_but_approve_and_fence_are_refused(
    cluster: Cluster, browser: Any, shots: Path
) -> None:
    c = cluster
    plan = proposed_plan(c)
    log_in(browser, c.manager_url, VIEWER, "victor (viewer)")
    hosts = {r[0] for r in rows(browser, "hosts")}
    assert hosts == {"H1", "H2"}
    shown = {r[0]: r[1] for r in rows(browser, "plans")}
    assert shown.get(str(plan["id"])) == "proposed", shown
    browser.save_screenshot(str(shots / "1-viewer-hosts-and-plans.png"))

    act(browser, f"approve-{plan['id']}", "the 403", lambda d: "403" in message(d))
    text = message(browser)
    assert "Refused (403 Forbidden)" in text and "role viewer" in text and "needs operator" in text
    browser.save_screenshot(str(shots / "2-viewer-approve-refused.png"))
    assert _get(c, f"/v1/plans/{plan['id']}")["state"] == "proposed"  # nothing changed

    Select(browser.find_element(By.ID, "fence-kind")).select_by_value("maintenance")
    browser.find_element(By.ID, "fence-name").send_keys("H2")
    act(
        browser,
        "fence-set",
        "the 403",
        lambda d: "PUT /v1/fences/maintenance/H2 needs operator" in message(d),
    )
    browser.save_screenshot(str(shots / "3-viewer-fence-refused.png"))
    assert _get(c, "/v1/fences") == []
    assert page_errors(browser) == []


def test_an_operator_approves_a_plan_and_sets_and_clears_a_fence(
    cluster: Cluster, browser: Any, shots: Path
) -> None:
    c = cluster
    plan = proposed_plan(c)
    (move,) = plan["actions"]
    log_in(browser, c.manager_url, OPERATOR, "alice (operator)")
    by_host = {r[0]: r for r in rows(browser, "hosts")}
    assert set(by_host) == {"H1", "H2"}
    assert by_host["H1"][7].startswith("hot"), by_host["H1"]  # the host the plan relieves
    summary = browser.find_element(By.ID, "cluster-summary").text
    assert "open plans: 1" in summary and "this manager: leader" in summary, summary
    browser.save_screenshot(str(shots / "4-operator-hosts-and-plans.png"))

    act(
        browser,
        f"approve-{plan['id']}",
        "the approval",
        lambda d: f"Plan {plan['id']}: approved." in message(d),
    )
    after = _get(c, f"/v1/plans/{plan['id']}")
    assert (after["state"], after["decided_by"]) == ("approved", "alice")
    row = next(r for r in rows(browser, "plans") if r[0] == str(plan["id"]))
    assert row[1] == "approved" and row[6] == "alice"
    assert not browser.find_elements(By.ID, f"approve-{plan['id']}")  # no longer open
    # The manager's decision to signal the approved move, newest first.
    assert rows(browser, "decisions")[0][5] == (
        f"plan {plan['id']} approved by alice: move {move['vm']} to {move['dst']}"
    )
    browser.save_screenshot(str(shots / "5-operator-approved.png"))

    # A pin on a VM the plan does not move (the approved move is left as it is).
    vm = next(v for v in ("D", "E", "C", "B") if v != move["vm"])
    Select(browser.find_element(By.ID, "fence-kind")).select_by_value("pin")
    browser.find_element(By.ID, "fence-name").send_keys(vm)
    browser.find_element(By.ID, "fence-reason").send_keys("licence bound to this host")
    act(browser, "fence-set", "the fence", lambda d: f"Fence set: pin on {vm}." in message(d))
    (fence,) = _get(c, "/v1/fences")
    assert (fence["kind"], fence["name"], fence["set_by"]) == ("pin", vm, "alice")
    assert fence["reason"] == "licence bound to this host"
    assert [r[:3] for r in rows(browser, "fences")] == [["pin", vm, "alice"]]
    audit = [r[3] for r in rows(browser, "audit")]
    assert "approve" in " ".join(audit) and "fence" in " ".join(audit), audit
    browser.save_screenshot(str(shots / "6-operator-fence-set.png"))

    act(
        browser,
        f"clear-pin-{vm}",
        "the cleared fence",
        lambda d: f"Fence cleared: pin on {vm}." in message(d),
    )
    assert _get(c, "/v1/fences") == []
    assert rows(browser, "fences") == [["none"]]
    browser.save_screenshot(str(shots / "7-operator-fence-cleared.png"))
    assert page_errors(browser) == []


# --------------------------------------------------------------------------- over TLS

TLS_TOKENS = {"a0": "console-tls-a0-" + "k" * 16, "a1": "console-tls-a1-" + "k" * 16}


def _spki_sha256(cert: Path) -> str:
    """The base64 SHA-256 of the certificate's public key: chromium trusts this one key
    (--ignore-certificate-errors-spki-list), not every certificate."""
    pem = subprocess.run(
        ["openssl", "x509", "-in", str(cert), "-pubkey", "-noout"],
        check=True, capture_output=True, timeout=30,
    ).stdout  # fmt: skip
    der = subprocess.run(
        ["openssl", "pkey", "-pubin", "-outform", "der"],
        input=pem, check=True, capture_output=True, timeout=30,
    ).stdout  # fmt: skip
    return base64.b64encode(hashlib.sha256(der).digest()).decode()


@contextlib.contextmanager
def manager_process(
    tmp: Path, database_url: str, cert: tuple[Path, Path] | None
) -> Iterator[tuple[str, ssl.SSLContext | bool]]:
    """A ``sova manager`` process with the operators file (alice, operator) and the two
    hosts of TLS_TOKENS, serving TLS when given a certificate; yields its URL and what
    verifies it."""
    ops = tmp / "operators.toml"
    ops.write_text(f'[alice]\nrole = "operator"\ntokens = ["{_digest(OPERATOR)}"]\n')
    ops.chmod(0o600)
    port = free_port()
    lines = [
        'listen = "127.0.0.1"',
        f"port = {port}",
        f'database_url = "{database_url}"',
        "plan_period_s = 0",
        'log_level = "warning"',
        f'operators_file = "{ops}"',
        *([f'tls_certfile = "{cert[0]}"', f'tls_keyfile = "{cert[1]}"'] if cert else []),
        *(f'[hosts."{h}"]\ntoken = "{t}"' for h, t in TLS_TOKENS.items()),
    ]
    cfg = tmp / "m.toml"
    cfg.write_text("\n".join(lines) + "\n")
    log = tmp / "manager.log"
    p = subprocess.Popen(
        [sys.executable, "-m", "sova.cli_daemons", "manager", "--config", str(cfg)],
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
        cwd=REPO,
        env={k: v for k, v in os.environ.items() if not k.startswith("SOVA_")},
    )
    url = f"{'https' if cert else 'http'}://127.0.0.1:{port}"
    verify: ssl.SSLContext | bool = (
        ssl.create_default_context(cafile=str(cert[0])) if cert else True
    )
    try:
        wait_until(
            lambda: httpx.get(url + "/healthz", verify=verify, timeout=2).status_code == 200,
            60,
            "the manager",
        )
        yield url, verify
    finally:
        p.terminate()
        try:
            p.wait(10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(10)
        print(log.read_text()[-3000:])


def post_reports(url: str, verify: ssl.SSLContext | bool, host: str, seqs: range) -> list[float]:
    """Reports of ``host`` through the agents' route, as its agent sends them; returns the
    link use of each: 0.1 times its sequence number (seqs up to 10: a share of the link)."""
    sent = []
    for seq in seqs:
        net = round(0.1 * seq, 2)
        r = httpx.post(
            f"{url}/v1/hosts/{host}/reports",
            content=report(seq, time.time(), (0.2, 0.3, net)),
            headers={
                "authorization": f"Bearer {TLS_TOKENS[host]}",
                "content-type": "application/json",
            },
            verify=verify,
            timeout=10,
        )
        assert r.status_code == 200, r.text
        sent.append(net)
    return sent


@pytest.fixture(scope="module")
def tls_manager(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """A ``sova manager`` process serving TLS (self-signed), with the operators file, and
    two hosts that reported over TLS."""
    tmp = tmp_path_factory.mktemp("console-tls")
    cert = _cert(tmp)
    with manager_process(tmp, f"sqlite:///{tmp / 'm.db'}", cert) as (url, verify):
        for host in TLS_TOKENS:
            post_reports(url, verify, host, range(1, 2))
        yield url, cert[0]


def test_the_console_is_served_over_the_managers_tls(
    tls_manager: tuple[str, Path], tmp_path: Path, shots: Path
) -> None:
    url, cert = tls_manager
    with chromium(tmp_path, f"--ignore-certificate-errors-spki-list={_spki_sha256(cert)}") as b:
        log_in(b, url, OPERATOR, "alice (operator)")
        assert b.execute_script("return window.location.protocol") == "https:"
        assert b.execute_script("return window.isSecureContext") is True
        assert {r[0] for r in rows(b, "hosts")} == {"a0", "a1"}
        Select(b.find_element(By.ID, "fence-kind")).select_by_value("maintenance")
        b.find_element(By.ID, "fence-name").send_keys("a1")
        act(b, "fence-set", "the fence", lambda d: "Fence set: maintenance on a1." in message(d))
        b.save_screenshot(str(shots / "8-tls-operator-fence-set.png"))
        act(
            b,
            "clear-maintenance-a1",
            "the cleared fence",
            lambda d: "Fence cleared: maintenance on a1." in message(d),
        )
        assert page_errors(b) == []


def sparklines(driver: Any) -> dict[str, tuple[int, str]]:
    """Host -> (points of its link-use polyline, the chart's title)."""
    out = {}
    for tr in driver.find_elements(By.CSS_SELECTOR, "#hosts tbody tr"):
        svg = tr.find_element(By.CSS_SELECTOR, "svg.spark")
        lines = svg.find_elements(By.TAG_NAME, "polyline")
        points = len(lines[0].get_attribute("points").split()) if lines else 0
        title = svg.find_element(By.TAG_NAME, "title").get_attribute("textContent")
        out[tr.get_attribute("data-host")] = (points, title)
    return out


def test_each_host_shows_its_link_use_over_the_reports_the_manager_holds(
    tls_manager: tuple[str, Path], tmp_path: Path, shots: Path
) -> None:
    """a0 has reported 3 times, a1 8 times: the planner holds a0's 3 and a1's last 5
    (n = 5), and each host's chart has one point per report held, its values in order."""
    url, cert = tls_manager
    verify = ssl.create_default_context(cafile=str(cert))
    sent = {"a0": [0.1], "a1": [0.1]}  # the fixture's first report of each
    sent["a0"] += post_reports(url, verify, "a0", range(2, 4))
    sent["a1"] += post_reports(url, verify, "a1", range(2, 9))
    r = httpx.get(url + "/v1/cluster/history", headers={"authorization": f"Bearer {OPERATOR}"},
                  verify=verify, timeout=10)  # fmt: skip
    held = {h["host"]: h["net"] for h in r.json()["hosts"]}
    assert held == {"a0": sent["a0"], "a1": sent["a1"][-5:]}, held
    with chromium(tmp_path, f"--ignore-certificate-errors-spki-list={_spki_sha256(cert)}") as b:
        log_in(b, url, OPERATOR, "alice (operator)")
        charts = sparklines(b)
        assert {h: p for h, (p, _) in charts.items()} == {"a0": 3, "a1": 5}
        # The chart's title lists the values it draws, oldest first: 40 %, 50 %, ... 80 %.
        assert charts["a1"][1].endswith("oldest first: 40 %, 50 %, 60 %, 70 %, 80 %"), charts
        assert "last 3 of 5 reports" in charts["a0"][1], charts
        managers = b.find_element(By.ID, "managers").text
        assert managers.startswith(f"leader: this manager, {url}, no epoch (SQLite"), managers
        b.save_screenshot(str(shots / "9-hosts-link-use-sparklines.png"))
        assert page_errors(b) == []


PG_URL = os.environ.get("SOVA_TEST_PG_URL")


@pytest.mark.skipif(
    not PG_URL, reason="no PostgreSQL server: set SOVA_TEST_PG_URL (see scripts/ci-postgres.sh)"
)
def test_the_leader_line_shows_the_leaders_epoch(tmp_path: Path, shots: Path) -> None:
    """A manager on PostgreSQL leads at the store's epoch (1 in a fresh schema); the page
    names it as the leader with that epoch, as its /readyz says."""
    from .test_leadership import pg_schema

    with (
        pg_schema("console") as (db, _schema, _admin),
        manager_process(tmp_path, db, None) as (
            url,
            _,
        ),
    ):
        ready = wait_until(
            lambda: (
                (b := httpx.get(url + "/readyz", timeout=2).json()).get("role") == "leader" and b
            ),
            60,
            "the manager to lead",
        )
        post_reports(url, True, "a0", range(1, 3))
        with chromium(tmp_path) as b:
            log_in(b, url, OPERATOR, "alice (operator)")
            managers = b.find_element(By.ID, "managers").text
            assert managers.startswith(f"leader: this manager, {url}, epoch {ready['epoch']} "), (
                managers
            )
            assert ready["epoch"] == 1
            assert "standbys: not known to the leader" in managers
            assert sparklines(b)["a0"][0] == 2
            b.save_screenshot(str(shots / "10-leader-epoch.png"))
            assert page_errors(b) == []
