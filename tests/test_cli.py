import json
import subprocess
import sys

import pytest


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


# ---------------------------------------------------------------- bad command lines
# Each: the arguments, a fragment of the one-line message. Every case must exit 2 with that
# message on one stderr line, print nothing on stdout, and never show a traceback.
BAD = [
    (["run", "--epsilon", "abc"], "epsilon 'abc' is not a number"),
    (["run", "--epsilon", ""], "is not a number"),
    (["run", "--epsilon", "nan"], "epsilon must be a finite number"),
    (["run", "--epsilon", "inf"], "epsilon must be a finite number"),
    (["run", "--epsilon=-inf"], "epsilon must be a finite number"),
    (["run", "--epsilon=-3"], "epsilon must be between 0.0001 and 100"),
    (["run", "--epsilon", "0"], "epsilon must be between"),
    (["run", "--epsilon", "1e9"], "epsilon must be between"),
    (["run", "--seed", "-1"], "argument --seed: must be at least 0"),
    (["run", "--seed", "1.5"], "argument --seed: expected a whole number"),
    (["run", "--seed", "abc"], "argument --seed: expected a whole number"),
    (["run", "--users", "0"], "argument --users: must be at least 1"),
    (["run", "--users", "-5"], "argument --users: must be at least 1"),
    (["run", "--users", "many"], "argument --users: expected a whole number"),
    (["run", "--depth", "0"], "argument --depth: must be between 1 and 10"),
    (["run", "--depth", "11"], "argument --depth: must be between 1 and 10"),
    (["run", "--depth", "3.5"], "argument --depth: expected a whole number"),
    (["run", "--people", "2000"], "--people and --count-share choose an automatic resolution: give --depth auto"),
    (["run", "--depth", "auto", "--people", "9", "--count-share", "0.1"], "give --people (a public number) or"),
    (["run", "--depth", "auto", "--count-share", "0.9"], "argument --count-share: must be above 0 and at most 0.5"),
    (["run", "--frame-share", "0.1"], "--frame-share and --frame-quantile fit a DP frame: give --frame dp"),
    (["run", "--frame", "dp", "--frame-quantile", "0.5"], "argument --frame-quantile: must be above 0 and at most"),
    (["release", "--out", "x", "--frame", "box"], "argument --frame: invalid choice: 'box'"),
    (["run", "--data-opt", "n"], "argument --data-opt: expected KEY=VALUE"),
    (["run", "--data-opt", "=5"], "argument --data-opt: expected KEY=VALUE"),
    (["run", "--param", "top_t"], "argument --param: expected KEY=VALUE"),
    (["run", "--param", " =1"], "argument --param: expected KEY=VALUE"),
    (["run", "--param", "top_t=1", "--param", "top_t=2"], "mechanism parameter 'top_t' is given twice"),
    (["run", "--data-opt", "n=10", "--data-opt", "n=20"], "dataset option 'n' is given twice"),
    (["run", "--param", "bogus=1"], "unknown parameter(s) bogus"),
    (["run", "--param", "clip_negatives=maybe"], "'maybe' is not a valid bool"),
    (["run", "--data-opt", "bogus=1"], "unknown parameter(s) bogus"),
    (["run", "--data-opt", "n=abc"], "'abc' is not a valid int"),
    (["run", "--mechanism", "nope"], "unknown mechanism 'nope'"),
    (["run", "--dataset", "nope"], "unknown dataset 'nope'"),
    (["run", "--format", "xml"], "argument --format: invalid choice: 'xml'"),
    (["run", "--url", "ftp://127.0.0.1/x.gz"], "starts with http:// or https://"),
    (["run", "--url", "not a url"], "starts with http:// or https://"),
    (["run", "--url", "http://127.0.0.1:9/x.gz"], "--url does not apply"),
    (
        [
            "run",
            "--dataset",
            "gowalla:boston",
            "--url",
            "http://127.0.0.1:9/a.gz",
            "--data-opt",
            "url=http://127.0.0.1:9/b",
        ],
        "give the download address once",
    ),
    (["run", "--no-such-flag"], "unrecognized arguments: --no-such-flag"),
    (["run", "extra"], "unrecognized arguments: extra"),
    ([], "the following arguments are required: COMMAND"),
    (["fly"], "invalid choice: 'fly'"),
    (["sweep", "--epsilons", "a,b"], "epsilon 'a' is not a number"),
    (["sweep", "--epsilons", ""], "without empty items"),
    (["sweep", "--epsilons", "0.1,,1"], "without empty items"),
    (["sweep", "--epsilons", "0.1,nan"], "epsilon must be a finite number"),
    (["sweep", "--epsilons=0.1,-1"], "epsilon must be between"),
    (["sweep", "--epsilons", "0.1,1e5"], "epsilon must be between"),
    (["sweep", "--seeds", "-1"], "argument --seeds: must be between 1 and 1000"),
    (["sweep", "--seeds", "0"], "argument --seeds: must be between 1 and 1000"),
    (["sweep", "--seeds", "1000000000"], "argument --seeds: must be between 1 and 1000"),
    (["sweep", "--seeds", "two"], "argument --seeds: expected a whole number"),
    (["sweep", "--mechanisms", "identity,nope"], "unknown mechanism 'nope'"),
    (["sweep", "--mechanisms", ""], "without empty items"),
    (["sweep", "--mechanisms", "identity,"], "without empty items"),
    (["sweep", "--seeds", "1000", "--epsilons", ",".join(["1"] * 11)], "over the limit of 10,000"),
    (["sweep", "--param", "x"], "argument --param: expected KEY=VALUE"),
    (["sweep", "--depth", "12"], "argument --depth: must be between 1 and 10"),
    (["sweep", "--users", "0"], "argument --users: must be at least 1"),
    (["sweep", "--dataset", "nope"], "unknown dataset 'nope'"),
    (["sweep", "--mechanisms", "identity,ug", "--param", "nope=1"], "unknown parameter(s) nope"),
    (["bench", "nope"], "unknown benchmark suite 'nope'"),
    (["bench"], "the following arguments are required: suite"),
    (["bench", "core", "--bogus"], "unrecognized arguments: --bogus"),
    (["datasets", "--bogus"], "unrecognized arguments: --bogus"),
]


