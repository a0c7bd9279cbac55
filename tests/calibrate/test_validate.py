"""validate's comparison and report against hand-computed numbers; its exit status."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from llmservingsim.errors import ConfigError, WorkloadError
from program_layer.validate import Record, compare, format_table, load_real, metrics, pair, violations

CELL = "examples/validation/RTXPRO6000-Llama-3.1-8B-sharegpt300-sps10"


def _rec(i, q, f, l, n=5, p=10):
    return Record((i, 0), p, n, q, f, l)


def test_vllm_definitions_from_queued():
    r = _rec(0, 1.0, 1.5, 3.5, n=5)
    assert (r.ttft, r.latency, r.tpot) == (0.5, 2.5, 0.5)
    assert _rec(0, 0, 1, 1, n=1).tpot is None


def test_compare_against_hand_computed_percentiles():
    real = [_rec(i, 0.0, t, t + 4.0, n=5) for i, t in enumerate([1.0, 2.0, 3.0, 4.0])]
    sim = [_rec(i, 0.0, t, t + 2.0, n=5) for i, t in enumerate([1.1, 2.2, 3.3, 4.4])]
    table = compare(metrics(real), metrics(sim))
    # TTFT real mean 2.5, sim 2.75: +10 %; p50 2.5 -> 2.75; p90 3.7 -> 4.07 (linear interpolation)
    assert table["ttft_s"]["mean"] == {"real": 2.5, "sim": 2.75, "error_pct": 10.0}
    assert table["ttft_s"]["p90"]["real"] == pytest.approx(3.7) and table["ttft_s"]["p90"]["sim"] == pytest.approx(4.07)
    # TPOT 1.0 -> 0.5 every request: -50 %
    assert all(v["error_pct"] == -50.0 for v in table["tpot_s"].values())
    # latency real 5,6,7,8 (mean 6.5) vs sim 3.1,4.2,5.3,6.4 (mean 4.75): -26.923 %
    assert table["latency_s"]["mean"]["error_pct"] == pytest.approx(-26.923, abs=1e-3)
    assert violations(table, 11.0, 60.0) == ["tpot_s mean -50.00% (limit 11.0%)", "latency_s mean -26.92% (limit 11.0%)"]
    assert violations(table) == []
    assert format_table(table).splitlines()[1].split() == ["ttft_s", "mean", "2.500000", "2.750000", "+10.00%"]


def test_pairing_checks_the_workload():
    real = type("R", (), {"records": [_rec(0, 0, 1, 2), _rec(1, 0, 1, 2)]})()
    with pytest.raises(ConfigError, match="2 real requests vs 1 simulated"):
        pair(real, [_rec(0, 0, 1, 2)])
    with pytest.raises(ConfigError, match="prompt/output tokens"):
        pair(real, [_rec(0, 0, 1, 2), _rec(1, 0, 1, 2, p=11)])


@pytest.mark.parametrize("line,message", [
    ('{"input_toks": 5}', "field 'output_toks'"),
    ('not json', "not JSON"),
    ('{"input_toks": 1, "output_toks": 2, "queued_ts": 3, "first_token_ts": 2, "last_token_ts": 4}', "timestamps"),
    ('{"input_toks": 1, "output_toks": 2, "queued_ts": NaN, "first_token_ts": 2, "last_token_ts": 4}', "finite"),
])
def test_bad_real_records_name_file_and_line(tmp_path, line, message):
    (tmp_path / "requests.jsonl").write_text('{"input_toks": 1, "output_toks": 2, "queued_ts": 1, '
                                             '"first_token_ts": 2, "last_token_ts": 4}\n' + line + "\n")
    with pytest.raises(WorkloadError, match=message) as e:
        load_real(tmp_path)
    assert ":2" in str(e.value)


def test_validate_report_and_exit_status(tmp_path):
    run = lambda *a: subprocess.run([sys.executable, "-m", "program_layer.cli", "validate", CELL, "--config",
                                     CELL + ".yaml", "--out", str(tmp_path), *a], capture_output=True, text=True)
    ok = run("--max-mean-err", "2", "--max-pct-err", "5")
    assert ok.returncode == 0, ok.stderr
    for f in ("validation.json", "validation.md", "validation_cdf.png", "validation_timeseries.png", "calls.csv"):
        assert (tmp_path / f).is_file()
    report = json.loads((tmp_path / "validation.json").read_text())
    assert report["requests"] == 300 and report["violations"] == []
    strict = run("--max-mean-err", "0.01", "--no-plots")
    assert strict.returncode == 1 and "outside the tolerance" in strict.stderr
    bad = run("--max-mean-err", "-1")
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1
