"""Chargeback rates: the setting (file, environment), its errors, and the topology's price."""

from __future__ import annotations

from pathlib import Path

import pytest

from hpcscope.model.errors import ConfigError
from hpcscope.model.topology import load_topology
from hpcscope.service.chargeback.reads import rates_of
from hpcscope.service.settings import bundled_topology, load_settings

H100 = "NVIDIA H100 80GB HBM3"


def test_rates_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HPCSCOPE_CHARGEBACK_GPU_HOUR_RATES", f"{H100}=3.25, A100-SXM4=1.5")
    settings = load_settings()
    assert settings.chargeback_gpu_hour_rates == {H100: 3.25, "A100-SXM4": 1.5}
    rates = rates_of(settings, load_topology(bundled_topology()))
    assert rates.for_model(H100) == 3.25
    assert rates.for_model("L40S") == rates.default_gpu_hour == 2.5
    assert rates.currency == "USD"


def test_rates_from_a_file(tmp_path: Path) -> None:
    path = tmp_path / "site.yaml"
    path.write_text(f"chargeback_gpu_hour_rates:\n  {H100}: 4\n", encoding="utf-8")
    assert load_settings(path).chargeback_gpu_hour_rates == {H100: 4.0}


@pytest.mark.parametrize("text", ["H100", "H100=cheap", "=2", "H100=-1"])
def test_bad_rates_name_the_setting(monkeypatch: pytest.MonkeyPatch, text: str) -> None:
    monkeypatch.setenv("HPCSCOPE_CHARGEBACK_GPU_HOUR_RATES", text)
    with pytest.raises(ConfigError) as raised:
        load_settings()
    assert "chargeback_gpu_hour_rates" in str(raised.value)
