"""The alert rules (docker/prometheus/txn_broker_rules.yml) are valid for promtool, each
has a unit test that fires it (txn_broker_rules_test.yml, run by ``promtool test rules``),
and each is documented in docs/observability.md and docs/deployment.md."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
FOLDER = ROOT / "docker" / "prometheus"


def promtool() -> str:
    found = shutil.which("promtool")
    assert found, "promtool is missing (Debian's prometheus package): run scripts/system-deps.sh"
    return found


def rule_names() -> set[str]:
    rules = yaml.safe_load((FOLDER / "txn_broker_rules.yml").read_text())
    return {r["alert"] for g in rules["groups"] for r in g["rules"]}


def test_promtool_checks_the_rules():
    result = subprocess.run([promtool(), "check", "rules", "txn_broker_rules.yml"], cwd=FOLDER,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


def test_promtool_unit_tests_pass_and_fire_every_rule():
    result = subprocess.run([promtool(), "test", "rules", "txn_broker_rules_test.yml"], cwd=FOLDER,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    tests = yaml.safe_load((FOLDER / "txn_broker_rules_test.yml").read_text())
    fired = {case["alertname"] for test in tests["tests"] for case in test["alert_rule_test"] if case["exp_alerts"]}
    quiet = {case["alertname"] for test in tests["tests"] for case in test["alert_rule_test"]
             if not case["exp_alerts"]}
    assert fired == rule_names() and quiet == rule_names()


def test_every_rule_is_documented():
    for page in ("observability.md", "deployment.md"):
        text = (ROOT / "docs" / page).read_text()
        assert not [name for name in rule_names() if name not in text], page


def test_the_compose_prometheus_configuration_loads_the_rules(tmp_path):
    """docker/prometheus/prometheus.yml (docker-compose.yml's Prometheus), its rules path
    pointed at the repository's file: promtool accepts both."""
    config = (FOLDER / "prometheus.yml").read_text()
    assert "/etc/prometheus/txn_broker_rules.yml" in config
    (tmp_path / "prometheus.yml").write_text(
        config.replace("/etc/prometheus/txn_broker_rules.yml", str(FOLDER / "txn_broker_rules.yml")))
    result = subprocess.run([promtool(), "check", "config", str(tmp_path / "prometheus.yml")],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