@pytest.mark.parametrize("argv,fragment", BAD, ids=[" ".join(a) or "(none)" for a, _ in BAD])
def test_bad_command_line_is_one_clear_line(argv, fragment, capsys):
    from engine.__main__ import main

    code = main(argv)
    out, err = capsys.readouterr()
    assert code == 2, (code, err)
    assert fragment in err
    assert err.startswith("error: ") and err.count("\n") == 1  # one line, nothing ran before it
    assert out == "" and "Traceback" not in err


@pytest.mark.parametrize(
    "argv,fragment",
    [
        (["sweep", "--epsilons", "a,b"], "epsilon 'a' is not a number"),  # printed a traceback
        (["sweep", "--seeds", "-1"], "must be between 1 and 1000"),  # printed [] and exited 0
        (["run", "--seed", "-1"], "must be at least 0"),
        (["run", "--mechanism", "nope", "--depth", "4"], "unknown mechanism"),
        (["bench", "nope"], "unknown benchmark suite"),
    ],
)
def test_bad_command_line_through_the_real_entry_point(argv, fragment):
    p = cli(*argv, check=False)
    assert p.returncode == 2 and fragment in p.stderr and p.stdout == ""
    assert "Traceback" not in p.stderr + p.stdout and p.stderr.count("\n") == 1


def test_url_reaches_the_download_for_operators(capsys):
    """``--url`` (operators only) is the address the CLI downloads from: a local listener on
    127.0.0.1 sees the request, and its 404 is one error line."""
    import http.server
    import threading

    from engine.__main__ import main

    seen = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            seen.append(self.path)
            self.send_error(404)

        def log_message(self, *a):
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{srv.server_address[1]}/operator-copy.txt.gz"
        code = main(["run", "--dataset", "gowalla:boston", "--url", url, "--depth", "4", "--no-cache"])
    finally:
        srv.shutdown()
    err = capsys.readouterr().err
    assert code == 2 and seen == ["/operator-copy.txt.gz"]
    assert err.startswith("error: ") and "404" in err and "Traceback" not in err


def test_run_of_a_file_declares_the_region_read_off_the_data(tmp_path):
    """A file's region is its points' bounding box unless a public one is given: the CLI's JSON
    ledger declares it as side information, as the dashboard and the release manifest do."""
    from engine.run.execution import REGION_FROM_DATA

    f = tmp_path / "points.csv"
    f.write_text("lat,lon\n" + "".join(f"{52.5 + i * 1e-4},{13.4 + (i % 7) * 1e-4}\n" for i in range(300)))
    base = ("--dataset", "file", "--data-opt", f"path={f}", "--depth", "5", "--no-cache", "--seed", "1")
    out = json.loads(cli("run", *base).stdout)
    assert any(REGION_FROM_DATA in s for s in out["ledger"]["side_information"])
    synthetic = json.loads(cli("run", "--data-opt", "n=300", "--depth", "5", "--no-cache", "--seed", "1").stdout)
    assert not any(REGION_FROM_DATA in s for s in synthetic["ledger"]["side_information"])  # a public region
    rel = tmp_path / "rel"
    cli("release", *base[:6], "--out", str(rel))
    assert any(REGION_FROM_DATA in s for s in json.loads((rel / "manifest.json").read_text())["side_information"])
