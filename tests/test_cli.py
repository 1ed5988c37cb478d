import json
import subprocess
import sys


def cli(*args, check=True):
    p = subprocess.run([sys.executable, "-m", "engine", *args], capture_output=True, text=True, timeout=300)
    if check:
        assert p.returncode == 0, p.stderr
    return p


def test_datasets_and_mechanisms_listed():
    rows = json.loads(cli("datasets", "--json").stdout)
    assert any(r["key"] == "synthetic:polycentric" for r in rows)
    mechs = json.loads(cli("mechanisms", "--json").stdout)
    assert any(m["key"] == "identity" for m in mechs)


def test_run_json_and_csv():
    out = json.loads(cli("run", "--data-opt", "n=3000", "--depth", "5", "--epsilon", "0.5", "--no-cache").stdout)
    assert out["config"]["epsilon"] == 0.5 and out["n_points"] == 3000
    assert out["ledger"]["total_epsilon"] <= 0.5 + 1e-12
    csv_out = cli("run", "--data-opt", "n=3000", "--depth", "5", "--format", "csv", "--no-cache").stdout
    assert csv_out.splitlines()[0] == "metric,value" and any(line.startswith("mse,") for line in csv_out.splitlines())


def test_sweep_grid():
    out = json.loads(
        cli("sweep", "--data-opt", "n=2000", "--depth", "4", "--epsilons", "0.1,1", "--seeds", "2", "--no-cache").stdout
    )
    assert len(out) == 4 and {r["epsilon"] for r in out} == {0.1, 1.0} and {r["seed"] for r in out} == {0, 1}


def test_bad_input_is_one_line_error():
    p = cli("run", "--epsilon", "-3", "--data-opt", "n=100", check=False)
    assert p.returncode == 2 and p.stderr.startswith("error:") and "Traceback" not in p.stderr
    p = cli("run", "--mechanism", "nope", check=False)
    assert p.returncode == 2 and "unknown mechanism" in p.stderr
    p = cli("run", "--data-opt", "n=abc", check=False)
    assert p.returncode == 2 and "Traceback" not in p.stderr
